#!/usr/bin/env bash
# Checks kvring-plan's reading of config.json files against transformers itself
# (check_configs.py), in a chroot of Debian's unstable release, which packages transformers and
# torch (Debian 12 does not). Run as root from the project root, after building kvring-plan:
#
#   bash tools/transformers/run.sh [KVRING_PLAN] [FILE...]
#   bash tools/transformers/run.sh --fixtures [FAMILY...]
#
# KVRING_PLAN defaults to build/dev/tools/kvring-plan; FILE... to every config file of
# tests/configs (the family files, the presets' files and the bad files). --fixtures writes
# tests/transformers/<family>.json again (attention_fixtures.py: what transformers' attention
# computes, for tests/transformers_semantics_test.cc), every family or those named. The first run
# debootstraps the chroot into ${KVRING_SID:-/srv/sid} (about 2.3 GB, a few minutes); later runs
# reuse it. Exit status 0 when every file agrees (see check_configs.py).
set -euo pipefail

sid=${KVRING_SID:-/srv/sid}
root=$(pwd)
fixtures=false
if [[ ${1:-} == --fixtures ]]; then
  fixtures=true
  shift
else
  plan=${1:-build/dev/tools/kvring-plan}
  shift || true
  if [[ $# -eq 0 ]]; then
    set -- tests/configs/*.json tests/configs/presets/*.json tests/configs/bad/*.json
  fi
  [[ -x $plan ]] || { echo "run.sh: $plan is not built (cmake --build --preset dev --target kvring-plan)" >&2; exit 2; }
fi

if [[ ! -x $sid/usr/bin/python3 ]] || ! chroot "$sid" python3 -c "import transformers, torch" 2>/dev/null; then
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
  mkdir -p "$sid"
  debootstrap --variant=minbase --include=python3-transformers,python3-torch sid "$sid" \
    http://deb.debian.org/debian
fi
mountpoint -q "$sid/proc" || mount -t proc proc "$sid/proc"
mkdir -p "$sid/work/kvring"
mountpoint -q "$sid/work/kvring" || mount --bind "$root" "$sid/work/kvring"
trap 'umount "$sid/work/kvring" || true' EXIT
if $fixtures; then
  chroot "$sid" bash -c 'cd /work/kvring && python3 tools/transformers/attention_fixtures.py "$@"' \
    fixtures tests/transformers "$@" 2>&1 | grep -v '^\[transformers\]\|^\[ERROR\]'
else
  chroot "$sid" bash -c 'cd /work/kvring && python3 tools/transformers/check_configs.py "$@"' \
    check --kvring-plan "$plan" "$@" 2>&1 | grep -v '^\[transformers\]\|^\[ERROR\]'
fi
exit "${PIPESTATUS[0]}"
