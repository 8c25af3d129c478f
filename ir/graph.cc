#include "ir/graph.h"

namespace kiln::ir {

std::string_view node_kind_name(NodeKind kind) {
  switch (kind) {
    case NodeKind::kInput: return "input";
    case NodeKind::kParam: return "param";
    case NodeKind::kAux: return "aux";
    case NodeKind::kConst: return "const";
    case NodeKind::kOp: return "op";
  }
  return "?";
}

std::string Graph::unique_name(std::string_view base) {
  std::string name(base);
  while (by_name_.contains(name)) name = fmt::format("{}{}", base, name_counters_[std::string(base)]++);
  return name;
}

NodeId Graph::append(Node node) {
  KILN_CHECK(!by_name_.contains(node.name), ValueError, "graph: a node named '{}' already exists", node.name);
  auto id = static_cast<NodeId>(nodes_.size());
  by_name_.emplace(node.name, id);
  nodes_.push_back(std::move(node));
  return id;
}

Entry Graph::add_input(std::string name, TensorType type) {
  return {append(Node{NodeKind::kInput, {}, {}, std::move(name), {}, {type}}), 0};
}

Entry Graph::add_param(std::string name, TensorType type, bool is_aux) {
  return {append(Node{is_aux ? NodeKind::kAux : NodeKind::kParam, {}, {}, std::move(name), {}, {type}}), 0};
}

Entry Graph::add_const(std::string name, TensorType type, int32_t const_slot) {
  Node n{NodeKind::kConst, {}, {}, std::move(name), {}, {type}};
  n.inputs.push_back({-1, const_slot});  // the slot in the owner's constant table
  return {append(std::move(n)), 0};
}

std::vector<Entry> Graph::add_op(OpId op, OpAttrs attrs, std::span<const Entry> inputs, std::string name) {
  const OpDef& def = op_def(op);
  if (name.empty()) {
    std::string base(def.name);
    if (!base.empty() && base[0] == '_') base.erase(0, 1);
    for (char& c : base) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    name = unique_name(base);
  }
  std::vector<TensorType> in_types;
  for (const Entry& e : inputs) {
    KILN_CHECK(e.node >= 0 && static_cast<size_t>(e.node) < nodes_.size() &&
                   e.index < node(e.node).num_outputs(),
               ValueError, "graph: node '{}' ({}) refers to a missing input (node {}, output {})", name, def.name,
               e.node, e.index);
    in_types.push_back(type(e));
  }
  Node n{NodeKind::kOp, op, std::move(attrs), name, {inputs.begin(), inputs.end()}, {}};
  KILN_CHECK(def.infer != nullptr, NotSupported, "graph: node '{}': op {} has no inference", name, def.name);
  try {
    infer_types(def, n.attrs, in_types, n.types);
  } catch (Error& e) {
    e.add_context(fmt::format("node '{}'", name));
    throw;
  }
  NodeId id = append(std::move(n));
  std::vector<Entry> out;
  for (int i = 0; i < node(id).num_outputs(); ++i) out.push_back({id, i});
  return out;
}

std::vector<NodeId> Graph::nodes_of_kind(NodeKind kind) const {
  std::vector<NodeId> ids;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].kind == kind) ids.push_back(static_cast<NodeId>(i));
  return ids;
}

std::optional<NodeId> Graph::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? std::nullopt : std::optional<NodeId>(it->second);
}

int64_t Graph::num_ops() const {
  int64_t n = 0;
  for (const Node& node : nodes_) n += node.is_op() ? 1 : 0;
  return n;
}

void verify(const Graph& g) {
  auto fail = [](const std::string& what) { throw InternalError("internal error: graph verification: " + what); };
  std::unordered_map<std::string, NodeId> names;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (!names.emplace(n.name, static_cast<NodeId>(i)).second) fail(fmt::format("duplicate node name '{}'", n.name));
    if (n.types.empty()) fail(fmt::format("node '{}' has no outputs", n.name));
    if (!n.is_op()) {
      if (n.kind != NodeKind::kConst && !n.inputs.empty()) fail(fmt::format("{} node '{}' has inputs", node_kind_name(n.kind), n.name));
      continue;
    }
    std::vector<TensorType> in_types;
    for (const Entry& e : n.inputs) {
      if (e.node < 0 || static_cast<size_t>(e.node) >= i)
        fail(fmt::format("node '{}' uses node {} which does not come before it", n.name, e.node));
      if (e.index < 0 || e.index >= g.node(e.node).num_outputs())
        fail(fmt::format("node '{}' uses output {} of '{}', which has {}", n.name, e.index, g.node(e.node).name,
                         g.node(e.node).num_outputs()));
      in_types.push_back(g.type(e));
    }
    std::vector<TensorType> expect;
    try {
      infer_types(op_def(n.op), n.attrs, in_types, expect);
    } catch (const Error& err) {
      fail(fmt::format("node '{}' no longer type-checks: {}", n.name, err.what()));
    }
    if (expect != n.types) fail(fmt::format("node '{}' records types that differ from its inference", n.name));
  }
  for (const Entry& e : g.outputs()) {
    if (e.node < 0 || static_cast<size_t>(e.node) >= g.size() || e.index >= g.node(e.node).num_outputs())
      fail(fmt::format("graph output refers to missing node {} output {}", e.node, e.index));
  }
}

}  // namespace kiln::ir
