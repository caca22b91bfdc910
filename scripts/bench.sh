#!/usr/bin/env bash
# Runs every benchmark and records the results: builds the release preset's benchmark binaries
# (one per bench/*_bench.cc), runs each with Google Benchmark's JSON output into docs/bench/,
# then renders the summary table (ratios to the headroom twins, ring against flat) with the
# machine and the commit into the marked section of docs/benchmarks.md.
#
#   bash scripts/bench.sh                                   # everything (about 4 minutes + build)
#   bash scripts/bench.sh --benchmark_filter=Decode         # arguments go to every binary
#
# Environment: KVRING_BENCH_BUILD_DIR uses an already configured build directory instead of the
# release preset; KVRING_BENCH_OUT (default docs/bench) and KVRING_BENCH_DOC (default
# docs/benchmarks.md) redirect the outputs, for trial runs.
# Measure on an idle machine: the figures are wall times.
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir="${KVRING_BENCH_OUT:-docs/bench}"
doc="${KVRING_BENCH_DOC:-docs/benchmarks.md}"

targets=()
for source in bench/*_bench.cc; do
  targets+=("kvring_$(basename "${source%.cc}")")
done

if [[ -n "${KVRING_BENCH_BUILD_DIR:-}" ]]; then
  build_dir="$KVRING_BENCH_BUILD_DIR"
  cmake --build "$build_dir" --target "${targets[@]}"
else
  bash scripts/install-deps.sh
  build_dir=build/release
  cmake --preset release >/dev/null
  cmake --build --preset release --target "${targets[@]}"
fi

mkdir -p "$out_dir"
load="$(cut -d' ' -f1-3 /proc/loadavg)"
jsons=()
for target in "${targets[@]}"; do
  binary="$build_dir/bench/$target"
  json="$out_dir/$target.json"
  echo "== $target -> $json"
  "$binary" --benchmark_out="$json" --benchmark_out_format=json "$@"
  jsons+=("$json")
done

python3 scripts/bench_summary.py --doc "$doc" --load "$load" --command "bash scripts/bench.sh $*" \
  "${jsons[@]}"
echo "summary written to $doc"
