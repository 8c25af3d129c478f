// libFuzzer's entry points for a program holding one fuzz target
// (tests/fuzz/fuzz_target.h). A kiln::Error other than InternalError is the
// parser rejecting the input cleanly; an InternalError or any other exception
// aborts, which libFuzzer reports as a crash and saves the input.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "ir/error.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The synchronous engine: arrays a parser builds are written at once, on
  // this thread, so each input's work ends inside its own execution.
  setenv("KILN_ENGINE", "naive", 1);
  if (kiln::fuzz::targets().size() != 1) {
    std::fprintf(stderr, "fuzz_main: expected one fuzz target in this program, found %zu\n",
                 kiln::fuzz::targets().size());
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::fuzz::targets().front().fn({data, size});
  } catch (const kiln::InternalError& e) {
    std::fprintf(stderr, "fuzz_main: internal error from user input: %s\n", e.what());
    std::abort();
  } catch (const kiln::Error&) {  // rejected cleanly
  }
  return 0;
}
