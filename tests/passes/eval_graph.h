// A test-only interpreter for ir::Graph: runs each op node through invoke
// with the arrays bound to input/param/aux nodes by name, and helpers to
// compare the results of two graphs. (frontend/graph_eval is the real one.)
//
//   auto outs = eval_graph(g, {{"x", x}, {"w", w}});
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/graph.h"

namespace kiln::testing {

using Bindings = std::map<std::string, NDArray, std::less<>>;

inline std::vector<NDArray> eval_graph(const ir::Graph& g, const Bindings& bound) {
  std::vector<std::vector<NDArray>> values(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const ir::Node& n = g.node(static_cast<ir::NodeId>(i));
    if (!n.is_op()) {
      auto it = bound.find(n.name);
      if (it == bound.end()) throw ValueError("eval_graph: nothing bound to " + n.name);
      values[i] = {it->second};
      continue;
    }
    std::vector<NDArray> in;
    for (const ir::Entry& e : n.inputs) in.push_back(values[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)]);
    values[i] = invoke(n.op, in, n.attrs);
  }
  std::vector<NDArray> out;
  for (const ir::Entry& e : g.outputs())
    out.push_back(values[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)]);
  return out;
}

// Random float64 (or the node's dtype) values for every input/param/aux node.
inline Bindings random_bindings(const ir::Graph& g, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Bindings b;
  for (const ir::Node& n : g.nodes()) {
    if (n.is_op()) continue;
    std::vector<double> v(static_cast<size_t>(n.types[0].shape.size()));
    for (double& x : v) x = dist(gen);
    b[n.name] = nd::array(v, n.types[0].shape).astype(n.types[0].dtype);
  }
  return b;
}

inline void expect_all_close(const std::vector<NDArray>& a, const std::vector<NDArray>& b, double rtol = 1e-9,
                             double atol = 1e-12, const std::string& what = "") {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].shape(), b[i].shape()) << what << " output " << i;
    std::vector<double> x = a[i].astype(DType::kFloat64).to_vector<double>();
    std::vector<double> y = b[i].astype(DType::kFloat64).to_vector<double>();
    for (size_t k = 0; k < x.size(); ++k)
      ASSERT_NEAR(x[k], y[k], atol + rtol * std::fabs(y[k])) << what << " output " << i << " element " << k;
  }
}

}  // namespace kiln::testing
