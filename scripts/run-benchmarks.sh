#!/usr/bin/env bash
# Runs the three benchmark programs with JSON output and turns the JSON into PNG plots and a
# Markdown summary.
#   usage: scripts/run-benchmarks.sh [OUT_DIR] [BUILD_DIR]
#   OUT_DIR    where the results go (default: the repository's bench-results/, git-ignored). A directory holding
#              files git tracks (the published numbers, docs/bench/cpu) is refused: a run never
#              overwrites them; copy a run's files there by hand to publish it.
#   BUILD_DIR  a build with the benchmarks (default: the repository's build/, made by
#              cmake --workflow --preset ci)
# Environment: SPECGRAPH_BENCH_PYTHON (the Python that plots, default: the python3 on PATH, so
# an active venv's, else /usr/bin/python3; it needs matplotlib), SPECGRAPH_BENCH_MIN_TIME
# (seconds per benchmark, default 0.2).
# Everything it needs is checked first, so a missing piece fails in a second, not after the runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Relative paths are the caller's (defaults: relative to the repository).
out=$(realpath -m -- "${1:-$root/bench-results}")
build=$(realpath -m -- "${2:-$root/build}")
cd "$root"
min_time=${SPECGRAPH_BENCH_MIN_TIME:-0.2}
benches=(bench_metadata bench_graphs bench_throughput)
fail() {
  echo "run-benchmarks: error: $*" >&2
  exit 2
}

# 1. The output directory: not the published numbers.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ -d "$out" ] &&
  [ -n "$(git ls-files -- "$out" | head -n 1)" ]; then
  fail "$out holds files git tracks (published results): a run does not overwrite them;" \
    "name another directory (default bench-results/) and copy the files there by hand to publish"
fi
# 2. The plotting Python and its packages.
# The python3 on PATH first: after the `pip install matplotlib` the message below asks for, the
# Python it went into (an active venv's) is the one that plots.
py=${SPECGRAPH_BENCH_PYTHON:-}
if [ -z "$py" ]; then
  py=$(command -v python3 || true)
  [ -n "$py" ] || py=/usr/bin/python3
fi
command -v "$py" >/dev/null 2>&1 || fail "no Python at '$py' (set SPECGRAPH_BENCH_PYTHON)"
if ! missing=$("$py" -c 'import importlib
missing = []
for name in ("matplotlib",):
    try:
        importlib.import_module(name)
    except ImportError:
        missing.append(name)
print(" ".join(missing))
raise SystemExit(1 if missing else 0)' 2>&1); then
  fail "$py has no module named '${missing}': install it (pip install ${missing}, into that" \
    "Python: $py -m pip install ${missing}; or the distribution's python3-${missing}) or point" \
    "SPECGRAPH_BENCH_PYTHON at a Python that has it"
fi
# 3. The benchmark programs.
for b in "${benches[@]}"; do
  [ -x "$build/bench/$b" ] || fail "$build/bench/$b is missing: build the benchmarks first" \
    "(cmake --workflow --preset ci, or cmake --build $build), or name the build directory" \
    "as the second argument"
done
mkdir -p "$out" 2>/dev/null && [ -w "$out" ] || fail "cannot write into '$out'"

for b in "${benches[@]}"; do
  echo "== $b -> $out/$b.json"
  "$build/bench/$b" --benchmark_min_time="$min_time" --benchmark_out="$out/$b.json" \
    --benchmark_out_format=json >"$out/$b.txt"
done
"$py" scripts/plot_bench.py "$out" "$out"
echo "results: $out/ (summary.md, *.json, *.png)"
