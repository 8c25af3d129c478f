#!/usr/bin/env bash
# Everything CI checks (.ci/run runs exactly this):
#   1. installs dependencies, builds everything into build/ (Release);
#   2. builds the engine tests under ThreadSanitizer into build-tsan/ and runs them;
#   3. builds everything with clang under AddressSanitizer + UBSan into
#      build-asan/ (cmake/KilnSanitize.cmake), runs the whole CTest suite there,
#      then runs each fuzz target for KILN_FUZZ_SECONDS (default 20) s
#      (scripts/fuzz.sh); KILN_SANITIZE=0 skips this step;
#   4. runs the whole CTest suite of build/, which includes `install_consumer`:
#      install into a scratch prefix, then build and run tests/consumer against it.
# Incremental and idempotent: with nothing changed it only re-runs the tests.
# Exits non-zero when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

bash scripts/install-deps.sh
bash scripts/build.sh

tsan_rc=0
if [[ -f cmake/KilnTsan.cmake ]]; then
  echo "== ThreadSanitizer build (build-tsan/)"
  if [[ ! -f build-tsan/CMakeCache.txt ]]; then
    cmake -S . -B build-tsan -G Ninja -DKILN_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  fi
  # A failed build is reported like failed tests, so the other steps still run.
  if cmake --build build-tsan -j"$(nproc)"; then
    ctest --test-dir build-tsan -j2 --output-on-failure --no-tests=error || tsan_rc=$?
  else
    tsan_rc=1
    echo "test.sh: the ThreadSanitizer build FAILED" >&2
  fi
else
  echo "test.sh: cmake/KilnTsan.cmake does not exist yet; skipping the ThreadSanitizer build"
fi

asan_rc=0
if [[ ${KILN_SANITIZE:-1} != 0 ]]; then
  echo "== AddressSanitizer + UBSan build (build-asan/)"
  asan_start=$SECONDS
  if [[ ! -f build-asan/CMakeCache.txt ]]; then
    args=(-G Ninja -DKILN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14)
    if command -v ccache >/dev/null; then args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
    cmake -S . -B build-asan "${args[@]}"
  fi
  cmake --build build-asan -j"$(nproc)"
  echo "test.sh: sanitizer build took $((SECONDS - asan_start)) s"
  asan_start=$SECONDS
  # Every report is fatal; leaks are reported, less the suppressed ones
  # (tests/sanitize/lsan.supp says why each is there).
  ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:check_initialization_order=1:strict_string_checks=1 \
  LSAN_OPTIONS=suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir build-asan -j2 --output-on-failure --no-tests=error || asan_rc=$?
  echo "test.sh: sanitizer tests took $((SECONDS - asan_start)) s"
  asan_start=$SECONDS
  bash scripts/fuzz.sh "${KILN_FUZZ_SECONDS:-20}" || { rc_fuzz=$?; [[ $asan_rc -ne 0 ]] || asan_rc=$rc_fuzz; }
  echo "test.sh: fuzzing took $((SECONDS - asan_start)) s"
fi

echo "== Tests (build/)"
rc=0
ctest --test-dir build -j2 --output-on-failure --no-tests=error || rc=$?

echo "test.sh: finished in $((SECONDS - start)) s"
if [[ $asan_rc -ne 0 ]]; then
  echo "test.sh: sanitizer tests or fuzzing FAILED (see build-asan output above)" >&2
  exit "$asan_rc"
fi
if [[ $tsan_rc -ne 0 ]]; then
  echo "test.sh: ThreadSanitizer tests FAILED (see build-tsan output above)" >&2
  exit "$tsan_rc"
fi
exit "$rc"
