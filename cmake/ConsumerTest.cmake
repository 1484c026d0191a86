# ctest driver: install this build into a scratch prefix, build the engine stand-in against the
# installed package (find_package), and also through add_subdirectory; run both.
# Variables: BUILD_DIR, SOURCE_DIR, WORK_DIR, GENERATOR, ENABLE_CUDA, SANITIZE (the main build's
# SPECGRAPH_SANITIZE: a sanitized library needs a consumer linked with the same sanitizers, by the
# same compiler: a clang-ASan library cannot link into a g++-built consumer), CXX_COMPILER and
# C_COMPILER (the main build's compilers; C_COMPILER may be empty).
set(flags "")
if(SANITIZE)
  set(flags -DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE} -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE})
  if(CXX_COMPILER)
    list(APPEND flags -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
  endif()
  if(C_COMPILER)
    list(APPEND flags -DCMAKE_C_COMPILER=${C_COMPILER})
  endif()
endif()
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
run_step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/install)
# The licence is installed with the package (an engine that vendors it needs it).
set(license ${WORK_DIR}/install/share/doc/specgraph/LICENSE)
if(NOT EXISTS ${license})
  message(FATAL_ERROR "the installed package has no ${license}")
endif()
file(READ ${license} license_head LIMIT 200)
if(NOT license_head MATCHES "Apache License\n +Version 2.0, January 2004")
  message(FATAL_ERROR "${license} is not the Apache License 2.0: ${license_head}")
endif()
run_step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/engine_consumer -B ${WORK_DIR}/installed
         -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/install ${flags})
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/installed)
run_step(${WORK_DIR}/installed/engine_consumer)
run_step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/engine_consumer -B ${WORK_DIR}/subdirectory
         -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release -DSPECGRAPH_SOURCE_DIR=${SOURCE_DIR}
         -DSPECGRAPH_ENABLE_CUDA=${ENABLE_CUDA} ${flags})
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/subdirectory)
run_step(${WORK_DIR}/subdirectory/engine_consumer)
