// What an ONNX op converter sees of one node (internal to frontend/formats/onnx).
//
//   void convert_relu(NodeContext& n) { n.set_output(0, n.op(OpId::kRelu, {n.input(0)})); }
//   KILN_ONNX_CONVERTER("Relu", convert_relu);          // in an ops_<family>.cc
//
// A converter reads the node's inputs (as graph entries, or as values known
// at import), its attributes (typed, with ONNX's defaults given by the
// caller) and the model's opset, appends Kiln ops through op(), and sets
// every output it produces: a graph entry, or a value known at import. When
// every input of a node is known at import (and none is a learned
// parameter), the converter runs against a scratch graph whose result is
// evaluated at once, so the node's outputs become known: the same converter
// folds shape arithmetic and builds the graph.
//
// Errors: unsupported() throws NotSupported naming op type, node and opset;
// the caller adds the node to every other error.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/formats/onnx/tensor.h"
#include "ir/graph.h"
#include "ir/op.h"

namespace kiln::onnx {

// One ONNX value during conversion.
struct Value {
  TensorType type;
  std::optional<ir::Entry> entry;  // in the graph being built; made on first use for known values
  NDArray known;                   // the value, when known at import (cpu(0)); none otherwise
  bool is_param = false;           // a learned initializer: enters graphs as a param/aux node, never folded
  bool is_aux = false;
};

class GraphBuilder;

class NodeContext {
 public:
  NodeContext(GraphBuilder& builder, const pb::NodeProto& node, int opset, ir::Graph& graph,
              std::vector<NDArray>& consts);

  const pb::NodeProto& node() const { return node_; }
  int opset() const { return opset_; }
  const std::string& op_type() const { return node_.op_type(); }

  // Inputs as listed; an omitted optional input is "" (has_input false).
  size_t num_inputs() const { return static_cast<size_t>(node_.input_size()); }
  bool has_input(size_t i) const { return i < num_inputs() && !node_.input(static_cast<int>(i)).empty(); }
  const TensorType& type(size_t i) const;
  const Shape& shape(size_t i) const { return type(i).shape; }
  ir::Entry input(size_t i);  // NotSupported/ValueError when absent
  bool is_known(size_t i) const;
  // The value at import; NotSupported naming `what` ("shape") when it is
  // computed from data. Learned initializers count as known here.
  const NDArray& known(size_t i, std::string_view what) const;
  std::vector<int64_t> known_ints(size_t i, std::string_view what) const;
  std::vector<double> known_doubles(size_t i, std::string_view what) const;

  // Outputs as listed; "" are unused optional outputs.
  size_t num_outputs() const { return static_cast<size_t>(node_.output_size()); }
  bool has_output(size_t i) const { return i < num_outputs() && !node_.output(static_cast<int>(i)).empty(); }
  void set_output(size_t i, ir::Entry e);
  void set_known(size_t i, NDArray value);

  // Attributes (ValueError when present with another type).
  bool has_attr(std::string_view name) const;
  int64_t attr_int(std::string_view name, int64_t dflt) const;
  double attr_float(std::string_view name, double dflt) const;
  std::string attr_string(std::string_view name, std::string dflt) const;
  std::vector<int64_t> attr_ints(std::string_view name, std::vector<int64_t> dflt = {}) const;
  std::vector<double> attr_floats(std::string_view name, std::vector<double> dflt = {}) const;
  std::vector<std::string> attr_strings(std::string_view name, std::vector<std::string> dflt = {}) const;
  NDArray attr_tensor(std::string_view name) const;  // ValueError when absent
  // Attributes the converter does not read must be absent or have these values.
  void require_attr_int(std::string_view name, int64_t allowed, std::string_view why) const;

  // Appends a Kiln op (named after the node; later helpers get a suffix).
  std::vector<ir::Entry> op(OpId id, std::span<const ir::Entry> inputs, const OpAttrs& attrs = {});
  ir::Entry op1(OpId id, std::initializer_list<ir::Entry> inputs, const OpAttrs& attrs = {}) {
    return op(id, std::span<const ir::Entry>(inputs.begin(), inputs.size()), attrs).front();
  }
  template <typename Attrs>
  ir::Entry op1(OpId id, std::initializer_list<ir::Entry> inputs, const Attrs& attrs) {
    return op1(id, inputs, OpAttrs::make(attrs));
  }
  // A value known at import as a const node of the graph being built.
  ir::Entry constant(NDArray value);
  const TensorType& entry_type(ir::Entry e) const { return graph_.type(e); }

