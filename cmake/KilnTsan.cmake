# -DKILN_TSAN=ON: builds only the engine and profiler tests, and those of the
# CPU backend's lock-free row split (backends/cpu/parallel_claim.h), with
# ThreadSanitizer.
#
#   cmake -S . -B build-tsan -DKILN_TSAN=ON && cmake --build build-tsan -j2 && ctest --test-dir build-tsan
#
# The program compiles the engine, the device-backend registry with the CPU
# backend (without its kernels) and parallel_claim from source (nothing else
# of Kiln, so no oneDNN or OpenMP, whose uninstrumented threads would give false reports).
# KILN_TSAN_BUILD shrinks the stress tests: TSan runs them about 10x slower.
find_package(GTest REQUIRED)
include(GoogleTest)
enable_testing()

file(GLOB KILN_TSAN_ENGINE_SOURCES CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/runtime/engine*.cc
  ${PROJECT_SOURCE_DIR}/tests/runtime/engine*_test.cc
  ${PROJECT_SOURCE_DIR}/tests/runtime/profiler*_test.cc
  ${PROJECT_SOURCE_DIR}/tests/runtime/parallel_claim_test.cc)

add_executable(engine_tests_tsan
  ${KILN_TSAN_ENGINE_SOURCES}
  ${PROJECT_SOURCE_DIR}/runtime/profiler.cc
  ${PROJECT_SOURCE_DIR}/backends/cpu/parallel_claim.cc
  ${PROJECT_SOURCE_DIR}/ir/device.cc
  ${PROJECT_SOURCE_DIR}/runtime/device_backend.cc
  ${PROJECT_SOURCE_DIR}/runtime/storage.cc
  ${PROJECT_SOURCE_DIR}/backends/builtin_backends.cc
  ${PROJECT_SOURCE_DIR}/backends/cpu/backend.cc
  ${PROJECT_SOURCE_DIR}/tests/sanitize/tsan_no_cpu_kernels.cc)
target_include_directories(engine_tests_tsan PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_options(engine_tests_tsan PRIVATE -fsanitize=thread -g -O1 -fno-omit-frame-pointer ${KILN_WARNINGS})
target_link_options(engine_tests_tsan PRIVATE -fsanitize=thread)
target_compile_definitions(engine_tests_tsan PRIVATE KILN_TSAN_BUILD=1)
target_link_libraries(engine_tests_tsan PRIVATE fmt::fmt Threads::Threads GTest::gtest GTest::gtest_main
                                                nlohmann_json::nlohmann_json)
gtest_discover_tests(engine_tests_tsan
  DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 300 ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1")
