# -DKILN_SANITIZE=ON: the library, the `kiln` program and every test built with
# AddressSanitizer and UndefinedBehaviorSanitizer (any UB report is fatal), CUDA
# off. With clang the same build also gets the libFuzzer targets of
# tests/fuzz (docs/design-notes.md says why one clang build serves both).
#
#   CXX=clang++-14 cmake -S . -B build-asan -G Ninja -DKILN_SANITIZE=ON
#   cmake --build build-asan -j2 && ctest --test-dir build-asan
#
# -O2 as RelWithDebInfo, with line tables only (stack traces need no more, and
# full debug info doubles the link time). KILN_SANITIZE_BUILD tells heavy tests
# to take smaller sizes (tests/test_util.h, kSanitizeBuild).
if(KILN_HAVE_CUDA)
  message(FATAL_ERROR "KILN_SANITIZE=ON needs -DKILN_CUDA=OFF")
endif()

set(KILN_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(APPEND KILN_SANITIZE_FLAGS -gline-tables-only)
else()
  list(APPEND KILN_SANITIZE_FLAGS -g1)
endif()
add_compile_options(${KILN_SANITIZE_FLAGS})
add_link_options(-fsanitize=address,undefined)
add_compile_definitions(KILN_SANITIZE_BUILD=1)

# scripts/test.sh runs CTest here with ASAN_OPTIONS, LSAN_OPTIONS (leak
# suppressions: tests/sanitize/lsan.supp, each entry says why) and UBSAN_OPTIONS.
# The libFuzzer targets need clang's fuzzer runtime.
set(KILN_FUZZ OFF)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  set(KILN_FUZZ ON)
endif()
message(STATUS "Kiln: AddressSanitizer + UBSan build (fuzz targets: ${KILN_FUZZ})")
