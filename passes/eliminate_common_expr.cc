#include "passes/eliminate_common_expr.h"

#include <tuple>
#include <unordered_map>

#include "passes/graph_copy.h"
#include "passes/op_effects.h"

namespace kiln::passes {
namespace {

// An op call in terms of the new graph's entries.
struct Call {
  OpId op;
  const OpAttrs* attrs;
  std::vector<ir::Entry> inputs;
  bool operator==(const Call& o) const { return op == o.op && inputs == o.inputs && *attrs == *o.attrs; }
};

struct CallHash {
  size_t operator()(const Call& c) const {
    size_t h = std::hash<int>{}(static_cast<int>(c.op)) ^ (c.attrs->hash() * 0x9e3779b97f4a7c15ull);
    for (const ir::Entry& e : c.inputs)
      h = h * 1000003u ^ (static_cast<size_t>(e.node) << 8 ^ static_cast<size_t>(e.index));
    return h;
  }
};

// Binary ops whose result does not depend on the order of the inputs, bit
// for bit (add_n is not among them: the summation order changes rounding).
bool is_commutative(OpId op) {
  switch (op) {
    case OpId::kElemwiseAdd:
    case OpId::kElemwiseMul:
    case OpId::kBroadcastAdd:
    case OpId::kBroadcastMul:
    case OpId::kBroadcastMaximum:
    case OpId::kBroadcastMinimum:
    case OpId::kBroadcastEqual:
    case OpId::kBroadcastNotEqual:
      return true;
    default:
      return false;
  }
}

}  // namespace

ir::Graph eliminate_common_expr(const ir::Graph& g, PassContext& ctx) {
  GraphCopy copy(g);
  std::unordered_map<Call, ir::NodeId, CallHash> seen;  // call -> node in the new graph
  int64_t merged = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    auto id = static_cast<ir::NodeId>(i);
    const ir::Node& n = g.node(id);
    if (!n.is_op() || !is_pure(op_def(n.op))) {
      copy.copy_node(id);
      continue;
    }
    Call call{n.op, &n.attrs, {}};
    for (const ir::Entry& e : n.inputs) call.inputs.push_back(copy.map(e));
    if (is_commutative(n.op) &&
        std::tie(call.inputs[1].node, call.inputs[1].index) < std::tie(call.inputs[0].node, call.inputs[0].index))
      std::swap(call.inputs[0], call.inputs[1]);
    auto it = seen.find(call);
    if (it != seen.end()) {
      for (int k = 0; k < n.num_outputs(); ++k) copy.map_entry({id, k}, {it->second, k});
      ++merged;
      continue;
    }
    ir::NodeId kept = copy.copy_node(id)[0].node;
    seen.emplace(std::move(call), kept);
  }
  PassStats& stats = ctx.current();
  stats.merged += merged;
  if (merged == 0) return g;
  stats.changed = true;
  return copy.finish();
}

}  // namespace kiln::passes
