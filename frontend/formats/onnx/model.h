// ONNX models (`.onnx`, a serialized onnx.ModelProto) read into Kiln's neutral
// form: an ir::Graph plus named arrays.
//
//   onnx::Model m = onnx::Model::load("resnet18.onnx");       // checked, initializers decoded
//   m.opset();  m.inputs()[0].dims;                            // 13, [-1, 3, 224, 224] (-1: "N")
//   onnx::Imported im = m.to_graph({{Shape{8, 3, 224, 224}, DType::kFloat32}});
//   // im.graph: inputs named as in the file, initializers as params (aux: BatchNorm's
//   // running statistics), values computed at import as const nodes (slots in im.consts)
//
// Loading (libonnx, ONNX 1.12): the file is at most kMaxModelBytes; it must
// parse as a ModelProto with a graph and an opset of the default domain of
// at most kMaxOpset; an older one than kMinOpset is first raised to
// kUpgradeOpset by libonnx's version converter (NotSupported when it cannot);
// onnx::checker::check_model runs (libonnx's shape inference does not: Kiln
// types every value itself in to_graph, and libonnx 1.12's inference crashes
// on malformed attributes). Every initializer is decoded once (raw_data or the typed
// fields, little-endian; its byte count checked against its dims and dtype)
// into an array on cpu(0). External data (data_location EXTERNAL) is read
// from `location` relative to the model's folder: absolute paths, paths that
// leave the folder (`..`, links pointing out) and ranges past the file's end
// are refused. A model parsed from bytes has no folder and refuses external
// data.
//
// to_graph converts the nodes in file order (after folding multi-node
// patterns Kiln has one op for, frontend/formats/onnx/patterns.h: GELU),
// each through the converter of
// its op type for the model's opset (frontend/formats/onnx/ops_*.cc), to
// Kiln ops; a node whose inputs are all known at import (Shape of a typed
// input, Constant, initializers, and ops on those such as Gather, Concat,
// Unsqueeze, Cast) is folded on the host, so PyTorch's shape subgraphs
// (Shape -> Gather -> Unsqueeze -> Concat -> Reshape) become fixed shapes once
// the input types are given. Symbolic dims (dim_param) take the sizes given.
//
// Errors: IOError for unreadable or oversized files; ValueError naming the
// file for what is not a valid ONNX model (parse failure, the checker's
// message, a tensor whose bytes do not match its shape); NotSupported naming
// op type, node, opset (and the attribute or input) for what Kiln does not
// convert; conversion errors carry "ONNX node 'NAME' (OpType, opset N)".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/formats/named_arrays.h"
#include "ir/graph.h"

namespace kiln::onnx {

inline constexpr size_t kMaxModelBytes = size_t{2000} << 20;  // protobuf's 2 GiB message limit, less headroom
inline constexpr int kMinOpset = 7;
inline constexpr int kMaxOpset = 17;
inline constexpr int kUpgradeOpset = 13;
inline constexpr int64_t kMaxKnownInputElements = 64;

// A graph input or output as the file declares it.
struct ValueInfo {
  std::string name;
  DType dtype = DType::kFloat32;
  bool has_shape = false;               // false: the file gives no shape
  std::vector<int64_t> dims;            // -1 where the dim is symbolic or unknown
  std::vector<std::string> dim_params;  // per dim: the symbol ("N"), or "" when fixed or unknown
};

// A typed graph and the values its const nodes take (const node slot k ->
// consts[k]); params and aux nodes take the initializer of their name.
struct Imported {
  ir::Graph graph;
  std::vector<NDArray> consts;
};

class Model {
 public:
  static Model load(const std::string& path);
  // `source` names the bytes in errors; `folder` resolves external data
  // (empty: external data is refused).
  static Model parse(std::string_view bytes, std::string_view source, const std::string& folder = {});

  int64_t ir_version() const;
  int64_t opset() const;            // of the default domain (after an upgrade)
  int64_t file_opset() const;       // as the file says
  std::string producer() const;     // "pytorch 1.13.1", "" when the file names none
  const std::string& source() const;
  // Graph inputs that are not initializers, in file order: what a caller feeds.
  const std::vector<ValueInfo>& inputs() const;
  const std::vector<ValueInfo>& outputs() const;
  // Every initializer by name (cpu(0)).
  const ArrayMap& initializers() const;
  // Initializers that to_graph makes param/aux nodes: floating-point ones
  // (the learned weights); `aux` are those BatchNormalization reads as running
  // statistics. Integer initializers become const nodes.
  bool is_param(std::string_view initializer) const;
  bool is_aux(std::string_view initializer) const;
  // Op type -> count, with "domain:" before types of other domains.
  std::map<std::string, int> op_counts() const;
  int64_t num_nodes() const;

  // The graph for inputs of these types (inputs() order). ValueError when
  // their count, dtype or a fixed dim differs from the file's. `known`
  // (empty, or one per input, none where not given) specializes the graph on
  // input values, as it does on shapes: ops that need values at import (a
  // Reshape's shape, Slice's starts) may then take them from graph inputs.
  Imported to_graph(std::span<const TensorType> input_types, std::span<const NDArray> known = {}) const;
  // What eval_graph needs for `im` (one array per node): `inputs` in
  // inputs() order, the initializers on param/aux nodes and im.consts,
  // copied to `device` where they live elsewhere.
  std::vector<NDArray> bind(const Imported& im, std::span<const NDArray> inputs, Device device = Device::cpu(0)) const;
  // to_graph, bind and eval_graph for one call (the outputs in file order);
  // inputs of at most kMaxKnownInputElements elements are known to to_graph
  // (shapes, axes, scales and bounds fed as inputs; the graph is built per
  // call anyway).
  std::vector<NDArray> run(std::span<const NDArray> inputs) const;

  struct State;  // the ModelProto and what was decoded from it

 private:
  explicit Model(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  std::shared_ptr<const State> state_;
};

// A serialized onnx.TensorProto file (ONNX's test data: input_0.pb, ...) as
// an array on cpu(0), bounds-checked as initializers are; external data is
// refused.
NDArray load_tensor_file(const std::string& path);

}  // namespace kiln::onnx
