#include "passes/gradient.h"

#include <memory>

#include "ir/grad.h"
#include "ir/ops/init.h"
#include "ir/ops/nn.h"
#include "passes/graph_grad_builder.h"

namespace kiln::passes {

std::string head_grad_name(const ir::Graph& forward, size_t i) {
  const ir::Entry& e = forward.outputs()[i];
  const std::string& node = forward.node(e.node).name;
  std::string name = e.index == 0 ? node + "_grad" : fmt::format("{}_{}_grad", node, e.index);
  bool taken = forward.find(name).has_value();
  for (size_t j = 0; j < i && !taken; ++j) taken = forward.outputs()[j] == e;
  return taken ? fmt::format("{}_{}", name, i) : name;
}

ir::Graph build_gradient_graph(const ir::Graph& forward, std::span<const std::string> wrt,
                               std::optional<bool> train_mode) {
  const size_t n = forward.size();
  std::vector<ir::NodeId> targets;
  std::vector<bool> needs(n, false);  // the node's outputs depend on a requested node
  for (const std::string& name : wrt) {
    auto id = forward.find(name);
    KILN_CHECK(id.has_value(), ValueError, "gradient: no node named '{}' to differentiate with respect to", name);
    const ir::Node& node = forward.node(*id);
    KILN_CHECK(!node.is_op() && node.kind != ir::NodeKind::kConst, ValueError,
               "gradient: '{}' is {} node ({}); expected an input, param or aux node", name,
               node.is_op() ? "an op" : "a const", node.is_op() ? op_def(node.op).name : "constant");
    targets.push_back(*id);
    needs[static_cast<size_t>(*id)] = true;
  }
  for (size_t i = 0; i < n; ++i) {
    const ir::Node& node = forward.node(static_cast<ir::NodeId>(i));
    // Fused groups have no gradient: a wrong pass order, not "no dependence".
    if (node.is_op() && node.op == OpId::kFusedElemwise)
      for (const ir::Entry& e : node.inputs)
        KILN_CHECK(!needs[static_cast<size_t>(e.node)], InternalError,
                   "internal error: gradient: node '{}' is a fused group, which has no gradient (fuse-elementwise "
                   "runs after the gradient graph is built)",
                   node.name);
    if (!node.is_op() || !op_def(node.op).differentiable) continue;
    for (const ir::Entry& e : node.inputs) needs[i] = needs[i] || needs[static_cast<size_t>(e.node)];
  }

  ir::Graph g = forward;
  GraphGradBuilder b(g, train_mode);
  // Contributions to the gradient of each forward entry, by node then output.
  std::vector<std::vector<std::vector<ir::Entry>>> parts(n);
  auto parts_of = [&](ir::Entry e) -> std::vector<ir::Entry>& {
    auto& p = parts[static_cast<size_t>(e.node)];
    if (p.empty()) p.resize(static_cast<size_t>(forward.node(e.node).num_outputs()));
    return p[static_cast<size_t>(e.index)];
  };
  for (size_t i = 0; i < forward.outputs().size(); ++i) {
    ir::Entry out = forward.outputs()[i];
    ir::Entry head = g.add_input(head_grad_name(forward, i), forward.type(out));
    if (needs[static_cast<size_t>(out.node)]) parts_of(out).push_back(head);
  }

  for (size_t r = n; r-- > 0;) {
    auto id = static_cast<ir::NodeId>(r);
    const ir::Node& node = forward.node(id);
    if (!node.is_op() || !needs[r] || parts[r].empty()) continue;
    const OpDef& def = op_def(node.op);
    KILN_CHECK(def.grad != nullptr, NotSupported, "gradient: node '{}' ({}) is differentiable but has no gradient",
               node.name, def.name);
    b.set_scope(node.name + "_grad");
    std::vector<GradValue> in_vals, out_vals, og_vals;
    std::vector<TensorType> in_types;
    for (const ir::Entry& e : node.inputs) {
      if (def.grad_uses_inputs) in_vals.push_back(b.add(e));
      in_types.push_back(forward.type(e));
    }
    for (int k = 0; k < node.num_outputs(); ++k) {
      if (def.grad_uses_outputs) out_vals.push_back(def.grad_keeps_output(static_cast<size_t>(k)) ? b.add({id, k}) : GradValue{});
      const std::vector<ir::Entry>& p = parts[r][static_cast<size_t>(k)];
      og_vals.push_back(p.empty() && def.grad_takes_none_out_grads
                            ? GradValue{}
                            : b.add(b.sum(p, node.types[static_cast<size_t>(k)])));
    }
    const size_t n_in = node.inputs.size();
    std::unique_ptr<bool[]> in_needs(new bool[n_in]);  // not vector<bool>: GradArgs needs contiguous bools
    for (size_t k = 0; k < n_in; ++k) in_needs[k] = needs[static_cast<size_t>(node.inputs[k].node)];
    std::vector<GradValue> in_grads(n_in);
    GradArgs args{node.attrs, in_vals, out_vals, og_vals, {in_needs.get(), n_in}, in_types};
    try {
      def.grad(b, args, in_grads);
    } catch (Error& e) {
      e.add_context(fmt::format("gradient of node '{}' ({})", node.name, def.name));
      throw;
    }
    for (size_t k = 0; k < n_in; ++k) {
      if (!in_needs[k] || in_grads[k].is_none()) continue;
      parts_of(node.inputs[k]).push_back(b.entry(in_grads[k]));
    }
    parts[r].clear();  // consumed
  }

  std::vector<ir::Entry> outputs = forward.outputs();
  std::map<ir::NodeId, ir::Entry> summed;
  for (ir::NodeId id : targets) {
    auto it = summed.find(id);
    if (it == summed.end()) {
      b.set_scope(forward.node(id).name + "_grad");
      auto& p = parts[static_cast<size_t>(id)];
      it = summed.emplace(id, b.sum(p.empty() ? std::vector<ir::Entry>{} : p[0], forward.node(id).types[0])).first;
    }
    outputs.push_back(it->second);
  }
  g.set_outputs(std::move(outputs));
  return g;
}

ir::Graph gradient(const ir::Graph& g, PassContext& ctx) {
  std::vector<std::string> wrt = ctx.options.gradient.wrt;
  if (wrt.empty())
    for (ir::NodeId id : g.nodes_of_kind(ir::NodeKind::kParam)) wrt.push_back(g.node(id).name);
  ir::Graph out = build_gradient_graph(g, wrt, ctx.options.train_mode);
  PassStats& stats = ctx.current();
  stats.added += static_cast<int64_t>(out.size() - g.size());
  stats.changed = true;
  return out;
}

}  // namespace kiln::passes
