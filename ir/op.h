// The operator registry: one OpDef per operator, used by every path
// (imperative invoke, tracing, passes, executor, export/import, autograd).
//
//   const OpDef& def = op_def(OpId::kBroadcastAdd);   // by id (fast, array index)
//   const OpDef* d = find_op("broadcast_add");         // by MXNet name or alias
//   std::vector<TensorType> out;
//   def.infer(attrs, inputs, out);                     // the one shape/dtype check
//
// Families register their OpDefs from ir/ops/<family>.cc through explicit
// calls in ir/op_registry.cc (no static registrars: they are dropped by linkers).
// The registry is built once, on first use, and is immutable afterwards, so it
// is safe to read from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/shape.h"

namespace kiln {

class GradBuilder;
struct GradArgs;
struct GradValue;

enum class OpId : uint16_t {
#define KILN_OP(id, name) k##id,
#include "ir/op_list.def"
#undef KILN_OP
  kNumOps
};

inline constexpr int kNumOps = static_cast<int>(OpId::kNumOps);

// The static type of an array: what inference reads and writes.
struct TensorType {
  Shape shape;
  DType dtype = DType::kFloat32;
  bool operator==(const TensorType&) const = default;
};

// Shape/dtype inference. Reads `attrs` and the input types, appends one
// TensorType per output to `out` (which arrives empty). Throws ShapeError /
// TypeError / ValueError with a message that need not name the op: the caller
// prefixes the op name, node and input types.
using InferFn = void (*)(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out);

// Parses MXNet's string attributes into the op's typed struct.
using ParseAttrsFn = OpAttrs (*)(std::string_view op, const AttrMap& strings);

// How an op runs under a mixed-precision policy (autocast at invoke and the
// amp-cast pass apply the same rule: frontend/amp.h, passes/amp_cast.h).
enum class AmpPolicy : uint8_t {
  kFollow,   // no casts: runs in the dtype its inputs have (shape ops, activations, pooling)
  kLow,      // floating inputs are cast to the 16-bit type (the matrix products: tensor/tile units)
  kFloat32,  // floating inputs are cast to float32 (softmax, losses, norms, exp/log, powers)
  kPromote,  // floating inputs are cast to the widest floating dtype among them (binary ops, concat)
};

struct OpDef {
  OpId id{};
  std::string_view name;        // MXNet's spelling; what export writes
  std::string_view doc;         // one line
  int num_inputs = 1;           // -1: variadic (count comes from attrs, e.g. num_args)
  std::vector<std::string_view> input_names;  // "data", "weight", ...; empty for variadic
  InferFn infer = nullptr;
  ParseAttrsFn parse_attrs = nullptr;  // null: the op takes no attributes
  // Input indices the op mutates in place (aux states such as BatchNorm's
  // moving_mean); the executor treats them as written.
  std::vector<int> mutate_inputs;
  // Elementwise ops whose output i may share storage with input j.
  std::vector<std::pair<int, int>> inplace;
  // How to differentiate (ir/grad.h): a small graph of ordinary ops.
  // `differentiable` false means "has no gradient" (comparisons, argmax,
  // init ops); a differentiable op must set `grad`.
  bool differentiable = true;
  void (*grad)(GradBuilder& b, const GradArgs& args, std::span<GradValue> in_grads) = nullptr;
  // What the gradient reads of the forward call: autograd keeps only these
  // alive, and the memory planner frees the rest early.
  bool grad_uses_inputs = true;
  bool grad_uses_outputs = false;
  // With grad_uses_outputs: outputs (bit i for output i) the gradient never
  // reads, which autograd does not keep (BatchNorm reads its mean and var,
  // not its activation-sized output).
  uint64_t grad_unused_outputs = 0;
  // The GradFn takes a none gradient for any output (ir/grad.h): where some
  // outputs' gradients reach the op and others' do not, autograd and the
  // gradient pass hand none for the others, not zeros to compute with
  // (LayerNorm's mean and std, which models rarely read).
  bool grad_takes_none_out_grads = false;
  // Mixed precision: the op's policy, and inputs (bit i for input i) that
  // stay float32 whatever the data's dtype (BatchNorm's scale, shift and
  // statistics), which autocast and Block::cast leave in float32.
  AmpPolicy amp = AmpPolicy::kFollow;
  uint64_t amp_float32_inputs = 0;
  bool keeps_float32(size_t input) const { return input < 64 && ((amp_float32_inputs >> input) & 1) != 0; }
  bool grad_keeps_output(size_t i) const {
    return grad_uses_outputs && (i >= 64 || ((grad_unused_outputs >> i) & 1) == 0);
  }
};

const OpDef& op_def(OpId id);
const OpDef* find_op(std::string_view name);  // MXNet name or alias; nullptr if unknown
std::span<const OpDef> all_ops();

// Runs def.infer and prefixes errors with the op and input types:
// "broadcast_add(f32[2,3], f32[4]): shapes ... cannot be broadcast".
void infer_types(const OpDef& def, const OpAttrs& attrs, std::span<const TensorType> in,
                 std::vector<TensorType>& out);

// Helper for ops whose attributes struct is T.
template <typename T>
OpAttrs parse_attrs_as(std::string_view op, const AttrMap& strings) {
  return OpAttrs::parse<T>(op, strings);
}

// Used by ir/ops/<family>.cc to add its ops (called once, from the registry).
class OpRegistry {
 public:
  OpDef& define(OpId id, std::string_view doc);  // name comes from op_list.def
  void alias(std::string_view alias, OpId id);   // "_Plus" -> elemwise_add, "concat" -> Concat
  // An op defined earlier, for attaching its gradient from ir/ops/<family>_grad.cc.
  OpDef& defined(OpId id);
};

}  // namespace kiln
