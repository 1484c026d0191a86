# GoogleTest and Google Benchmark are for the test command only. Included by the top-level
# CMakeLists.txt before tests/ and bench/: it finds them, and when one is missing
#   - SPECGRAPH_REQUIRE_TEST_DEPS=ON (the ci, host and asan presets: the test command) fails
#     configure, naming the package and how to install it;
#   - otherwise (the default preset, scripts/specgraph, add_subdirectory) says so in one warning
#     and turns that part off for this configure: the library, the specgraph program and the
#     Python package still build.
# The packages Debian and Ubuntu name them by; elsewhere GTest_DIR / benchmark_DIR point at
# their CMake packages.
function(_specgraph_missing_test_dep what package install option)
  set(fix "install it (apt-get install ${install}) or point ${package}_DIR at its CMake package")
  if(SPECGRAPH_REQUIRE_TEST_DEPS)
    message(FATAL_ERROR "specgraph: ${what} not found; the test command needs it: ${fix}. "
                        "Only the library and the specgraph program: configure without "
                        "SPECGRAPH_REQUIRE_TEST_DEPS (the default preset, cmake --preset default)")
  endif()
  message(WARNING "specgraph: ${what} not found: ${option} is off for this build (the library, "
                  "the specgraph program and the Python package still build). For the test "
                  "command (cmake --workflow --preset ci) ${fix}; -D${option}=OFF silences this")
endfunction()

if(SPECGRAPH_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    _specgraph_missing_test_dep("GoogleTest" GTest "libgtest-dev libgmock-dev"
                                SPECGRAPH_BUILD_TESTS)
    set(SPECGRAPH_BUILD_TESTS OFF)
  endif()
endif()
if(SPECGRAPH_BUILD_BENCH)
  find_package(benchmark QUIET)
  if(NOT benchmark_FOUND)
    _specgraph_missing_test_dep("Google Benchmark" benchmark "libbenchmark-dev"
                                SPECGRAPH_BUILD_BENCH)
    set(SPECGRAPH_BUILD_BENCH OFF)
  endif()
endif()
