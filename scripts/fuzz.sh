#!/usr/bin/env bash
# Runs Kiln's libFuzzer targets (tests/fuzz/README.md) from a sanitizer build
# made with clang (build-asan/ by default: scripts/test.sh makes it).
#
#   bash scripts/fuzz.sh                 # every target for 20 s each
#   bash scripts/fuzz.sh 600 npy params  # the named targets, 600 s each
#
# Each run starts from the committed seeds (tests/fuzz/corpus/<target>) plus
# what earlier runs found (<build>/fuzz-corpus/<target>, not committed) and
# writes new inputs only to the latter. A crash, a sanitizer report, a leak,
# an input over 2 s, or more than 2 GiB of memory fails the target; its input
# is saved as <build>/fuzz-crashes/<target>/crash-* (or leak-, timeout-,
# oom-): commit it under tests/fuzz/regressions/<target>/ with the fix.
# Exits non-zero when any target failed. KILN_FUZZ_BUILD_DIR overrides build-asan.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-20}
shift || true
build=${KILN_FUZZ_BUILD_DIR:-build-asan}
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for f in "$build"/tests/fuzz/*_fuzz; do
    targets+=("$(basename "$f" _fuzz)")
  done
fi

failed=()
for t in "${targets[@]}"; do
  exe=$build/tests/fuzz/${t}_fuzz
  [[ -x $exe ]] || { echo "fuzz.sh: $exe is not built" >&2; exit 2; }
  work=$build/fuzz-corpus/$t
  crashes=$build/fuzz-crashes/$t
  mkdir -p "$work" "$crashes"
  echo "== fuzz $t for ${seconds} s"
  # -rss_limit_mb / -malloc_limit_mb: a declared size must be refused by the
  # parser, never allocated; 2 GiB is far above anything a valid small input needs.
  if ! ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
       "$exe" "$work" "tests/fuzz/corpus/$t" -max_total_time="$seconds" -timeout=2 \
       -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="$crashes/" 2>"$build/fuzz-$t.log"; then
    failed+=("$t")
    tail -n 60 "$build/fuzz-$t.log" >&2
  fi
  # One line per target: executions, coverage, peak memory.
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/fuzz-$t.log" | tail -n 1)
  cov=$(grep -oE 'cov: [0-9]+' "$build/fuzz-$t.log" | tail -n 1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$build/fuzz-$t.log" | tail -n 1)
  echo "fuzz.sh: $t: ${runs:-?} executions, ${cov:-cov: ?} edges, peak ${rss:-?} MB"
done
if [[ ${#failed[@]} -ne 0 ]]; then
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs in $build/fuzz-crashes/)" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets, no crash"
