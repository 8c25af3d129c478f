// MXNet symbol JSON (frontend/formats/mxnet/symbol_json.cc): parse, write back, and build the
// typed graph as SymbolBlock::imports does (a variable named "data" is the
// input, f32[1,3,16,16]; the other variables are parameters).
#include <string>
#include <vector>

#include "frontend/formats/mxnet/symbol_json.h"
#include "tests/fuzz/fuzz_target.h"

namespace kiln {

KILN_FUZZ_TARGET(symbol_json) {
  mxnet::Symbol s = mxnet::parse_symbol_json(fuzz::as_string_view(data), "fuzz input");
  (void)mxnet::to_json(s);
  std::vector<std::string> inputs;
  mxnet::TypeMap types;
  if (s.find("data")) {
    inputs.push_back("data");
    types["data"] = TensorType{Shape{1, 3, 16, 16}, DType::kFloat32};
  }
  (void)mxnet::to_graph(s, types, inputs);
}

}  // namespace kiln
