#!/usr/bin/env bash
# Draws the server loop's K/V memory over its steps, from `serve --csv` (examples/serve, its
# default run unless options follow): the pool's bytes in use under its budget against one
# KVCache per running request and their flat caches, and the requests running and waiting,
# with gnuplot. Writes docs/serve_memory.png (or the path given).
#
#   bash scripts/plot-serve.sh [OUTPUT.png [SERVE OPTIONS...]]
#
# Builds serve with the release preset unless KVRING_SERVE names a built one; installs Debian's
# gnuplot-nox when gnuplot is missing. The test suite does not need gnuplot.
set -euo pipefail
cd "$(dirname "$0")/.."
output="${1:-docs/serve_memory.png}"
shift || true

if [ -z "${KVRING_SERVE:-}" ]; then
  bash scripts/install-deps.sh
  cmake --preset release >/dev/null
  cmake --build --preset release --target serve >/dev/null
  KVRING_SERVE=build/release/examples/serve
fi
if ! command -v gnuplot >/dev/null; then
  echo "kvring: installing gnuplot-nox"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends gnuplot-nox
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The run must pass its checks (every request bit-identical to its run alone) to be drawn.
"$KVRING_SERVE" --csv="$work/serve.csv" "$@" >"$work/serve.txt" 2>/dev/null || {
  cat "$work/serve.txt"
  echo "kvring: serve failed; nothing drawn" >&2
  exit 1
}
# The title: the run's requests, backend and budget, and the pool's peak against one KVCache
# per request at the same step.
backend="$(awk '/backend on target/ { print $1 }' "$work/serve.txt")"
requests="$(awk '/^  requests:/ { print $2 }' "$work/serve.txt")"
title="$(awk -F, -v backend="$backend" -v requests="$requests" 'NR > 1 {
    if ($4 > peak) { peak = $4; kvcache = $5; running = $7 }
    budget = $3
  } END {
    printf "%s requests on one KVPool of %.0f MiB (%s): at its peak %.2f MiB in use for %d running, one KVCache each %.2f MiB", requests, budget / 2^20, backend, peak / 2^20, running, kvcache / 2^20
  }' "$work/serve.csv")"

gnuplot <<EOF
set terminal pngcairo size 1400,900 font "DejaVu Sans,12" linewidth 1
set output "$output"
set datafile separator ","
set multiplot title "$title" font ",14"
set grid lc rgb '#dddddd'
set key bottom center box opaque
set lmargin 10
set rmargin 4

set size 1,0.62
set origin 0,0.33
set ylabel "K/V bytes (MiB)"
set format x ""
set yrange [0:*]
plot "$work/serve.csv" every ::1 using 1:(\$6/2**20) with lines dt 3 lw 2 lc rgb '#7f8c8d' title 'flat caches, one per running request', \\
     "" every ::1 using 1:(\$5/2**20) with lines dt 2 lw 2.5 lc rgb '#c0392b' title 'one KVCache per running request', \\
     "" every ::1 using 1:(\$4/2**20) with lines lw 3 lc rgb '#1f5fa8' title 'KVPool, bytes in use', \\
     "" every ::1 using 1:(\$3/2**20) with lines dt 4 lw 1.5 lc rgb '#000000' title 'budget'

set size 1,0.33
set origin 0,0.0
set key top right
set ylabel "requests"
set xlabel "step"
set format x "%g"
set yrange [0:*]
plot "$work/serve.csv" every ::1 using 1:7 with lines lw 2.5 lc rgb '#1f5fa8' title 'running', \\
     "" every ::1 using 1:8 with lines lw 2 lc rgb '#e67e22' title 'waiting'
unset multiplot
EOF
echo "wrote $output"
