#!/usr/bin/env bash
# One script for a GPU machine (an H200, sm_90) that fits in about 8 minutes:
#   1. builds GoogleTest / Google Benchmark from .deps/ when the machine lacks them
#      (scripts/bundle-deps.sh prepares .deps/ on a CPU machine);
#   2. builds specgraph for sm_90;
#   3. runs the whole test suite with REQUIRE_GPU=1 (a skipped cuda test is a failure);
#   4. runs the cuda tests again under compute-sanitizer --tool memcheck;
#   5. runs the benchmarks (JSON);
# writes logs and JSON into the results folder (argument, or SPECGRAPH_GPU_RESULTS, default
# ./gpu-results/) and prints a short summary table last. Exit status: non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
results=$(realpath -m "${1:-${SPECGRAPH_GPU_RESULTS:-./gpu-results}}")
mkdir -p "$results"
jobs=$(nproc)
build=build-gpu
prefix=$PWD/.deps/prefix
declare -A status

step() {  # step NAME COMMAND...: runs, logs to $results/NAME.log, records pass/fail
  local name=$1
  shift
  local t0=$(date +%s)
  if "$@" >"$results/$name.log" 2>&1; then status[$name]="ok"; else status[$name]="FAILED"; fi
  status[$name]+=" ($(( $(date +%s) - t0 )) s)"
  echo "== $name: ${status[$name]}"
}

{ date -u; git rev-parse HEAD 2>/dev/null || echo "(no git)"; nvidia-smi 2>&1 || true; nvcc --version; } \
  >"$results/machine.txt" 2>&1

deps() {
  local have_gtest=0
  cmake --find-package -DNAME=GTest -DCOMPILER_ID=GNU -DLANGUAGE=CXX -DMODE=EXIST >/dev/null 2>&1 && have_gtest=1
  if [ $have_gtest = 0 ] && [ ! -f "$prefix/lib/cmake/GTest/GTestConfig.cmake" ]; then
    [ -d .deps/googletest ] || { echo "no GoogleTest here and no .deps/googletest (run scripts/bundle-deps.sh)"; return 1; }
    cmake -S .deps/googletest -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$prefix" && cmake --build /tmp/gtest-build -j "$jobs" &&
      cmake --install /tmp/gtest-build || return 1
  fi
  if [ ! -f "$prefix/lib/cmake/benchmark/benchmarkConfig.cmake" ] && ls .deps/benchmark_*.orig.tar.gz >/dev/null 2>&1; then
    rm -rf /tmp/benchmark-src && mkdir -p /tmp/benchmark-src &&
      tar -xzf .deps/benchmark_*.orig.tar.gz -C /tmp/benchmark-src --strip-components=1 &&
      cmake -S /tmp/benchmark-src -B /tmp/benchmark-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DBENCHMARK_ENABLE_TESTING=OFF -DBENCHMARK_ENABLE_GTEST_TESTS=OFF \
        -DCMAKE_INSTALL_PREFIX="$prefix" && cmake --build /tmp/benchmark-build -j "$jobs" &&
      cmake --install /tmp/benchmark-build || return 1
  fi
}
step deps deps

step build bash -c "cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECGRAPH_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH='$prefix' && cmake --build $build -j $jobs"

step tests env REQUIRE_GPU=1 ctest --test-dir "$build" --output-on-failure -j 4 \
  --output-junit "$results/ctest-junit.xml"

sanitize() {
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not found"; return 1; }
  local failed=0
  for t in "$build"/tests/*_test; do
    [ -x "$t" ] || continue
    echo "--- $t"
    # Fewer random cases: memcheck slows kernels down by orders of magnitude.
    REQUIRE_GPU=1 SPECGRAPH_PROPERTY_CASES=200 compute-sanitizer --tool memcheck --error-exitcode 99 \
      "$t" --gtest_filter='*cuda*:*Cuda*' || failed=1
  done
  return $failed
}
step sanitizer sanitize

benchmarks() {
  local ran=0
  for b in "$build"/bench/bench_*; do
    [ -x "$b" ] || continue
    ran=1
    "$b" --benchmark_out="$results/$(basename "$b").json" --benchmark_out_format=json \
      --benchmark_min_time=0.02 || return 1
  done
  [ $ran = 1 ] || { echo "no benchmark programs were built"; return 1; }
}
step benchmarks benchmarks

echo
echo "specgraph GPU check — $(date -u +%F) — commit $(git rev-parse --short HEAD 2>/dev/null)"
printf '%-12s %s\n' step result
rc=0
for s in deps build tests sanitizer benchmarks; do
  printf '%-12s %s\n' "$s" "${status[$s]:-not run}"
  case "${status[$s]:-}" in ok*) ;; *) rc=1 ;; esac
done
grep -E "tests passed|tests failed" "$results/tests.log" | tail -1
echo "results in $results"
exit $rc
