#include "frontend/nn/export_onnx.h"

#include "frontend/cached_op.h"
#include "frontend/nn/symbol_block.h"

namespace kiln::nn {

void export_onnx(const HybridBlock& block, const std::string& path, onnx::ExportOptions options) {
  const CachedOp* op = block.cached_op();
  std::shared_ptr<const trace::TracedGraph> t = op ? op->graph_for_export() : nullptr;
  KILN_CHECK(t != nullptr, ValueError,
             "{}: export_onnx needs a traced graph: call hybridize() and run the block once first",
             block.display_name());
  ArrayMap values;
  for (const auto& [id, p] : t->params) values.emplace(t->graph.node(id).name, p.data(t->device));
  for (const auto& [id, a] : t->consts) values.emplace(t->graph.node(id).name, a);
  // An imported model keeps its input names.
  if (const auto* imported = dynamic_cast<const SymbolBlock*>(&block)) {
    for (size_t k = 0; k < t->inputs.size() && k < imported->input_names().size(); ++k)
      options.input_names[t->graph.node(t->inputs[k]).name] = imported->input_names()[k];
  }
  try {
    onnx::save_model(path, t->graph, values, options);
  } catch (Error& e) {
    e.add_context(fmt::format("{}: export_onnx('{}')", block.display_name(), path));
    throw;
  }
}

}  // namespace kiln::nn
