#!/usr/bin/env bash
# Part of scripts/gpu-check.sh (sourced in step mode): the machine, deps, build and tests steps.
# shellcheck disable=SC2317,SC2034

# =================================================================================================
# Steps. Each runs in its own process (this script with --step NAME) under `timeout`, its output in
# $SG_LOGS/NAME.log. It reports through its exit status (0 ok, EX_SKIP, EX_REFUSED, else failed),
# `note TEXT` (one line for the summary) and `count KEY VALUE` (numbers or short strings).
# =================================================================================================
note() { printf '%s\n' "$*" | tee "$SG_WORK/notes/$SG_STEP"; }
count() { printf '%s=%s\n' "$1" "$2" >>"$SG_WORK/counts/$SG_STEP"; }      # a number when it looks like one
count_str() { printf '%s~%s\n' "$1" "$2" >>"$SG_WORK/counts/$SG_STEP"; }  # always a string
dry_skip() { note "skipped (dry run): needs a GPU"; exit $EX_SKIP; }
banner() { echo; echo "---- $*"; }
have() { command -v "$1" >/dev/null 2>&1; }
# The Python package as ctest's python.pytest runs it: the source tree's files, the extension the
# build step built, tvm_ffi from the deps step (py_path), the CLI the plan tests compare with.
# No CUDA_MODULE_LOADING=EAGER here (the C++ binaries and benchmarks set it): under EAGER every
# torch process loads all of torch's kernels at start (seconds, hundreds of MB each), and Python
# never runs the time_device path EAGER protects; the cuda executor loads the library's own
# kernels when it is made (ctest's cuda.time_device_first_launch_lazy_loading checks that).
py_path() { local d; d=$(cat "$SG_WORK/pydeps" 2>/dev/null); echo "$SG_ROOT/python${d:+:$d}"; }
py_lib() { echo "$SG_BUILD/python/specgraph/libspecgraph_ext.so"; }
py_env() {
  local rec=()
  [ -f "$SG_BUILD/tests/libnvtx_recorder.so" ] &&
    rec=("SPECGRAPH_NVTX_RECORDER=$SG_BUILD/tests/libnvtx_recorder.so")
  env PYTHONPATH="$(py_path)" SPECGRAPH_LIB="$(py_lib)" SPECGRAPH_CLI="$SG_BUILD/tools/specgraph" \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 REQUIRE_GPU=1 \
    "${rec[@]}" "$@"
}

