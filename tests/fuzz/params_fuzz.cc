// MXNet .params files (frontend/formats/mxnet/params_io.cc): parse, and what parses
// writes back and parses again to the same names and types.
#include <cstdlib>

#include "frontend/formats/mxnet/params_io.h"
#include "tests/fuzz/fuzz_target.h"

namespace kiln {

KILN_FUZZ_TARGET(params) {
  NamedArrays a = mxnet::parse_ndarrays(fuzz::as_string_view(data), "fuzz input");
  NamedArrays b = mxnet::parse_ndarrays(mxnet::serialize_ndarrays(a), "written back");
  if (a.size() != b.size()) std::abort();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || a[i].second.is_none() != b[i].second.is_none() ||
        (!a[i].second.is_none() && (a[i].second.shape() != b[i].second.shape() ||
                                    a[i].second.dtype() != b[i].second.dtype())))
      std::abort();
}

}  // namespace kiln
