#!/usr/bin/env bash
# The scripts a new user runs first (issue 18): scripts/specgraph says that it builds and shows
# the compiler's errors when the build fails; scripts/run-benchmarks.sh checks what it needs
# before running anything, names a missing package and never writes into the published results.
# A stub `cmake` and stub Pythons stand in for the real ones, so nothing is built here.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
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

# --- scripts/specgraph: a build that fails prints the compiler's errors, exit status 1.
mkdir -p "$tmp/bin" "$tmp/build"
cat >"$tmp/bin/cmake" <<'STUB'
#!/bin/sh
echo "FAILED: tools/CMakeFiles/specgraph_cli.dir/run_command.cpp.o"
echo "run_command.cpp:12:3: error: expected ';' before 'return'"
exit 1
STUB
chmod +x "$tmp/bin/cmake"
: >"$tmp/build/CMakeCache.txt"
err=$(PATH="$tmp/bin:$PATH" SPECGRAPH_BUILD_DIR="$tmp/build" "$root/scripts/specgraph" run 2>&1 >/dev/null)
rc=$?
check "specgraph: a failed build exits 1" $([ "$rc" -eq 1 ]; echo $?) "rc=$rc"
check "specgraph: says it builds" $(contains "$err" "specgraph: building"; echo $?) "$err"
check "specgraph: prints the compiler's error" \
  $(contains "$err" "error: expected ';' before 'return'"; echo $?) "$err"
rm -f "$tmp/build/CMakeCache.txt"
err=$(PATH="$tmp/bin:$PATH" SPECGRAPH_BUILD_DIR="$tmp/build" "$root/scripts/specgraph" run 2>&1 >/dev/null)
rc=$?
check "specgraph: a failed configure exits 1 with its output" \
  $([ "$rc" -eq 1 ] && contains "$err" "specgraph: configuring" &&
    contains "$err" "run_command.cpp:12:3: error"; echo $?) "rc=$rc $err"

# --- scripts/run-benchmarks.sh: a Python without matplotlib fails at once, naming it.
mkdir -p "$tmp/nompl/matplotlib"
echo 'raise ModuleNotFoundError("No module named matplotlib (stub)")' \
  >"$tmp/nompl/matplotlib/__init__.py"
cat >"$tmp/bin/py-nompl" <<STUB
#!/bin/sh
PYTHONPATH="$tmp/nompl" exec python3 "\$@"
STUB
chmod +x "$tmp/bin/py-nompl"
start=$(date +%s)
err=$(SPECGRAPH_BENCH_PYTHON="$tmp/bin/py-nompl" "$root/scripts/run-benchmarks.sh" "$tmp/out" \
  "$tmp/no-build" 2>&1)
rc=$?
took=$(($(date +%s) - start))
check "run-benchmarks: missing matplotlib exits 2" $([ "$rc" -eq 2 ]; echo $?) "rc=$rc $err"
check "run-benchmarks: names matplotlib and how to install it" \
  $(contains "$err" "no module named 'matplotlib': install it (pip install matplotlib"; echo $?) \
  "$err"
check "run-benchmarks: fails within a few seconds" $([ "$took" -le 5 ]; echo $?) "${took}s"
check "run-benchmarks: nothing written" $([ ! -e "$tmp/out" ]; echo $?)

# A Python with everything, but no benchmark programs: named before anything runs.
printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/py-ok"
chmod +x "$tmp/bin/py-ok"
err=$(SPECGRAPH_BENCH_PYTHON="$tmp/bin/py-ok" "$root/scripts/run-benchmarks.sh" "$tmp/out" \
  "$tmp/no-build" 2>&1)
rc=$?
check "run-benchmarks: a missing benchmark program is named" \
  $([ "$rc" -eq 2 ] && contains "$err" "$tmp/no-build/bench/bench_metadata is missing"; echo $?) \
  "rc=$rc $err"

# The published results (tracked by git) are never the output directory.
if git -C "$root" ls-files --error-unmatch docs/bench/cpu/summary.md >/dev/null 2>&1; then
  before=$(cd "$root" && git ls-files -s docs/bench/cpu && stat -c %Y docs/bench/cpu/*)
  err=$(SPECGRAPH_BENCH_PYTHON="$tmp/bin/py-ok" "$root/scripts/run-benchmarks.sh" \
    "$root/docs/bench/cpu" 2>&1)
  rc=$?
  after=$(cd "$root" && git ls-files -s docs/bench/cpu && stat -c %Y docs/bench/cpu/*)
  check "run-benchmarks: refuses the published docs/bench/cpu" \
    $([ "$rc" -eq 2 ] && contains "$err" "holds files git tracks" && [ "$before" = "$after" ]
      echo $?) "rc=$rc $err"
else
  echo "skipped: the published results check (not a git checkout)"
fi

[ "$failures" -eq 0 ] && echo "first_hour_test: all passed" && exit 0
echo "first_hour_test: $failures failed"
exit 1
