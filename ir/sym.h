// The symbolic API: one graph-building function per op of ir/op_list.def,
// generated from the list the op registry is built from (as MXNet generates
// mx.sym.* from its registry), so a new op gets its builder with no extra
// code. Each appends one node to a graph and infers its output types at once
// (shape errors name the node and its input types):
//
//   ir::Graph g;
//   ir::Entry x = g.add_input("data", {Shape{8, 1, 28, 28}});
//   ir::Entry w = g.add_param("conv0.weight", {Shape{20, 1, 3, 3}});
//   ir::Entry c = ir::sym::Convolution(g, {x, w}, {{"kernel", "(3, 3)"}, {"num_filter", "20"}, {"no_bias", "True"}});
//   ir::Entry r = ir::sym::Activation(g, {c}, ActivationAttrs{.act_type = ActType::kRelu}, "relu0");
//   auto bn = ir::sym::BatchNorm(g, {r, gamma, beta, mean, var});   // bn[0] (also: Entry(bn)), bn[1], bn[2]
//   ir::Entry s = ir::sym::AddN(g, std::vector<ir::Entry>{a, b, c}, {{"num_args", "3"}});
//
// Functions are named by the op's id in ir/op_list.def (Convolution,
// ElemwiseAdd, Relu, PlusScalar, ...), not by its MXNet spelling. Attributes
// come as MXNet's strings (parsed by the op's OpDef exactly as a symbol file's
// are: unknown keys and bad values throw ValueError naming the op) or as the
// op's typed struct from ir/ops/*.h (printed and parsed back by the op, so a
// struct of another op that sets a field this op lacks is refused, not misread).
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "ir/attrs.h"
#include "ir/graph.h"
#include "ir/op.h"

namespace kiln::ir::sym {

// The outputs of one appended node. Converts to the first output, the one
// MXNet's symbols show (BatchNorm's data output, not its batch statistics).
class Outputs {
 public:
  explicit Outputs(std::vector<Entry> entries) : entries_(std::move(entries)) {}
  operator Entry() const { return entries_.front(); }  // every op has at least one output
  Entry operator[](size_t i) const;                    // ValueError past the last output
  size_t size() const { return entries_.size(); }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

// What every generated function calls: `op` with string attributes.
Outputs apply(Graph& g, OpId op, std::span<const Entry> inputs, const AttrMap& attrs, std::string name);
// The same with typed attributes (an OpAttrs made from some op's struct).
Outputs apply(Graph& g, OpId op, std::span<const Entry> inputs, const OpAttrs& attrs, std::string name);

#define KILN_OP(id, mxnet_name)                                                                                   \
  inline Outputs id(Graph& g, std::initializer_list<Entry> inputs, const AttrMap& attrs = {},                     \
                    std::string name = {}) {                                                                      \
    return apply(g, OpId::k##id, std::span<const Entry>(inputs.begin(), inputs.size()), attrs, std::move(name)); \
  }                                                                                                               \
  inline Outputs id(Graph& g, const std::vector<Entry>& inputs, const AttrMap& attrs = {}, std::string name = {}) { \
    return apply(g, OpId::k##id, inputs, attrs, std::move(name));                                                 \
  }                                                                                                               \
  template <typename Attrs>                                                                                       \
  Outputs id(Graph& g, std::initializer_list<Entry> inputs, const Attrs& attrs, std::string name = {}) {          \
    return apply(g, OpId::k##id, std::span<const Entry>(inputs.begin(), inputs.size()), OpAttrs::make(attrs),     \
                 std::move(name));                                                                                \
  }                                                                                                               \
  template <typename Attrs>                                                                                       \
  Outputs id(Graph& g, const std::vector<Entry>& inputs, const Attrs& attrs, std::string name = {}) {             \
    return apply(g, OpId::k##id, inputs, OpAttrs::make(attrs), std::move(name));                                  \
  }
#include "ir/op_list.def"
#undef KILN_OP

}  // namespace kiln::ir::sym
