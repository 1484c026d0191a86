# Included by the top-level CMakeLists.txt before option(SPECGRAPH_BUILD_PYTHON): the option is ON
# by default when the Python interpreter CMake finds can import tvm_ffi (`python3 -m tvm_ffi.config
# --cmakedir` succeeds), so a machine with apache-tvm-ffi installed builds the Python package and
# runs its tests (ctest: python.pytest) without being asked. Sanitizer and fuzzer builds default
# to OFF: an instrumented extension cannot be loaded into an uninstrumented Python.
set(_specgraph_python_default OFF)
set(_specgraph_python_why "")
if(NOT DEFINED SPECGRAPH_BUILD_PYTHON)
  if(SPECGRAPH_SANITIZE OR SPECGRAPH_BUILD_FUZZERS)
    set(_specgraph_python_why "a sanitizer or fuzzer build")
  else()
    find_package(Python COMPONENTS Interpreter QUIET)
    if(Python_Interpreter_FOUND)
      execute_process(COMMAND "${Python_EXECUTABLE}" -m tvm_ffi.config --cmakedir
        RESULT_VARIABLE _specgraph_tvm_rc OUTPUT_QUIET ERROR_QUIET)
      if(_specgraph_tvm_rc EQUAL 0)
        set(_specgraph_python_default ON)
      else()
        set(_specgraph_python_why "${Python_EXECUTABLE} cannot import tvm_ffi (pip install apache-tvm-ffi)")
      endif()
    else()
      set(_specgraph_python_why "no Python interpreter found")
    endif()
  endif()
  if(NOT _specgraph_python_default)
    message(STATUS "specgraph: Python package not built: ${_specgraph_python_why}")
  endif()
endif()
