// ONNX models (frontend/formats/onnx/): parse, check and decode the bytes as
// a ModelProto (no folder: external data is refused), then build the typed
// graph with every input's symbolic or unknown dims set to 2 (a rank-less
// input gets [2]), as `kiln run` does with the fed arrays' shapes.
#include <vector>

#include "frontend/formats/onnx/model.h"
#include "tests/fuzz/fuzz_target.h"

namespace kiln {

KILN_FUZZ_TARGET(onnx) {
  onnx::Model m = onnx::Model::parse(fuzz::as_string_view(data), "fuzz input");
  std::vector<TensorType> types;
  for (const onnx::ValueInfo& v : m.inputs()) {
    std::vector<int64_t> dims;
    for (int64_t d : v.dims) dims.push_back(d < 0 ? 2 : std::min<int64_t>(d, 64));
    if (!v.has_shape) dims = {2};
    if (dims.size() > static_cast<size_t>(Shape::kMaxNdim)) return;
    types.push_back({Shape(dims), v.dtype});
  }
  (void)m.to_graph(types);
}

}  // namespace kiln
