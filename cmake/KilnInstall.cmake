# cmake --install puts the library, headers, the `kiln` program and a Kiln
# package config in place, so users write find_package(Kiln) and link Kiln::kiln:
#
#   <prefix>/include/kiln/kiln.h             #include <kiln/kiln.h>
#   <prefix>/include/kiln/{ir,runtime,...}/  the headers kiln.h includes
#   <prefix>/lib/libkiln.so, <prefix>/bin/kiln
#   <prefix>/lib/cmake/Kiln/                 KilnConfig.cmake, KilnTargets.cmake
include(CMakePackageConfigHelpers)

# Installed binaries find libkiln next door, and the library keeps the paths of
# the shared libraries it was linked against outside the system directories
# (the CUDA runtime under /usr/local/cuda).
file(RELATIVE_PATH kiln_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
set_target_properties(kiln PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
set_target_properties(kiln_cli PROPERTIES INSTALL_RPATH "$ORIGIN/${kiln_bin_to_lib}" INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS kiln EXPORT KilnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS kiln_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Every header of the library's directories (read at install time, so headers
# added later need no reconfigure). backends/cpu is internal but harmless.
foreach(dir ir runtime frontend passes backends models)
  install(DIRECTORY ${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/${dir}
          FILES_MATCHING PATTERN "*.h" PATTERN "*.def"
          PATTERN "cli" EXCLUDE)
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/include/kiln/kiln.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln)

install(EXPORT KilnTargets NAMESPACE Kiln:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
configure_package_config_file(cmake/KilnConfig.cmake.in ${PROJECT_BINARY_DIR}/KilnConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/KilnConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/KilnConfig.cmake ${PROJECT_BINARY_DIR}/KilnConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)

# A CTest test that installs this build into a scratch prefix and builds and
# runs tests/consumer against it with find_package(Kiln): proves the installed
# headers, targets and config are complete.
if(KILN_BUILD_TESTS)
  # A sanitized libkiln needs its consumer built by the same compiler with the
  # same sanitizers (their runtime lives in the program, not the library).
  set(kiln_consumer_flags)
  if(KILN_SANITIZE)
    string(REPLACE ";" " " flags "${KILN_SANITIZE_FLAGS}")
    set(kiln_consumer_flags "-DKILN_CXX_COMPILER=${CMAKE_CXX_COMPILER}" "-DKILN_CXX_FLAGS=${flags}"
                            "-DKILN_LINK_FLAGS=-fsanitize=address,undefined")
  endif()
  add_test(NAME install_consumer
           COMMAND ${CMAKE_COMMAND}
                   ${kiln_consumer_flags}
                   -DKILN_BUILD_DIR=${PROJECT_BINARY_DIR}
                   -DKILN_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                   -DKILN_WORK_DIR=${PROJECT_BINARY_DIR}/install-check
                   -DKILN_BUILD_TYPE=${CMAKE_BUILD_TYPE}
                   -P ${PROJECT_SOURCE_DIR}/tests/consumer/check.cmake)
  set_tests_properties(install_consumer PROPERTIES TIMEOUT 300)
endif()
