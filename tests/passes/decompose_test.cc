// Decompositions (ir/decompose.h): the decompose pass on graphs holding
// _kiln_attention and its backward op (values against the fused kernels in
// float64, the ops left after it), and the fused ops run as their
// decompositions where a device lacks their kernel. On the CPU the kernels
// exist, so the second part runs under KILN_DECOMPOSE (the ctest
// `decompose_test_forced`), imperative and hybridized, training included,
// and skips with one line otherwise.
#include <gtest/gtest.h>

#include <algorithm>

#include "frontend/cached_op.h"
#include "frontend/invoke.h"
#include "frontend/kiln.h"
#include "frontend/nd.h"
#include "frontend/nd_attention.h"
#include "frontend/trace.h"
#include "ir/decompose.h"
#include "ir/ops/attention.h"
#include "passes/pass.h"
#include "tests/frontend/attention_grads.h"
#include "tests/passes/eval_graph.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

NDArray values(Shape s, uint64_t seed, DType t) {
  return nd::array(test::uniform(s.size(), -1.5, 1.5, seed), s).astype(t);
}

int count_op(const ir::Graph& g, OpId op) {
  return static_cast<int>(std::count_if(g.nodes().begin(), g.nodes().end(),
                                        [&](const ir::Node& n) { return n.is_op() && n.op == op; }));
}

struct Case {
  Shape q, k, v;
  bool causal;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {{2, 3, 9, 4}, {2, 3, 9, 4}, {2, 3, 9, 5}, false},
      {{2, 3, 9, 4}, {2, 3, 9, 4}, {2, 3, 9, 5}, true},
      {{2, 4, 6}, {2, 11, 6}, {2, 11, 3}, true},  // Tq < Tk: the last 4 positions
      {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, true},
      {{2, 3, 4}, {2, 0, 4}, {2, 0, 2}, false},  // no key: out 0, lse -inf
  };
  return all;
}

// (q, k, v) -> (out, lse) -> the seven inputs of the backward -> (dq, dk, dv),
// all graph outputs.
ir::Graph attention_graph(const Case& c, DType t) {
  ir::Graph g;
  const OpAttrs a = OpAttrs::make(AttentionAttrs{.causal = c.causal});
  ir::Entry q = g.add_input("q", {c.q, t}), k = g.add_input("k", {c.k, t}), v = g.add_input("v", {c.v, t});
  std::vector<ir::Entry> o = g.add_op(OpId::kAttention, a, std::vector{q, k, v}, "attn");
  ir::Entry dout = g.add_input("dout", g.type(o[0])), dlse = g.add_input("dlse", g.type(o[1]));
  std::vector<ir::Entry> grads =
      g.add_op(OpId::kAttentionBackward, a, std::vector{dout, dlse, q, k, v, o[0], o[1]}, "attn_backward");
  g.set_outputs({o[0], o[1], grads[0], grads[1], grads[2]});
  return g;
}

std::string describe(const Case& c, DType t) {
  return fmt::format("q {} k {} v {} causal={} {}", c.q, c.k, c.v, c.causal, dtype_name(t));
}

TEST(Decompose, AttentionGraphsKeepTheirValuesWithOnlyOrdinaryOps) {
  for (DType t : {DType::kFloat64, DType::kFloat32, DType::kBfloat16}) {
    const double tol = t == DType::kFloat64 ? 1e-12 : t == DType::kFloat32 ? 2e-6 : 1e-2;
    for (const Case& c : cases()) {
      const std::string what = describe(c, t);
      ir::Graph g = attention_graph(c, t);
      passes::PassContext ctx;
      ctx.options.decompose = {OpId::kAttention, OpId::kAttentionBackward};
      ir::Graph d = passes::run_pass("decompose", g, ctx);
      EXPECT_TRUE(ctx.stats.back().changed) << what;
      EXPECT_EQ(ctx.stats.back().rewritten, 2) << what;
      EXPECT_EQ(count_op(d, OpId::kAttention) + count_op(d, OpId::kAttentionBackward), 0) << what;
      ASSERT_EQ(d.outputs().size(), 5u) << what;
      for (size_t i = 0; i < 5; ++i) EXPECT_EQ(d.type(d.outputs()[i]), g.type(g.outputs()[i])) << what << " " << i;
      const TensorType o = g.type(g.outputs()[0]), l = g.type(g.outputs()[1]);
      testing::Bindings in{{"q", values(c.q, 1, t)},      {"k", values(c.k, 2, t)}, {"v", values(c.v, 3, t)},
                           {"dout", values(o.shape, 4, t)}, {"dlse", values(l.shape, 5, l.dtype)}};
      std::vector<NDArray> want = testing::eval_graph(g, in), got = testing::eval_graph(d, in);
      const char* names[] = {"out", "lse", "dq", "dk", "dv"};
      for (size_t i = 0; i < 5; ++i) {
        if (i == 1 && c.k[c.k.ndim() - 2] == 0) {  // -inf rows compare by value
          EXPECT_EQ(got[i].to_vector<double>(), want[i].to_vector<double>()) << what << ": lse";
          continue;
        }
        test::expect_close(got[i], want[i], tol, what + ": " + names[i]);
      }
    }
  }
}

