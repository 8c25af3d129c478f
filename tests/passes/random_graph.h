// Random graphs for pass tests: elementwise unary, binary and broadcast ops,
// FullyConnected, Reshape, transpose, sum and SliceChannel (several
// outputs) over float64 values, with
// repeated subexpressions (for CSE) and unused nodes (for DCE). Deterministic
// for a seed.
//
//   ir::Graph g = random_graph(7);   // seed 7
#pragma once

#include <random>
#include <vector>

#include "ir/graph.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/init.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"
#include "ir/ops/reduce.h"

namespace kiln::testing {

// With `identities`, also inserts patterns simplify-algebra removes (x * 1,
// x + 0, double negation, double transpose, double Reshape, x + zeros,
// x * ones, add_n with zeros).
inline ir::Graph random_graph(uint32_t seed, int num_ops = 24, bool identities = false) {
  std::mt19937 gen(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(gen() % n); };
  const DType f64 = DType::kFloat64;
  const int64_t batch = 2 + static_cast<int64_t>(pick(2));
  ir::Graph g;
  std::vector<ir::Entry> pool;
  pool.push_back(g.add_input("x", {Shape{batch, 3}, f64}));
  pool.push_back(g.add_input("y", {Shape{batch, 3}, f64}));
  int params = 0;
  auto param = [&](Shape s) { return g.add_param(fmt::format("p{}", params++), {s, f64}); };
  struct Call {
    OpId op;
    OpAttrs attrs;
    std::vector<ir::Entry> inputs;
  };
  std::vector<Call> calls;
  auto apply = [&](OpId op, OpAttrs attrs, std::vector<ir::Entry> in) {
    auto out = g.add_op(op, attrs, in);
    calls.push_back({op, attrs, in});
    for (auto e : out) pool.push_back(e);
  };
  const OpId unary[] = {OpId::kTanh, OpId::kSigmoid, OpId::kRelu, OpId::kNegative, OpId::kAbs, OpId::kSquare};
  const OpId binary[] = {OpId::kElemwiseAdd, OpId::kElemwiseSub, OpId::kElemwiseMul};
  const OpId broadcast[] = {OpId::kBroadcastAdd, OpId::kBroadcastMul, OpId::kBroadcastSub};
  for (int step = 0; step < num_ops; ++step) {
    // Prefer recent values so the graph is deep rather than wide.
    size_t recent = std::min<size_t>(pool.size(), 4);
    ir::Entry a = pick(3) ? pool[pool.size() - 1 - pick(recent)] : pool[pick(pool.size())];
    const Shape& sa = g.type(a).shape;
    if (!calls.empty() && pick(7) == 0) {  // repeat an earlier call: a common subexpression
      const Call& c = calls[pick(calls.size())];
      apply(c.op, c.attrs, c.inputs);
      continue;
    }
    switch (pick(identities ? 10 : 8)) {
      case 0:
      case 1:
        apply(unary[pick(6)], {}, {a});
        break;
      case 2: {
        std::vector<ir::Entry> same;
        for (auto e : pool)
          if (g.type(e).shape == sa) same.push_back(e);
        apply(binary[pick(3)], {}, {a, same[pick(same.size())]});
        break;
      }
      case 3: {
        Shape s = sa.ndim() == 2 && pick(2) ? Shape{1, sa[1]} : Shape{sa[sa.ndim() - 1]};
        apply(broadcast[pick(3)], {}, {a, param(s)});
        break;
      }
      case 4: {
        if (sa.ndim() != 2) {
          apply(OpId::kMulScalar, OpAttrs::make(ScalarAttrs{.scalar = 0.5}), {a});
          break;
        }
        int64_t hidden = 2 + static_cast<int64_t>(pick(3));
        bool no_bias = pick(2);
        std::vector<ir::Entry> in{a, param(Shape{hidden, sa[1]})};
        if (!no_bias) in.push_back(param(Shape{hidden}));
        apply(OpId::kFullyConnected, OpAttrs::make(FullyConnectedAttrs{.num_hidden = hidden, .no_bias = no_bias}), in);
        break;
      }
      case 5: {
        if (sa.ndim() == 2 && pick(2)) {
          apply(OpId::kTranspose, OpAttrs::make(TransposeAttrs{}), {a});
        } else {
          ReshapeAttrs r;
          r.shape = sa.ndim() == 2 ? IntTuple{-1} : IntTuple{batch, -1};
          if (sa.ndim() != 2 && sa.size() % batch != 0) r.shape = IntTuple{1, -1};
          apply(OpId::kReshape, OpAttrs::make(r), {a});
        }
        break;
      }
      case 6: {
        if (sa.ndim() == 2 && sa[1] % 3 == 0 && pick(2)) {  // three outputs, some maybe unused
          SplitAttrs split;
          split.num_outputs = 3;
          split.axis = 1;
          apply(OpId::kSplit, OpAttrs::make(split), {a});
        } else if (sa.ndim() == 2) {
          apply(OpId::kSum, OpAttrs::make(ReduceAttrs{.axis = IntTuple{1}, .keepdims = true}), {a});
        } else {
          apply(OpId::kPlusScalar, OpAttrs::make(ScalarAttrs{.scalar = 1}), {a});
        }
        break;
      }
      case 7:
        apply(OpId::kMulScalar, OpAttrs::make(ScalarAttrs{.scalar = 0.5}), {a});
        break;
      default: {
        InitAttrs init;
        init.shape = sa;
        init.dtype = f64;
        switch (pick(8)) {
          case 0:
            apply(OpId::kMulScalar, OpAttrs::make(ScalarAttrs{.scalar = 1}), {a});
            break;
          case 1:
            apply(OpId::kPlusScalar, OpAttrs::make(ScalarAttrs{.scalar = 0}), {a});
            break;
          case 2:
            apply(OpId::kNegative, {}, {a});
            apply(OpId::kNegative, {}, {pool.back()});
            break;
          case 3:
            apply(OpId::kTranspose, OpAttrs::make(TransposeAttrs{}), {a});
            apply(OpId::kTranspose, OpAttrs::make(TransposeAttrs{}), {pool.back()});
            break;
          case 4: {
            ReshapeAttrs flat;
            flat.shape = IntTuple{-1};
            apply(OpId::kReshape, OpAttrs::make(flat), {a});
            ReshapeAttrs back;
            back.shape = sa.to_vector();
            apply(OpId::kReshape, OpAttrs::make(back), {pool.back()});
            break;
          }
          case 5: {
            auto z = g.add_op(OpId::kZeros, OpAttrs::make(init), {})[0];
            apply(pick(2) ? OpId::kElemwiseAdd : OpId::kBroadcastAdd, {},
                  pick(2) ? std::vector{a, z} : std::vector{z, a});
            break;
          }
          case 6: {
            auto one = g.add_op(OpId::kOnes, OpAttrs::make(init), {})[0];
            apply(pick(2) ? OpId::kElemwiseMul : OpId::kBroadcastMul, {}, std::vector{a, one});
            break;
          }
          default: {
            auto z = g.add_op(OpId::kZeros, OpAttrs::make(init), {})[0];
            apply(OpId::kAddN, OpAttrs::make(AddNAttrs{.num_args = 3}), {a, z, a});
            break;
          }
        }
        break;
      }
    }
  }
  std::vector<ir::Entry> outs{pool.back()};
  if (pick(2)) outs.push_back(pool[2 + pick(pool.size() - 2)]);
  g.set_outputs(outs);
  return g;
}

}  // namespace kiln::testing
