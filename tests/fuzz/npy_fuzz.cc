// NumPy .npy files (frontend/npy.cc): parse, and what parses writes back
// and parses again to the same type.
#include <cstdlib>

#include "frontend/npy.h"
#include "tests/fuzz/fuzz_target.h"

namespace kiln {

KILN_FUZZ_TARGET(npy) {
  NDArray a = npy::parse(fuzz::as_string_view(data), "fuzz input");
  NDArray b = npy::parse(npy::serialize(a), "written back");
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) std::abort();
}

}  // namespace kiln
