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

# --- scripts/specgraph: "building" only when the build compiles or links (issue 28): an
# up-to-date program runs without a word, --help too. The stub cmake's dry run (-n) lists what
# STUB_DRY says, its build prints what STUB_REAL says: as Ninja does, the dry run of an
# up-to-date tree lists the build-info step and what depends on its header, which the real
# build then skips.
mkdir -p "$tmp/bin2" "$tmp/built/tools"
cat >"$tmp/bin2/cmake" <<'STUB'
#!/bin/sh
info="cd /b/tools && /usr/bin/cmake -DSOURCE_DIR=/s -P /s/cmake/SpecgraphBuildInfo.cmake"
for a; do
  if [ "$a" = -n ]; then
    echo "[1/4] $info"
    case "${STUB_DRY:-}" in
      header) printf '%s\n' "[2/4] Building CXX object tools/CMakeFiles/specgraph_cli.dir/run_report.cpp.o" \
        "[3/4] Linking CXX static library tools/libspecgraph_cli.a" \
        "[4/4] Linking CXX executable tools/specgraph" ;;
      source) echo "[2/2] Building CXX object tools/CMakeFiles/specgraph_cli.dir/run_command.cpp.o" ;;
    esac
    exit 0
  fi
done
echo "[1/1] $info"
[ -n "${STUB_REAL:-}" ] && echo "[2/2] Building CXX object tools/CMakeFiles/specgraph_cli.dir/run_report.cpp.o"
exit 0
STUB
printf '#!/bin/sh\necho "usage: specgraph (stub) $*"\n' >"$tmp/built/tools/specgraph"
chmod +x "$tmp/bin2/cmake" "$tmp/built/tools/specgraph"
: >"$tmp/built/CMakeCache.txt"
: >"$tmp/built/build.ninja"
wrapper() { PATH="$tmp/bin2:$PATH" SPECGRAPH_BUILD_DIR="$tmp/built" "$root/scripts/specgraph" "$@"; }
for dry in "" header; do
  out=$(STUB_DRY=$dry wrapper --help 2>"$tmp/err")
  rc=$?
  check "specgraph: an up-to-date program runs (--help) without saying it builds (dry run: ${dry:-info step})" \
    $([ "$rc" -eq 0 ] && [ "$out" = "usage: specgraph (stub) --help" ] && [ ! -s "$tmp/err" ]
      echo $?) "rc=$rc out=$out err=$(cat "$tmp/err")"
done
err=$(STUB_DRY=source wrapper --help 2>&1 >/dev/null)
check "specgraph: says it builds when a source is to compile" \
  $(contains "$err" "specgraph: building $tmp/built/tools/specgraph"; echo $?) "$err"
err=$(STUB_DRY=header STUB_REAL=1 wrapper --help 2>&1 >/dev/null)
check "specgraph: says it builds when the build-info header really changed" \
  $(contains "$err" "specgraph: building $tmp/built/tools/specgraph"; echo $?) "$err"

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

# Without SPECGRAPH_BENCH_PYTHON the python3 on PATH plots (an active venv's, where
# `pip install matplotlib` put it; issue 28), not /usr/bin/python3.
mkdir -p "$tmp/venv-nompl/bin" "$tmp/venv-ok/bin"
real_python=$(command -v python3)
printf '#!/bin/sh\nPYTHONPATH="%s" exec "%s" "$@"\n' "$tmp/nompl" "$real_python" \
  >"$tmp/venv-nompl/bin/python3"
chmod +x "$tmp/venv-nompl/bin/python3"
cp "$tmp/bin/py-ok" "$tmp/venv-ok/bin/python3"
err=$(env -u SPECGRAPH_BENCH_PYTHON PATH="$tmp/venv-nompl/bin:$PATH" \
  "$root/scripts/run-benchmarks.sh" "$tmp/out" "$tmp/no-build" 2>&1)
rc=$?
check "run-benchmarks: the python3 on PATH is the one checked, and named with its pip" \
  $([ "$rc" -eq 2 ] &&
    contains "$err" "$tmp/venv-nompl/bin/python3 has no module named 'matplotlib'" &&
    contains "$err" "$tmp/venv-nompl/bin/python3 -m pip install matplotlib"; echo $?) "rc=$rc $err"
err=$(env -u SPECGRAPH_BENCH_PYTHON PATH="$tmp/venv-ok/bin:$PATH" \
  "$root/scripts/run-benchmarks.sh" "$tmp/out" "$tmp/no-build" 2>&1)
rc=$?
check "run-benchmarks: a python3 on PATH with matplotlib is used (then the programs are named)" \
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