step_machine() {
  echo "commit: $SG_COMMIT_DESCRIBE ($SG_COMMIT, from $SG_COMMIT_SOURCE)"
  date -u
  uname -a
  echo "cores: $(nproc)"
  free -g 2>/dev/null | head -2
  head -2 /etc/os-release 2>/dev/null
  count cpus "$(nproc)"
  local glibc
  glibc=$(ldd --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$')
  count_str glibc "${glibc:-unknown}"
  local rc=0 gpu=""
  banner nvidia-smi
  if have nvidia-smi && nvidia-smi; then
    gpu=$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
    echo "query: $gpu"
    local cc
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
    count_str gpu "$(echo "$gpu" | cut -d, -f1 | sed 's/^ *//')"
    count_str compute_cap "${cc:-unknown}"
    count_str driver "$(echo "$gpu" | cut -d, -f3 | tr -d ' ')"
    [[ $cc =~ ^[0-9]+\.[0-9]+$ ]] && echo "${cc/./}" >"$SG_WORK/cuda_arch"
  else
    echo "no usable nvidia-smi"
    [ "$SG_DRY" = 1 ] || rc=1
  fi
  local t v
  for t in "nvcc --version" "c++ --version" "cmake --version" "ninja --version" "python3 --version" \
      "compute-sanitizer --version" "ctest --version"; do
    banner "$t ($(command -v "${t%% *}" || echo 'not on PATH'))"
    $t 2>&1 | head -6
  done
  v=$(nvcc --version 2>/dev/null | grep -oE 'release [0-9.]+' | cut -d' ' -f2)
  count_str nvcc "${v:-none}"
  v=$(cmake --version 2>/dev/null | head -1 | awk '{print $3}')
  count_str cmake "${v:-none}"
  v=$(c++ --version 2>/dev/null | head -1)
  count_str cxx "${v:-none}"
  local tools
  tools="nvcc $(nvcc --version 2>/dev/null | grep -oE 'release [0-9.]+' | cut -d' ' -f2), cmake $(cmake --version 2>/dev/null | head -1 | awk '{print $3}')"
  if [ $rc = 0 ]; then
    note "${gpu:-no GPU (dry run)}; $tools"
  else
    note "nvidia-smi failed: no usable GPU; $tools"
  fi
  [ "$SG_DRY" = 1 ] || have nvcc || { note "no nvcc on PATH"; rc=1; }
  return $rc
}

# Unpack .deps/debs into $SG_BUILD/_deps (once per bundle), then prove that CMake resolves
# GoogleTest and Google Benchmark there and that a program linking both builds and runs. If the
# prebuilt GoogleTest does not link on this machine, rebuild it from the googletest sources package.
# The Python package's build and tests need tvm_ffi: the image's own, else the bundled wheel
# (.whl/, scripts/bundle-deps.sh) installed offline into $SG_BUILD/_pydeps, leaving the image's
# Python untouched. apache-tvm-ffi requires typing-extensions>=4.13: with the image's copy recent
# enough the wheel goes in with --no-deps, else the bundled typing-extensions wheel goes in too.
# Writes the folder to add to PYTHONPATH (empty for the image's own) to $SG_WORK/pydeps.
setup_tvm_ffi() {
  local target=$SG_BUILD/_pydeps wheel
  : >"$SG_WORK/pydeps"
  banner "tvm_ffi for the Python package"
  have python3 || { echo "no python3"; return 1; }
  if python3 -c "import tvm_ffi" 2>/dev/null; then
    echo "tvm_ffi: the image's ($(python3 -c 'import tvm_ffi, os; print(os.path.dirname(tvm_ffi.__file__))'))"
    count_str tvm_ffi image
    return 0
  fi
  if [ -d "$target" ] && PYTHONPATH=$target python3 -c "import tvm_ffi" 2>/dev/null; then
    echo "tvm_ffi: already installed in $target"
    echo "$target" >"$SG_WORK/pydeps"
    count_str tvm_ffi bundled
    return 0
  fi
  wheel=$(ls .whl/apache_tvm_ffi-*.whl 2>/dev/null | head -1)
  [ -n "$wheel" ] || { echo "no tvm_ffi in the image and no .whl/apache_tvm_ffi-*.whl"; return 1; }
  local deps=(--no-deps)
  if python3 "$SG_ROOT/scripts/gpu-check/has_version.py" typing_extensions 4.13; then
    echo "the image's typing-extensions satisfies apache-tvm-ffi: installing it with --no-deps"
  else
    echo "the image's typing-extensions is missing or older than 4.13: the bundled one goes in too"
    deps=(--find-links .whl)
  fi
  rm -rf "$target"
  if python3 -m pip --version >/dev/null 2>&1; then
    python3 -m pip install --no-index --disable-pip-version-check -q "${deps[@]}" \
      --target "$target" "$wheel" || return 1
  else  # no pip in the image: a wheel is a zip of the installed files
    echo "no pip: unpacking the wheels into $target"
    local w
    for w in "$wheel" $([ "${deps[0]}" = --no-deps ] || ls .whl/typing_extensions-*.whl 2>/dev/null); do
      python3 -m zipfile -e "$w" "$target" || return 1
    done
  fi
  PYTHONPATH=$target python3 -c "import tvm_ffi" || return 1
  echo "$target" >"$SG_WORK/pydeps"
  count_str tvm_ffi bundled
}

step_deps() {
  local prefix=$SG_BUILD/_deps
  setup_tvm_ffi || { echo "tvm_ffi unavailable: the Python steps will say so"; count_str tvm_ffi none; }
  local debs=(.deps/debs/*.deb)
  : >"$SG_WORK/deps.args"
  if [ ! -e "${debs[0]}" ]; then
    if [ "$SG_DRY" = 1 ]; then
      echo "no .deps/debs: the dry run uses this machine's GoogleTest and Google Benchmark"
      note "skipped: no .deps/debs (run scripts/bundle-deps.sh); using the system packages"
      probe_deps system && exit $EX_SKIP
      note "no .deps/debs and no system GoogleTest/Google Benchmark: run scripts/bundle-deps.sh"
      return 1
    fi
    echo "no .deps/debs; trying the system's packages"
    if probe_deps system; then
      note "no .deps/debs: the system's GoogleTest and Google Benchmark work"
      return 0
    fi
    note "no .deps/debs and no usable system packages: run scripts/bundle-deps.sh, carry .deps"
    return 1
  fi
  cat .deps/debs/MANIFEST 2>/dev/null
  local stamp
  stamp=$(ls -l --time-style=+%s "${debs[@]}" | awk '{print $5, $6, $7}' | cksum)
  if [ "$(cat "$prefix/.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "already unpacked in $prefix"
  else
    rm -rf "$prefix" && mkdir -p "$prefix" || return 1
    local f
    for f in "${debs[@]}"; do
      echo "unpack $f"
      if have dpkg-deb; then
        dpkg-deb -x "$f" "$prefix" || return 1
      else  # a .deb is an ar archive holding data.tar.{xz,zst,gz}: tar detects which
        local tmp member
        tmp=$(mktemp -d) && member=$(ar t "$f" | grep '^data\.tar') &&
          (cd "$tmp" && ar x "$(cd "$SG_ROOT" && realpath "$f")" "$member") &&
          tar -xf "$tmp/$member" -C "$prefix" || return 1
        rm -rf "$tmp"
      fi
    done
    echo "$stamp" >"$prefix/.stamp"
  fi
  count packages "${#debs[@]}"
  local gtest_dir bench_dir
  gtest_dir=$(dirname "$(find "$prefix" -name GTestConfig.cmake | head -1)")
  bench_dir=$(dirname "$(find "$prefix" -name benchmarkConfig.cmake | head -1)")
  echo "GTest_DIR=$gtest_dir"
  echo "benchmark_DIR=$bench_dir"
  [ -f "$gtest_dir/GTestConfig.cmake" ] && [ -f "$bench_dir/benchmarkConfig.cmake" ] ||
    { note "the packages in .deps/debs hold no GTest/benchmark CMake config"; return 1; }
  local args=("-DCMAKE_PREFIX_PATH=$prefix/usr" "-DGTest_DIR=$gtest_dir" "-Dbenchmark_DIR=$bench_dir")
  if probe_deps prebuilt "${args[@]}"; then
    printf '%s\n' "${args[@]}" >"$SG_WORK/deps.args"
    count_str gtest prebuilt
    note "GoogleTest and Google Benchmark from .deps/debs (prebuilt), resolved in $prefix"
    return 0
  fi
  # The prebuilt static GoogleTest may not link against this machine's C++ library: rebuild it
  # from the sources package (usr/src/googletest) into its own prefix and probe again.
  if [ -f "$prefix/usr/src/googletest/CMakeLists.txt" ]; then
    banner "rebuilding GoogleTest from $prefix/usr/src/googletest"
    cmake -S "$prefix/usr/src/googletest" -B "$SG_BUILD/_gtest-build" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix/gtest" -DBUILD_GMOCK=ON &&
      cmake --build "$SG_BUILD/_gtest-build" -j "$SG_JOBS" &&
      cmake --install "$SG_BUILD/_gtest-build" || { note "GoogleTest rebuild failed"; return 1; }
    gtest_dir=$(dirname "$(find "$prefix/gtest" -name GTestConfig.cmake | head -1)")
    args=("-DCMAKE_PREFIX_PATH=$prefix/gtest;$prefix/usr" "-DGTest_DIR=$gtest_dir" "-Dbenchmark_DIR=$bench_dir")
    if probe_deps rebuilt-gtest "${args[@]}"; then
      printf '%s\n' "${args[@]}" >"$SG_WORK/deps.args"
      count_str gtest rebuilt
      note "GoogleTest rebuilt from source; Google Benchmark prebuilt from .deps/debs"
      return 0
    fi
  fi
  note "GoogleTest/Google Benchmark from .deps/debs do not link or run here (see deps.log)"
  return 1
}

# probe_deps LABEL [CMAKE ARGS...]: configure, build and run a program using both libraries.
probe_deps() {
  local label=$1
  shift
  local dir=$SG_BUILD/_deps-probe-$label
  rm -rf "$dir" && mkdir -p "$dir/src"
  cat >"$dir/src/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(specgraph_deps_probe CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
get_target_property(_g GTest::gtest LOCATION)
get_target_property(_b benchmark::benchmark LOCATION)
message(STATUS "probe: GTest_DIR=${GTest_DIR} -> ${_g}")
message(STATUS "probe: benchmark_DIR=${benchmark_DIR} -> ${_b}")
add_executable(probe probe.cpp)
target_link_libraries(probe GTest::gtest_main benchmark::benchmark)
EOF
  cat >"$dir/src/probe.cpp" <<'EOF'
#include <benchmark/benchmark.h>
#include <gtest/gtest.h>
static void BM_probe(benchmark::State& s) { for (auto _ : s) benchmark::DoNotOptimize(s.iterations()); }
BENCHMARK(BM_probe);
TEST(Probe, Links) { EXPECT_EQ(2 + 2, 4); }
EOF
  banner "probe ($label): $*"
  cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" &&
    cmake --build "$dir/build" &&
    "$dir/build/probe" --gtest_brief=1 &&
    "$dir/build/probe" --gtest_list_tests >/dev/null
}

step_build() {
  local arch=90 deps_args=() python=OFF
  [ -s "$SG_WORK/cuda_arch" ] && arch=$(cat "$SG_WORK/cuda_arch")
  [ -s "$SG_WORK/deps.args" ] && mapfile -t deps_args <"$SG_WORK/deps.args"
  count cuda_architectures "$arch"
  # The Python extension is built here, into the build tree (as ctest's python.pytest uses it), so
  # the smoke step can run the torch tests right after the build; tvm_ffi from the deps step.
  export PYTHONPATH=$(py_path)
  if python3 -c "import tvm_ffi" 2>/dev/null; then
    python=ON
    deps_args+=("-DPython_EXECUTABLE=$(command -v python3)")
  fi
  count_str python_extension "$python"
  cmake -S . -B "$SG_BUILD" -G Ninja --no-warn-unused-cli -DCMAKE_BUILD_TYPE=Release \
    -DSPECGRAPH_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_CUDA_FLAGS=-lineinfo \
    -DSPECGRAPH_WERROR=OFF -DBENCHMARK_ENABLE_WERROR=OFF -DSPECGRAPH_TEST_TIMEOUT=$PER_TEST_TIMEOUT \
    -DSPECGRAPH_REQUIRE_TEST_DEPS=ON -DSPECGRAPH_BUILD_PYTHON=$python "${deps_args[@]}" ||
    { note "configure failed"; return 1; }
  local rc=0
  cmake --build "$SG_BUILD" -j "$SG_JOBS" -- -k 0 || rc=1
  local log=$SG_LOGS/build.log
  count warnings "$(grep -cE '(warning|Warning)[: ]' "$log")"
  count failed_targets "$(grep -c '^FAILED: ' "$log")"
  [ $python = ON ] && [ ! -f "$(py_lib)" ] && { rc=1; echo "no Python extension at $(py_lib)"; }
  if [ $rc = 0 ]; then
    note "built for sm_$arch with -lineinfo$([ $python = ON ] && echo ', Python extension' || echo ', NO Python extension (no tvm_ffi)'); $(grep -cE '(warning|Warning)[: ]' "$log") warning lines"
  else
    note "build failed: $(grep -c '^FAILED: ' "$log") target(s) (see build.log); the rest built with -k 0"
  fi
  return $rc
}

step_tests() {
  [ "$SG_DRY" = 1 ] && dry_skip
  [ -f "$SG_BUILD/CTestTestfile.cmake" ] || { note "no build to test"; return 1; }
  local junit=$SG_LOGS/ctest-junit.xml
  # --stop-time (local time of day; ctest adds the zone): tests still running then time out, so
  # ctest ends and writes the JUnit file before `timeout` would kill it. It caps the TIMEOUT 600
  # that gtest_discover_tests sets, which --timeout (a default only) does not override.
  local stop
  stop=$(date -d "@$(($(date +%s) + SG_BUDGET - 8))" '+%H:%M:%S')
  local rc=0
  # python.pytest: the python step runs it, GPU file first. CUDA_MODULE_LOADING=EAGER: a test
  # kernel's first launch behind time_device's spinning kernel must not wait for a module load.
  REQUIRE_GPU=1 CUDA_MODULE_LOADING=EAGER ctest --test-dir "$SG_BUILD" -j "$SG_JOBS" \
    --timeout "$PER_TEST_TIMEOUT" --stop-time "$stop" \
    -E '^(package\.engine_consumer|bench\.smoke\..*|python\.pytest)$' --no-tests=error \
    --output-on-failure --output-junit "$junit" || rc=1
  local log=$SG_LOGS/tests.log total=0 failed=0 skipped=0
  if [ -s "$junit" ]; then
    local head
    head=$(tr '\n\t' '  ' <"$junit" | grep -m1 -o '<testsuite [^>]*>')
    total=$(echo "$head" | grep -oE ' tests="[0-9]+"' | grep -oE '[0-9]+')
    failed=$(echo "$head" | grep -oE ' failures="[0-9]+"' | grep -oE '[0-9]+')
    skipped=$(echo "$head" | grep -oE ' skipped="[0-9]+"' | grep -oE '[0-9]+')
  else
    local line
    line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -1)
    total=$(echo "$line" | grep -oE 'out of [0-9]+' | grep -oE '[0-9]+')
    failed=$(echo "$line" | grep -oE '[0-9]+ tests failed' | grep -oE '[0-9]+')
  fi
  total=${total:-0} failed=${failed:-0} skipped=${skipped:-0}
  count tests "$total"
  count passed $((total - failed - skipped))
  count failed "$failed"
  count skipped "$skipped"
  count timeouts "$(grep -cE '\*\*\*Timeout|Timeout +[0-9.]+ sec' "$log")"
  if [ $rc = 0 ]; then
    note "$((total - failed - skipped))/$total passed, $skipped skipped (REQUIRE_GPU=1)"
  else
    local names
    names=$(sed -n '/The following tests FAILED:/,$p' "$log" | grep -E '^\s+[0-9]+ - ' |
      sed -E 's/^\s+[0-9]+ - ([^ ]+).*/\1/' | head -3 | paste -sd, -)
    note "$failed of $total failed${names:+: $names}"
  fi
  return $rc
}

