#!/usr/bin/env bash
# Configures, builds and runs kvring's whole test suite: the debug build (unit tests, tool
# tests, header checks with g++ and clang++, consumer projects, fuzz targets, the examples'
# checks), then the same tests under AddressSanitizer + UndefinedBehaviorSanitizer, and the
# threading tests under ThreadSanitizer, and the 64-bit ARM cross build with its tests under
# qemu-aarch64 (NEON, SVE and SVE2 targets). Compilations go through ccache (a clean clone
# reuses what an earlier clone compiled). Prints how long each stage took.
#   bash scripts/test.sh              every workflow: dev, asan, tsan, aarch64
#   bash scripts/test.sh asan tsan    only those (any of dev, asan, tsan, aarch64, in that order)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

workflows=("$@")
[ ${#workflows[@]} -gt 0 ] || workflows=(dev asan tsan aarch64)
extras=()
for workflow in "${workflows[@]}"; do
  case "$workflow" in
    dev | asan | tsan) ;;
    aarch64) extras+=(aarch64) ;;
    *) echo "scripts/test.sh: unknown workflow '$workflow' (dev, asan, tsan or aarch64)" >&2
       exit 2 ;;
  esac
done
bash scripts/install-deps.sh "${extras[@]}"

# One cache for every build of the suite, the consumer projects and fuzz targets it starts, and
# every clone on this machine: paths below the clone are hashed relative to it.
if command -v ccache > /dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="$root"
  export CCACHE_NOHASHDIR=true  # debug info's directory: not a reason to compile again
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  # ccache's own default, also where the environment has no HOME.
  export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/ccache}"
  ccache --zero-stats > /dev/null
fi

stages=()
report() {
  local status=$?
  if [ ${#stages[@]} -gt 0 ]; then
    echo "kvring tests: time per stage"
    printf '  %s\n' "${stages[@]}"
    printf '  %-18s %5d s\n' total $(( $(date +%s) - start ))
  fi
  if command -v ccache > /dev/null; then
    ccache --print-stats 2> /dev/null |
      awk -F'\t' '$1 ~ /^(direct_cache_hit|preprocessed_cache_hit|cache_miss)$/ {
                    printf "%s%s %s", sep, $1, $2; sep = ", " } END { if (sep) print "" }' |
      sed 's/^/kvring tests: ccache /'
  fi
  return $status
}
trap report EXIT

# Runs one stage (its name, then the command) and records how long it took.
stage() {
  local name=$1 begin
  shift
  begin=$(date +%s)
  echo "kvring tests: $name"
  "$@"
  stages+=("$(printf '%-18s %5d s' "$name" $(( $(date +%s) - begin )))")
}

start=$(date +%s)
for workflow in "${workflows[@]}"; do
  stage "$workflow configure" cmake --preset "$workflow"
  stage "$workflow build" cmake --build --preset "$workflow"
  stage "$workflow test" ctest --preset "$workflow"
done
