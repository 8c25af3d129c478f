#include "passes/graph_copy.h"

namespace kiln::passes {

GraphCopy::GraphCopy(const ir::Graph& src) : src_(src), map_(src.size()) {
  for (size_t i = 0; i < src.size(); ++i)
    map_[i].resize(static_cast<size_t>(src.node(static_cast<ir::NodeId>(i)).num_outputs()));
}

std::vector<ir::Entry> GraphCopy::copy_node(ir::NodeId id, const TensorType* type) {
  const ir::Node& n = src_.node(id);
  std::vector<ir::Entry> out;
  switch (n.kind) {
    case ir::NodeKind::kInput:
      out = {dst_.add_input(n.name, type ? *type : n.types[0])};
      break;
    case ir::NodeKind::kParam:
      out = {dst_.add_param(n.name, type ? *type : n.types[0])};
      break;
    case ir::NodeKind::kAux:
      out = {dst_.add_param(n.name, type ? *type : n.types[0], true)};
      break;
    case ir::NodeKind::kConst:
      out = {dst_.add_const(n.name, type ? *type : n.types[0], n.inputs[0].index)};
      break;
    case ir::NodeKind::kOp: {
      std::vector<ir::Entry> inputs;
      inputs.reserve(n.inputs.size());
      for (const ir::Entry& e : n.inputs) inputs.push_back(map(e));
      out = dst_.add_op(n.op, n.attrs, inputs, n.name);
      break;
    }
  }
  for (size_t k = 0; k < out.size() && k < map_[static_cast<size_t>(id)].size(); ++k)
    map_[static_cast<size_t>(id)][k] = out[k];
  return out;
}

void GraphCopy::map_entry(ir::Entry from, ir::Entry to) {
  map_[static_cast<size_t>(from.node)][static_cast<size_t>(from.index)] = to;
}

bool GraphCopy::is_mapped(ir::Entry e) const {
  return map_[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)].node >= 0;
}

ir::Entry GraphCopy::map(ir::Entry e) const {
  KILN_ASSERT(e.node >= 0 && static_cast<size_t>(e.node) < map_.size());
  ir::Entry m = map_[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)];
  KILN_ASSERT(m.node >= 0);
  return m;
}

ir::Graph GraphCopy::finish() {
  std::vector<ir::Entry> outs;
  for (const ir::Entry& e : src_.outputs()) outs.push_back(map(e));
  dst_.set_outputs(std::move(outs));
  return std::move(dst_);
}

}  // namespace kiln::passes
