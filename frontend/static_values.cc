#include "frontend/static_values.h"

#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "frontend/graph_executor.h"
#include "passes/graph_copy.h"
#include "passes/op_effects.h"
#include "runtime/engine_writes.h"

namespace kiln {
namespace {

bool hoisting_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("KILN_HOIST");
    return env == nullptr || std::string_view(env) != "0";
  }();
  return on;
}

// Per node: whether its value depends only on parameters, aux states and
// constants that no op writes, through pure ops.
std::vector<char> static_nodes(const ir::Graph& g) {
  std::vector<char> mutated(g.size(), 0);
  for (const ir::Node& n : g.nodes()) {
    if (!n.is_op()) continue;
    for (int m : op_def(n.op).mutate_inputs) mutated[static_cast<size_t>(n.inputs[static_cast<size_t>(m)].node)] = 1;
  }
  std::vector<char> fixed(g.size(), 0);
  for (size_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.nodes()[id];
    if (!n.is_op()) {
      fixed[id] = n.kind != ir::NodeKind::kInput && !mutated[id];
      continue;
    }
    bool all = passes::is_pure(op_def(n.op));
    for (const ir::Entry& e : n.inputs) all = all && fixed[static_cast<size_t>(e.node)];
    fixed[id] = all;
  }
  // Graph outputs stay in the main graph: they are fresh arrays per call.
  for (const ir::Entry& e : g.outputs())
    if (g.node(e.node).is_op()) fixed[static_cast<size_t>(e.node)] = 0;
  return fixed;
}

}  // namespace

StaticValues::~StaticValues() = default;

std::pair<std::shared_ptr<const trace::TracedGraph>, std::unique_ptr<StaticValues>> StaticValues::split(
    std::shared_ptr<const trace::TracedGraph> traced) {
  const ir::Graph& g = traced->graph;
  if (!hoisting_enabled()) return {std::move(traced), nullptr};
  const std::vector<char> fixed = static_nodes(g);
  auto hoisted = [&](ir::NodeId id) { return fixed[static_cast<size_t>(id)] && g.node(id).is_op(); };

  // The static values other nodes read, in graph order.
  std::vector<ir::Entry> values;
  std::map<std::pair<ir::NodeId, int>, size_t> value_index;
  for (const ir::Node& n : g.nodes()) {
    if (!n.is_op() || fixed[static_cast<size_t>(&n - g.nodes().data())]) continue;
    for (const ir::Entry& e : n.inputs)
      if (hoisted(e.node) && value_index.emplace(std::pair{e.node, e.index}, values.size()).second) values.push_back(e);
  }
  if (values.empty()) return {std::move(traced), nullptr};

  std::unique_ptr<StaticValues> s(new StaticValues());
  // The static part: the ops the values need and their sources, the values as outputs.
  auto statics = std::make_shared<trace::TracedGraph>();
  statics->device = traced->device;
  {
    std::vector<char> needed(g.size(), 0);
    for (const ir::Entry& e : values) needed[static_cast<size_t>(e.node)] = 1;
    for (size_t id = g.size(); id-- > 0;)
      if (needed[id] && g.nodes()[id].is_op())  // a constant's "input" is its slot, not a node
        for (const ir::Entry& e : g.nodes()[id].inputs) needed[static_cast<size_t>(e.node)] = 1;
    passes::GraphCopy copy(g);
    for (size_t id = 0; id < g.size(); ++id)
      if (needed[id]) copy.copy_node(static_cast<ir::NodeId>(id));
    std::vector<ir::Entry> outputs;
    for (const ir::Entry& e : values) outputs.push_back(copy.map(e));
    copy.graph().set_outputs(outputs);
    statics->graph = std::move(copy.graph());
    for (const auto& [id, p] : traced->params)
      if (needed[static_cast<size_t>(id)]) statics->params.emplace_back(*statics->graph.find(g.node(id).name), p);
    for (const auto& [id, c] : traced->consts)
      if (needed[static_cast<size_t>(id)]) statics->consts.emplace_back(*statics->graph.find(g.node(id).name), c);
  }

  // The main graph: the hoisted ops gone, the values read as constants.
  auto main = std::make_shared<trace::TracedGraph>();
  main->device = traced->device;
  std::vector<ir::NodeId> value_nodes(values.size(), -1);
  passes::GraphCopy copy(g);
  for (size_t id = 0; id < g.size(); ++id) {
    const auto nid = static_cast<ir::NodeId>(id);
    if (!hoisted(nid)) {
      copy.copy_node(nid);
      continue;
    }
    for (int i = 0; i < g.node(nid).num_outputs(); ++i) {
      auto it = value_index.find({nid, i});
      if (it == value_index.end()) continue;
      std::string name = g.node(nid).name + "/static" + (i > 0 ? std::to_string(i) : "");
      const auto slot = static_cast<int32_t>(traced->consts.size() + it->second);
      const ir::Entry c = copy.graph().add_const(std::move(name), g.type({nid, i}), slot);
      value_nodes[it->second] = c.node;
      copy.map_entry({nid, i}, c);
    }
  }
  main->graph = copy.finish();
  auto id_of = [&](ir::NodeId old) { return *main->graph.find(g.node(old).name); };
  for (ir::NodeId id : traced->inputs) main->inputs.push_back(id_of(id));
  for (const auto& [id, p] : traced->params) main->params.emplace_back(id_of(id), p);
  for (const auto& [id, c] : traced->consts) main->consts.emplace_back(id_of(id), c);
  for (size_t k = 0; k < values.size(); ++k) {
    const TensorType& t = g.type(values[k]);
    s->values_.push_back(NDArray::empty(t.shape, {t.dtype, traced->device}));
    main->consts.emplace_back(value_nodes[k], s->values_.back());
  }
  s->statics_ = statics;
  s->exec_ = std::make_unique<GraphExecutor>(statics, GraphExecutor::BlockLayout{});
  return {std::move(main), std::move(s)};
}

template <typename Fn>
void StaticValues::for_each_source(Fn&& fn) const {
  size_t i = 0;
  for (const auto& [id, p] : statics_->params) {
    const engine::Var* v = p.data(statics_->device).var();
    fn(i++, v, engine::last_write(v));
  }
  for (const auto& [id, c] : statics_->consts) fn(i++, c.var(), engine::last_write(c.var()));
}

void StaticValues::refresh(bool is_train) {
  std::lock_guard lock(mutex_);
  bool same = computations_ > 0;
  for_each_source([&](size_t i, const engine::Var* v, uint64_t w) { same = same && seen_[i] == std::pair{v, w}; });
  if (same) return;
  exec_->run({}, is_train, {.outputs_into = values_});
  ++computations_;
  seen_.resize(statics_->params.size() + statics_->consts.size());
  for_each_source([&](size_t i, const engine::Var* v, uint64_t w) { seen_[i] = {v, w}; });
}

int64_t StaticValues::computations() const {
  std::lock_guard lock(mutex_);
  return computations_;
}

}  // namespace kiln