  [[noreturn]] void unsupported(std::string_view what) const;

 private:
  const Value& value(size_t i) const;

  GraphBuilder& builder_;
  const pb::NodeProto& node_;
  int opset_;
  ir::Graph& graph_;
  std::vector<NDArray>& consts_;
  int ops_added_ = 0;
};

// Arrays made at import (folded values, constant blocks) hold at most this
// many elements; larger ones are refused rather than allocated.
inline constexpr int64_t kMaxImportElements = int64_t{1} << 24;

// A converter of one op type (all opsets; it reads n.opset() where semantics changed).
using ConvertFn = void (*)(NodeContext& n);

// The table of converters, filled at static initialization by
// KILN_ONNX_CONVERTER in ops_*.cc (those files are part of libkiln, so none
// is dropped by the linker).
const std::map<std::string, ConvertFn, std::less<>>& converters();
bool register_converter(std::string_view op_type, ConvertFn fn);

#define KILN_ONNX_CONCAT2(a, b) a##b
#define KILN_ONNX_CONCAT(a, b) KILN_ONNX_CONCAT2(a, b)
#define KILN_ONNX_CONVERTER(op_type, fn) \
  [[maybe_unused]] static const bool KILN_ONNX_CONCAT(kiln_onnx_reg_, __LINE__) = register_converter(op_type, fn)

// Shared by converters: `x` padded per axis by pads [begin_0, ..., end_0, ...]
// (negative entries crop) in ONNX Pad's `mode` ("constant" with `value`,
// "edge", "reflect"); frontend/formats/onnx/ops_pad.cc.
ir::Entry pad(NodeContext& n, ir::Entry x, const std::vector<int64_t>& pads, const std::string& mode, double value);

// Shared by converters, small graph builders (frontend/formats/onnx/ops_shape.cc):
// `e` reshaped to `dims` (no op when it has them);
ir::Entry reshape_to(NodeContext& n, ir::Entry e, const std::vector<int64_t>& dims);
// `e` cast to `t` (no op when it has that dtype);
ir::Entry cast_to(NodeContext& n, ir::Entry e, DType t);
// a scalar op (ScalarAttrs: _plus_scalar, _mul_scalar, ...) of `e` and `s`;
ir::Entry scalar_op(NodeContext& n, OpId id, ir::Entry e, double s);
// rows [begin, end) of `axis`;
ir::Entry slice_axis(NodeContext& n, ir::Entry e, int axis, int64_t begin, int64_t end);
// `parts` joined along `axis` (the part itself when there is one).
ir::Entry concat(NodeContext& n, const std::vector<ir::Entry>& parts, int axis);
// Shared by converters (frontend/formats/onnx/ops_nn.cc), ONNX activations
// also used inside other ops (RNN/GRU/LSTM): clip(alpha x + beta, 0, 1); x
// where x > alpha, else 0 (a where, so that -inf gives 0, not NaN).
ir::Entry hard_sigmoid(NodeContext& n, ir::Entry x, double alpha, double beta);
ir::Entry thresholded_relu(NodeContext& n, ir::Entry x, double alpha);

// Shared by converters (frontend/formats/onnx/ops_nn.cc): x normalized by its
// mean and biased variance over `axes` (kept as length 1), then scaled by
// `scale` and shifted by `bias`, both [C] and applied along axis 1 of x
// (BatchNormalization in training mode, InstanceNormalization).
struct Normalized {
  ir::Entry y, mean, var;
};
Normalized normalize_channels(NodeContext& n, ir::Entry x, const IntTuple& axes, double eps, ir::Entry scale,
                              ir::Entry bias);
// Shared by converters: axes from the attribute (before `input_since_opset`)
// or from the optional input `input` (known at import); nullopt when absent.
std::optional<std::vector<int64_t>> axes_of(NodeContext& n, int input_since_opset, size_t input = 1);

// Shared by converters: `axis` in [-rank, rank) made non-negative (IndexError naming the node otherwise).
int normalize_onnx_axis(const NodeContext& n, int64_t axis, int rank);

}  // namespace kiln::onnx
