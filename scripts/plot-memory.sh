#!/usr/bin/env bash
# Draws KV cache bytes against context, a flat cache against kvring's plan, for gemma-3-27b,
# gpt-oss-120b, gemma-3n-e4b and llama-3.1-8b (bf16, batch 512, one sequence), from
# `kvring-plan --sweep`, with gnuplot. Writes docs/memory.png (or the path given).
#
#   bash scripts/plot-memory.sh [OUTPUT.png]
#
# Builds kvring-plan with the release preset unless KVRING_PLAN names a built one; installs
# Debian's gnuplot-nox when gnuplot is missing. The test suite does not need gnuplot.
set -euo pipefail
cd "$(dirname "$0")/.."
output="${1:-docs/memory.png}"

if [ -z "${KVRING_PLAN:-}" ]; then
  bash scripts/install-deps.sh
  cmake --preset release >/dev/null
  cmake --build --preset release --target kvring-plan >/dev/null
  KVRING_PLAN=build/release/tools/kvring-plan
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

# Each model at its full context, sampled 64 times.
models=(gemma-3-27b gpt-oss-120b gemma-3n-e4b llama-3.1-8b)
steps=(2048 2048 512 2048)
plots=""
for i in "${!models[@]}"; do
  model="${models[$i]}"
  "$KVRING_PLAN" --preset "$model" --sweep --sweep-step "${steps[$i]}" >"$work/$model.csv"
  # The title states both sizes at the full context: the last line of the sweep.
  last="$(tail -n 1 "$work/$model.csv")"
  title="$(echo "$last" | awk -F, -v m="$model" '{
    if ($2 == $3) {
      printf "%s at %dk tokens: kvring = flat = %.2f GiB (every layer global)", m, $1 / 1024, $2 / 2^30
    } else {
      printf "%s at %dk tokens: kvring %.2f GiB, flat %.2f GiB", m, $1 / 1024, $2 / 2^30, $3 / 2^30
    }
  }')"
  xmax="$(echo "$last" | awk -F, '{ print $1 / 1024 }')"
  # kvring first, so that the dashed flat line stays visible where the two coincide.
  plots+="set title \"$title\"
set xrange [0:$xmax]
plot \"$work/$model.csv\" every ::1 using (\$1/1024):(\$2/2**30) with lines lw 3 lc rgb '#1f5fa8' title 'kvring', \\
     \"\" every ::1 using (\$1/1024):(\$3/2**30) with lines dt 2 lw 2.5 lc rgb '#c0392b' title 'flat cache'
"
done

gnuplot <<EOF
set terminal pngcairo size 1400,1000 font "DejaVu Sans,12" linewidth 1
set output "$output"
set datafile separator ","
set multiplot layout 2,2 title "KV cache per sequence against context: flat cache and kvring (bf16, batch 512)" font ",15"
set xlabel "context (thousands of tokens)"
set ylabel "KV cache (GiB)"
set key top left box opaque
set grid lc rgb '#dddddd'
set yrange [0:*]
$plots
unset multiplot
EOF
echo "wrote $output"