TEST(Decompose, OnlyTheListedOpsAreReplaced) {
  const Case c = cases()[1];
  ir::Graph g = attention_graph(c, DType::kFloat32);
  passes::PassContext ctx;
  ctx.options.decompose = {OpId::kAttentionBackward};
  ir::Graph d = passes::run_pass("decompose", g, ctx);
  EXPECT_EQ(count_op(d, OpId::kAttention), 1);
  EXPECT_EQ(count_op(d, OpId::kAttentionBackward), 0);
  EXPECT_TRUE(d.find("attn_backward/batch_dot").has_value()) << d.to_text();

  passes::PassContext none;
  ir::Graph same = passes::run_pass("decompose", g, none);
  EXPECT_FALSE(none.stats.back().changed);
  EXPECT_EQ(same.to_text(), g.to_text());
}

TEST(Decompose, TheTableListsTheFusedAttentionOps) {
  EXPECT_NE(decomposition(OpId::kAttention), nullptr);
  EXPECT_NE(decomposition(OpId::kAttentionBackward), nullptr);
  EXPECT_EQ(decomposition(OpId::kFullyConnected), nullptr);
}

// ---- the fused op run as its decomposition (KILN_DECOMPOSE)

bool forced() { return decomposition_forced(OpId::kAttention) && decomposition_forced(OpId::kAttentionBackward); }

#define SKIP_UNLESS_FORCED()                                                                               \
  if (!forced()) GTEST_SKIP() << "runs under KILN_DECOMPOSE=_kiln_attention,_backward_kiln_attention " \
                                 "(ctest decompose_test_forced)"

using test::AttentionGrads;
using test::expect_same;

template <typename F>
AttentionGrads run(F&& attention, const Case& c, DType t) {
  return test::attention_grads(
      [&](const NDArray& q, const NDArray& k, const NDArray& v) { return attention(q, k, v, c.causal); },
      values(c.q, 1, t), values(c.k, 2, t), values(c.v, 3, t), [&](const Shape& s) { return values(s, 4, t); });
}

NDArray fused_call(const NDArray& q, const NDArray& k, const NDArray& v, bool causal) {
  return invoke(OpId::kAttention, {q, k, v}, OpAttrs::make(AttentionAttrs{.causal = causal}))[0];
}

NDArray reference_call(const NDArray& q, const NDArray& k, const NDArray& v, bool causal) {
  return nd::attention_reference(q, k, v, {.causal = causal});
}

TEST(DecomposeForced, ImperativeCallsAndGradientsEqualTheReference) {
  SKIP_UNLESS_FORCED();
  for (DType t : {DType::kFloat64, DType::kFloat32}) {
    for (size_t i = 0; i + 1 < cases().size(); ++i) {
      const Case& c = cases()[i];
      expect_same(run(fused_call, c, t), run(reference_call, c, t), t == DType::kFloat64 ? 1e-12 : 2e-6,
                  describe(c, t));
    }
  }
}

TEST(DecomposeForced, SecondOrderGoesThroughTheDecomposedBackward) {
  SKIP_UNLESS_FORCED();
  const Case c = cases()[1];
  auto penalty = [&](auto&& attention) {
    NDArray q = values(c.q, 1, DType::kFloat64), k = values(c.k, 2, DType::kFloat64);
    NDArray v = values(c.v, 3, DType::kFloat64);
    for (NDArray* x : {&q, &k, &v}) x->attach_grad();
    NDArray h;
    {
      autograd::Record record;
      NDArray y = nd::sum(nd::square(attention(q, k, v, c.causal)));
      std::vector<NDArray> heads{y}, vars{q, k, v};
      std::vector<NDArray> g = autograd::grad(heads, vars, {}, false, true);
      h = nd::sum(nd::square(g[0])) + nd::sum(nd::square(g[1])) + nd::sum(nd::square(g[2]));
    }
    autograd::backward({h});
    return std::vector<NDArray>{q.grad().copy(), k.grad().copy(), v.grad().copy()};
  };
  std::vector<NDArray> want = penalty(reference_call), got = penalty(fused_call);
  for (size_t i = 0; i < 3; ++i) test::expect_close(got[i], want[i], 1e-10, fmt::format("input {}", i));
}

struct AttentionBlock : nn::HybridBlock {
  bool causal = false;
  std::vector<NDArray> forward(std::span<const NDArray> x) override {
    return {nd::scaled_dot_product_attention(x[0], x[1], x[2], {.causal = causal})};
  }
};

TEST(DecomposeForced, HybridizedGraphsHoldNoFusedAttentionAndTrain) {
  SKIP_UNLESS_FORCED();
  for (bool causal : {false, true}) {
    const Case c{{2, 2, 13, 8}, {2, 2, 13, 8}, {2, 2, 13, 8}, causal};
    AttentionBlock block;
    block.causal = causal;
    auto call = [&](const NDArray& q, const NDArray& k, const NDArray& v, bool) {
      std::vector<NDArray> in{q, k, v};
      return block(std::span<const NDArray>(in))[0];
    };
    block.hybridize();
    AttentionGrads want = run(reference_call, c, DType::kFloat32);
    expect_same(run(call, c, DType::kFloat32), want, 2e-6, "hybridized training");
    NDArray q = values(c.q, 1, DType::kFloat32), k = values(c.k, 2, DType::kFloat32);
    NDArray v = values(c.v, 3, DType::kFloat32);
    std::vector<NDArray> in{q, k, v};
    test::expect_close(block(std::span<const NDArray>(in))[0], want.out, 2e-6, "hybridized inference");
    ASSERT_NE(block.cached_op(), nullptr);
    auto graph = block.cached_op()->last_graph();
    ASSERT_NE(graph, nullptr);
    EXPECT_EQ(count_op(graph->graph, OpId::kAttention), 0) << graph->graph.to_text();
    EXPECT_CONTAINS(block.cached_op()->pass_report(), "decompose");
  }
}

}  // namespace
}  // namespace kiln
