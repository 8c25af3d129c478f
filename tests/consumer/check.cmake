# cmake -DKILN_BUILD_DIR=... -DKILN_SOURCE_DIR=... -DKILN_WORK_DIR=... -P check.cmake
#
# Installs the Kiln build in KILN_BUILD_DIR into KILN_WORK_DIR/prefix, then
# configures, builds and runs tests/consumer against that prefix only. Fails
# (non-zero exit) at the first step that fails. Registered as the CTest test
# `install_consumer` by cmake/KilnInstall.cmake.
foreach(var KILN_BUILD_DIR KILN_SOURCE_DIR KILN_WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "check.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT KILN_BUILD_TYPE)
  set(KILN_BUILD_TYPE Release)
endif()

# KILN_CXX_COMPILER, KILN_CXX_FLAGS, KILN_LINK_FLAGS: how the consumer is
# compiled and linked (set for sanitizer builds, whose flags it must share).
set(consumer_args)
if(KILN_CXX_COMPILER)
  list(APPEND consumer_args -DCMAKE_CXX_COMPILER=${KILN_CXX_COMPILER})
endif()
if(KILN_CXX_FLAGS)
  list(APPEND consumer_args "-DCMAKE_CXX_FLAGS=${KILN_CXX_FLAGS}")
endif()
if(KILN_LINK_FLAGS)
  list(APPEND consumer_args "-DCMAKE_EXE_LINKER_FLAGS=${KILN_LINK_FLAGS}")
endif()

set(prefix ${KILN_WORK_DIR}/prefix)
set(build ${KILN_WORK_DIR}/consumer)
file(REMOVE_RECURSE ${prefix} ${build})

# Runs one step quietly; on failure prints its output and stops.
function(step what)
  message(STATUS "install_consumer: ${what}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${what} failed (${rc}):\n${out}")
  endif()
endfunction()

step("installing ${KILN_BUILD_DIR} into ${prefix}"
     ${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${prefix})
step("configuring tests/consumer against the installed package only"
     ${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/tests/consumer -B ${build}
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=${KILN_BUILD_TYPE}
     -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF ${consumer_args})
step("building" ${CMAKE_COMMAND} --build ${build})
message(STATUS "install_consumer: running ${build}/consumer")
execute_process(COMMAND ${build}/consumer RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install_consumer: consumer exited with ${rc}")
endif()
message(STATUS "install_consumer: passed")
