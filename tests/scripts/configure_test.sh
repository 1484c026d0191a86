#!/usr/bin/env bash
# What configure does when a test dependency is missing (issue 28, items 9 and 10), on scratch
# build folders (host-only, so no CUDA toolkit is needed; run by .ci/run: measured 2 min 9 s of
# CPU (user) from empty folders on the 2-core machine, 14 s once the main job's folder is built,
# 2026-12-02 at a load average of 10 to 20 from other builds):
#  1. the main job: GoogleTest and Google Benchmark hidden, scripts/specgraph's configure
#     succeeds with one warning for each, and scripts/specgraph builds and runs the program;
#  2. the test presets (host here; ci and asan set the same variable) refuse the same machine,
#     naming the package and how to install it;
#  3. the ci preset with a Python that cannot import tvm_ffi fails configure with the fix;
#  4. a build outside the ci preset lists python.pytest as skipped, with the reason.
#   usage: tests/scripts/configure_test.sh [SCRATCH_DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=${1:-}
if [ -z "$tmp" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
fi
# Fresh configure folders (a reused SCRATCH_DIR keeps only the main job's build).
rm -rf "$tmp/host" "$tmp/ci" "$tmp/skip" "$tmp/bare"
failures=0
check() {  # check NAME CONDITION-EXIT-STATUS [context]
  if [ "$2" -ne 0 ]; then
    echo "FAIL: $1${3:+ ($3)}"
    failures=$((failures + 1))
  else
    echo "ok: $1"
  fi
}
contains() { grep -qF -- "$2" <<<"$1"; }
one_line() { tr -s ' \n' ' ' <<<"$1"; }  # CMake wraps its messages

# A Python without tvm_ffi (a bare venv of the python3 on PATH), wherever tvm_ffi is installed.
python3 -m venv --without-pip "$tmp/bare" || { echo "FAIL: python3 -m venv"; exit 1; }
bare=$tmp/bare/bin/python
launcher=()
command -v ccache >/dev/null 2>&1 &&
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
hide=(-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON)
# Configures without the caller's venv, so only -DPython_EXECUTABLE picks the Python.
cfg() { env -u VIRTUAL_ENV cmake "$@" 2>&1; }

# --- 1. the main job without GoogleTest and Google Benchmark.
out=$(cfg -S "$root" -B "$tmp/main" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DSPECGRAPH_ENABLE_CUDA=OFF -DPython_EXECUTABLE="$bare" "${hide[@]}" "${launcher[@]}")
rc=$?
text=$(one_line "$out")
check "main job: configure succeeds without the test libraries" $([ "$rc" -eq 0 ]; echo $?) \
  "rc=$rc $out"
check "main job: says GoogleTest is missing, what is off and how to install it" \
  $(contains "$text" "specgraph: GoogleTest not found: SPECGRAPH_BUILD_TESTS is off for this build" &&
    contains "$text" "apt-get install libgtest-dev libgmock-dev"; echo $?) "$text"
check "main job: says Google Benchmark is missing and how to install it" \
  $(contains "$text" "specgraph: Google Benchmark not found: SPECGRAPH_BUILD_BENCH is off" &&
    contains "$text" "apt-get install libbenchmark-dev"; echo $?) "$text"
check "main job: no test or benchmark targets" \
  $([ -f "$tmp/main/build.ninja" ] && ! grep -qE '^build (tests|bench)/' "$tmp/main/build.ninja"
    echo $?)
# scripts/specgraph over that configured folder: builds the program (nothing of the tests) and
# runs it.
err=$(SPECGRAPH_BUILD_DIR="$tmp/main" "$root/scripts/specgraph" plan --max-batch 4 --topk 2 \
  --steps 2 --page-size 4 --max-context 64 2>&1 >"$tmp/plan.out")
rc=$?
check "main job: scripts/specgraph builds and runs the program" \
  $([ "$rc" -eq 0 ] && grep -qE "^arena: [0-9]+ bytes in one allocation" "$tmp/plan.out"; echo $?) \
  "rc=$rc $err $(tail -5 "$tmp/main/specgraph-build.log" 2>/dev/null)"

# --- 2. the test presets require them.
out=$(cd "$root" && cfg --preset host -B "$tmp/host" -DPython_EXECUTABLE="$bare" "${hide[@]}")
rc=$?
text=$(one_line "$out")
check "host preset: configure fails without GoogleTest, naming it and the fix" \
  $([ "$rc" -ne 0 ] && contains "$text" "specgraph: GoogleTest not found; the test command needs it" &&
    contains "$text" "apt-get install libgtest-dev libgmock-dev"; echo $?) "rc=$rc $text"
for preset in ci asan; do
  check "$preset preset: requires the test libraries too" \
    $(python3 -c "import json, sys
p = {c['name']: c for c in json.load(open('$root/CMakePresets.json'))['configurePresets']}
sys.exit(p['$preset']['cacheVariables'].get('SPECGRAPH_REQUIRE_TEST_DEPS') != 'ON')"; echo $?)
done

# --- 3. the ci preset with a Python that cannot import tvm_ffi (CUDA off: only the Python part
# of the preset is under test, and no toolkit is needed).
out=$(cd "$root" && cfg --preset ci -B "$tmp/ci" -DSPECGRAPH_ENABLE_CUDA=OFF \
  -DPython_EXECUTABLE="$bare")
rc=$?
text=$(one_line "$out")
check "ci preset: configure fails when tvm_ffi cannot be imported, with the fix" \
  $([ "$rc" -ne 0 ] && contains "$text" "the ci preset runs the Python suite, but $bare cannot import tvm_ffi" &&
    contains "$text" "pip install apache-tvm-ffi scikit-build-core pytest numpy"; echo $?) \
  "rc=$rc $text"

# --- 4. outside the ci preset: python.pytest is there, reported skipped with the reason.
out=$(cfg -S "$root" -B "$tmp/skip" -G Ninja -DSPECGRAPH_ENABLE_CUDA=OFF -DPython_EXECUTABLE="$bare")
rc=$?
check "a build without tvm_ffi configures" $([ "$rc" -eq 0 ]; echo $?) "rc=$rc $out"
out=$(ctest --test-dir "$tmp/skip" -R '^python\.pytest$' -V 2>&1)
check "a build without tvm_ffi lists python.pytest as skipped, with the reason" \
  $(contains "$out" "python.pytest ...." && contains "$out" "Skipped" &&
    contains "$out" "skipped: the Python package is not built: $bare cannot import tvm_ffi"
    echo $?) "$out"

[ "$failures" -eq 0 ] && echo "configure_test: all passed" && exit 0
echo "configure_test: $failures failed"
exit 1
