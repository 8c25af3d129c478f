#include "frontend/check_hybridize.h"

#include <cmath>

#include <fmt/ranges.h>

#include "frontend/autograd.h"
#include "frontend/cached_op.h"
#include "frontend/graph_eval.h"
#include "frontend/graph_executor.h"
#include "frontend/nn/block.h"
#include "frontend/trace.h"
#include "ir/error.h"

namespace kiln {
namespace {

// Index of flat position `i` in `shape`: "[0,5]".
std::string index_of(const Shape& shape, int64_t i) {
  std::vector<int64_t> idx(static_cast<size_t>(shape.ndim()));
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = shape[d] == 0 ? 0 : i % shape[d];
    i = shape[d] == 0 ? 0 : i / shape[d];
  }
  return fmt::format("[{}]", fmt::join(idx, ","));
}

// The worst element of `got` against `want` beyond tolerance, described; nullopt if none.
std::optional<std::string> compare(const NDArray& got, const NDArray& want, double tolerance, std::string_view a_name,
                                   std::string_view b_name) {
  if (got.shape() != want.shape()) return fmt::format("shapes differ: {} vs {}", got.shape(), want.shape());
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  int64_t at = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    double d = std::abs(g[i] - w[i]);
    bool bad = !(d <= tolerance * (1 + std::abs(w[i])));  // NaN counts as bad
    if (bad && (at < 0 || d > worst || std::isnan(d))) {
      worst = d;
      at = static_cast<int64_t>(i);
    }
  }
  if (at < 0) return std::nullopt;
  auto i = static_cast<size_t>(at);
  return fmt::format("max |{} - {}| = {:.3g} at {} ({} {:.6g}, {} {:.6g})", a_name, b_name, worst,
                     index_of(got.shape(), at), a_name, g[i], b_name, w[i]);
}

}  // namespace

std::optional<std::string> first_mismatch(const ir::Graph& g, std::span<const NDArray> a, std::span<const NDArray> b,
                                          double tolerance) {
  size_t k = 0, agreed = 0;
  for (const ir::Node& n : g.nodes()) {
    for (int i = 0; i < n.num_outputs(); ++i, ++k) {
      KILN_CHECK(k < a.size() && k < b.size(), ValueError, "first_mismatch: fewer values than node outputs");
      if (!n.is_op()) continue;
      if (auto d = compare(a[k], b[k], tolerance, "compiled", "reference")) {
        return fmt::format("node '{}' ({}) output {}: {}; the {} node outputs before it agree", n.name,
                           op_def(n.op).name, i, *d, agreed);
      }
      ++agreed;
    }
  }
  return std::nullopt;
}

std::optional<std::string> check_hybridize(nn::Block& block, std::span<const NDArray> inputs, double tolerance) {
  KILN_CHECK(!inputs.empty(), ValueError, "check_hybridize: needs at least one input");
  const Device device = inputs[0].device();
  std::vector<TensorType> types;
  for (const NDArray& x : inputs) types.push_back({x.shape(), x.dtype()});
  auto traced = std::make_shared<trace::TracedGraph>(trace_block(block, types, device, block.display_name()));
  const size_t num_outputs = traced->graph.outputs().size();
  // Every node output becomes a graph output (after the block's own).
  std::vector<ir::Entry> all = traced->graph.outputs();
  for (size_t id = 0; id < traced->graph.size(); ++id)
    for (int i = 0; i < traced->graph.nodes()[id].num_outputs(); ++i) all.push_back({static_cast<ir::NodeId>(id), i});
  traced->graph.set_outputs(all);

  std::vector<NDArray> reference = eval_graph(traced->graph, bind_values(*traced, inputs));
  std::vector<NDArray> compiled = GraphExecutor(traced).run(inputs, autograd::is_training());
  std::span<const NDArray> ref_nodes(reference.data() + num_outputs, reference.size() - num_outputs);
  std::span<const NDArray> cmp_nodes(compiled.data() + num_outputs, compiled.size() - num_outputs);
  if (auto m = first_mismatch(traced->graph, cmp_nodes, ref_nodes, tolerance))
    return fmt::format("{}: {}", block.display_name(), *m);

  std::vector<NDArray> imperative = block.forward(inputs);
  KILN_CHECK(imperative.size() == num_outputs, ValueError,
             "check_hybridize: the imperative forward returned {} outputs, the trace {}", imperative.size(),
             num_outputs);
  for (size_t i = 0; i < num_outputs; ++i) {
    if (auto d = compare(compiled[i], imperative[i], tolerance, "compiled", "imperative"))
      return fmt::format("{}: output {}: {} (every node agrees with the reference executor, so the imperative "
                         "forward computes something the trace did not record)",
                         block.display_name(), i, *d);
  }
  return std::nullopt;
}

}  // namespace kiln
