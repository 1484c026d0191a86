#!/usr/bin/env bash
# Runs the three benchmark programs with JSON output and turns the JSON into PNG plots and a
# Markdown summary. Usage: scripts/run-benchmarks.sh [out-dir] [build-dir]
# (defaults: bench-results/ and build/; build first with `cmake --workflow --preset ci`).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results}
build=${2:-build}
min_time=${SPECGRAPH_BENCH_MIN_TIME:-0.2}
mkdir -p "$out"
for b in bench_metadata bench_graphs bench_throughput; do
  echo "== $b"
  "$build/bench/$b" --benchmark_min_time="$min_time" --benchmark_out="$out/$b.json" \
    --benchmark_out_format=json >"$out/$b.txt"
done
# The system Python carries matplotlib (Debian's python3-matplotlib).
py=/usr/bin/python3
[ -x "$py" ] || py=python3
"$py" scripts/plot_bench.py "$out" "$out"
