// The fused elementwise kernel (backends/cpu/fused.h): for every fusible op,
// the unfused kernels, the interpreter and the LLVM JIT (when built) agree on
// random data, at odd sizes, with broadcast inputs and several outputs.
//
// Tolerances: interpreter vs unfused: 1e-6 relative and absolute. The
// formulas are the same, but GCC contracts some multiply-adds of the unfused
// kernels into FMAs (1 - y*y in tanh's gradient) and vectorizes their powf
// calls through libmvec (1 ulp); softrelu's log1p goes through log (2 ulp).
// JIT vs interpreter: 1e-6 relative + 1e-7 absolute (the same polynomials,
// contracted differently).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/cpu/fused.h"
#include "backends/cpu/jit/fused_jit.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/fused.h"
#include "ir/ops/nn.h"
#include "passes/pass.h"
#include "tests/passes/eval_graph.h"

namespace kiln {
namespace {

struct Case {
  std::string name;
  OpId op;
  OpAttrs attrs;
  int arity;
  double lo = -4, hi = 4;  // input range
};

std::vector<Case> all_cases() {
  auto scalar = [](double v) { return OpAttrs::make(ScalarAttrs{.scalar = v}); };
  auto act = [](ActType t) { return OpAttrs::make(ActivationAttrs{.act_type = t}); };
  std::vector<Case> c = {
      {"add", OpId::kElemwiseAdd, {}, 2},
      {"sub", OpId::kElemwiseSub, {}, 2},
      {"mul", OpId::kElemwiseMul, {}, 2},
      {"div", OpId::kElemwiseDiv, {}, 2},
      {"bpow", OpId::kBroadcastPower, {}, 2, 0.1, 3},
      {"bmax", OpId::kBroadcastMaximum, {}, 2},
      {"bmin", OpId::kBroadcastMinimum, {}, 2},
      {"beq", OpId::kBroadcastEqual, {}, 2, -1, 1},
      {"bne", OpId::kBroadcastNotEqual, {}, 2, -1, 1},
      {"bgt", OpId::kBroadcastGreater, {}, 2},
      {"bge", OpId::kBroadcastGreaterEqual, {}, 2},
      {"blt", OpId::kBroadcastLesser, {}, 2},
      {"ble", OpId::kBroadcastLesserEqual, {}, 2},
      {"plus_scalar", OpId::kPlusScalar, scalar(1.5), 1},
      {"minus_scalar", OpId::kMinusScalar, scalar(0.25), 1},
      {"rminus_scalar", OpId::kRMinusScalar, scalar(3), 1},
      {"mul_scalar", OpId::kMulScalar, scalar(-0.7), 1},
      {"div_scalar", OpId::kDivScalar, scalar(3), 1},
      {"rdiv_scalar", OpId::kRDivScalar, scalar(2), 1},
      {"power_scalar", OpId::kPowerScalar, scalar(2), 1},
      {"power_scalar_frac", OpId::kPowerScalar, scalar(1.5), 1, 0, 4},
      {"rpower_scalar", OpId::kRPowerScalar, scalar(1.3), 1},
      {"maximum_scalar", OpId::kMaximumScalar, scalar(0.5), 1},
      {"minimum_scalar", OpId::kMinimumScalar, scalar(0.5), 1},
      {"equal_scalar", OpId::kEqualScalar, scalar(0), 1, -1, 1},
      {"not_equal_scalar", OpId::kNotEqualScalar, scalar(0), 1, -1, 1},
      {"greater_scalar", OpId::kGreaterScalar, scalar(0.1), 1},
      {"greater_equal_scalar", OpId::kGreaterEqualScalar, scalar(0.1), 1},
      {"lesser_scalar", OpId::kLesserScalar, scalar(0.1), 1},
      {"lesser_equal_scalar", OpId::kLesserEqualScalar, scalar(0.1), 1},
      {"exp", OpId::kExp, {}, 1, -30, 30},
      {"log", OpId::kLog, {}, 1, 1e-6, 100},
      {"sqrt", OpId::kSqrt, {}, 1, 0, 100},
      {"square", OpId::kSquare, {}, 1},
      {"tanh", OpId::kTanh, {}, 1, -6, 6},
      {"sigmoid", OpId::kSigmoid, {}, 1, -20, 20},
      {"relu", OpId::kRelu, {}, 1},
      {"abs", OpId::kAbs, {}, 1},
      {"negative", OpId::kNegative, {}, 1},
      {"clip", OpId::kClip, OpAttrs::make(ClipAttrs{.a_min = -1, .a_max = 2}), 1},
      {"where", OpId::kWhere, {}, 3, -1, 1},
      {"act_relu", OpId::kActivation, act(ActType::kRelu), 1},
      {"act_sigmoid", OpId::kActivation, act(ActType::kSigmoid), 1},
      {"act_tanh", OpId::kActivation, act(ActType::kTanh), 1},
      {"act_softrelu", OpId::kActivation, act(ActType::kSoftrelu), 1, -30, 30},
      {"act_softsign", OpId::kActivation, act(ActType::kSoftsign), 1},
      {"act_backward_relu", OpId::kActivationBackward, act(ActType::kRelu), 2},
      {"act_backward_sigmoid", OpId::kActivationBackward, act(ActType::kSigmoid), 2, 0, 1},
      {"act_backward_tanh", OpId::kActivationBackward, act(ActType::kTanh), 2, -1, 1},
      {"act_backward_softsign", OpId::kActivationBackward, act(ActType::kSoftsign), 2, -1, 1},
      {"add_n", OpId::kAddN, OpAttrs::make(AddNAttrs{.num_args = 3}), 3},
      {"leaky", OpId::kLeakyReLU, OpAttrs::make(LeakyReLUAttrs{.act_type = LeakyType::kLeaky, .slope = 0.1}), 1},
  };
  return c;
}

std::vector<float> random_floats(int64_t n, double lo, double hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(dist(gen));
  // Sprinkle exact zeros and repeats so that comparisons and relu meet ties.
  for (size_t i = 0; i < v.size(); i += 13) v[i] = 0;
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;  // infinities included
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << " element " << i;
      continue;
    }
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << what << " element " << i;
  }
}

// The graph's one fused node, after fuse-elementwise.
const ir::Node& fused_node(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes())
    if (n.is_op() && n.op == OpId::kFusedElemwise) return n;
  throw InternalError("no fused node");
}

// Runs the fused node of `after` through fused_run with `loop` (nullptr: the
// interpreter) on the bound inputs; returns its outputs.
std::vector<std::vector<float>> run_fused(const ir::Graph& after, const testing::Bindings& bound, cpu::FusedLoopFn loop,
                                          int threads) {
  const ir::Node& n = fused_node(after);
  std::vector<std::vector<float>> in, out(n.types.size());
  std::vector<Shape> shapes;
  std::vector<void*> bufs;
  for (const ir::Entry& e : n.inputs) {
    in.push_back(bound.at(after.node(e.node).name).to_vector<float>());
    shapes.push_back(after.type(e).shape);
  }
  for (auto& v : in) bufs.push_back(v.data());
  for (auto& v : out) {
    v.assign(static_cast<size_t>(n.types[0].shape.size()), -12345.0f);
    bufs.push_back(v.data());
  }
  cpu::fused_run(n.attrs.as<FusedElemwiseAttrs>().program, loop, bufs.data(), shapes.data(), n.types[0].shape, threads);
  return out;
}

// Checks unfused == interpreter == JIT for graph `g` (outputs must all be
// outputs of its one fused group).
void check_graph(const ir::Graph& g, const testing::Bindings& bound, double rtol, const std::string& what) {
  passes::PassContext ctx(passes::PassOptions{});
  ir::Graph after = passes::run_pass("fuse-elementwise", g, ctx);
  ASSERT_EQ(after.num_ops(), 1) << what << "\n" << after.to_text();
  const ir::Node& n = fused_node(after);
  std::vector<std::vector<float>> want;
  for (const NDArray& a : testing::eval_graph(g, bound)) want.push_back(a.to_vector<float>());
  // The fused node's outputs in graph-output order.
  std::vector<size_t> order;
  for (const ir::Entry& e : after.outputs()) order.push_back(static_cast<size_t>(e.index));
  for (int threads : {1, 4}) {
    auto interp = run_fused(after, bound, nullptr, threads);
    for (size_t i = 0; i < want.size(); ++i)
      expect_close(interp[order[i]], want[i], rtol, rtol, what + " interpreter, output " + std::to_string(i));
    if (!cpu::jit::available()) continue;
    std::string error;
    cpu::FusedLoopFn fn = cpu::jit::compile_fused(n.attrs.as<FusedElemwiseAttrs>().program.program(),
                                                  n.attrs.as<FusedElemwiseAttrs>().program.text(), &error);
    ASSERT_NE(fn, nullptr) << what << ": " << error;
    auto jit = run_fused(after, bound, fn, threads);
    for (size_t i = 0; i < want.size(); ++i)
      expect_close(jit[order[i]], interp[order[i]], 1e-6, 1e-7, what + " JIT, output " + std::to_string(i));
  }
}

TEST(FusedKernel, EveryFusibleOpAgreesWithItsKernel) {
  for (const Case& c : all_cases()) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
      ir::Graph g;
      std::vector<ir::Entry> in;
      testing::Bindings bound;
      for (int k = 0; k < c.arity; ++k) {
        std::string name = fmt::format("x{}", k);
        in.push_back(g.add_input(name, {Shape{n}, DType::kFloat32}));
        auto v = random_floats(n, c.lo, c.hi, static_cast<uint32_t>(n * 7 + k));
        bound[name] = nd::array(v, Shape{n});
      }
      // A second op so that the group has two nodes: + 0 changes nothing (but -0).
      ir::Entry y = g.add_op(c.op, c.attrs, in, "op")[0];
      ir::Entry z = g.add_op(OpId::kPlusScalar, OpAttrs::make(ScalarAttrs{.scalar = 0}), {&y, 1}, "z")[0];
      g.set_outputs({z});
      check_graph(g, bound, 1e-6, fmt::format("{} n={}", c.name, n));
    }
  }
}

TEST(FusedKernel, BroadcastInputsAndSeveralOutputs) {
  // out (2,3,5,7): a channel bias (1,3,1,1), a row (7), a single element, and
  // a channel input along axis 0 (2,1,1,1); three outputs.
  for (Shape shape : {Shape{2, 3, 5, 7}, Shape{1, 3, 1, 1}, Shape{64, 3, 33, 17}}) {
    ir::Graph g;
    testing::Bindings bound;
    auto input = [&](const char* name, Shape s) {
      bound[name] = nd::array(random_floats(s.size(), -2, 2, static_cast<uint32_t>(s.size())), s);
      return g.add_input(name, {s, DType::kFloat32});
    };
    ir::Entry x = input("x", shape);
    ir::Entry bias = input("bias", Shape{1, shape[1], 1, 1});
    ir::Entry row = input("row", Shape{shape[3]});
    ir::Entry s = input("s", Shape{1});
    ir::Entry batch = input("batch", Shape{shape[0], 1, 1, 1});
    auto op = [&](OpId id, std::vector<ir::Entry> args, OpAttrs attrs = {}) { return g.add_op(id, attrs, args)[0]; };
    ir::Entry a = op(OpId::kBroadcastAdd, {x, bias});
    ir::Entry b = op(OpId::kBroadcastMul, {a, row});
    ir::Entry c = op(OpId::kBroadcastSub, {b, s});
    ir::Entry d = op(OpId::kTanh, {c});
    ir::Entry e = op(OpId::kBroadcastDiv,
                     {batch, op(OpId::kPlusScalar, {op(OpId::kAbs, {d})}, OpAttrs::make(ScalarAttrs{.scalar = 1}))});
    ir::Entry f = op(OpId::kSigmoid, {e});
    g.set_outputs({f, a, d});
    check_graph(g, bound, 1e-6, fmt::format("broadcast {}", shape));
  }
}

// In-place (passes::inplace_pairs): outputs written over full inputs give
// what separate buffers give, with the interpreter and the JIT, on one and
// several threads, with broadcast inputs (runs) and over several chunks.
TEST(FusedKernel, OutputsOverTheirInputsAgreeWithSeparateBuffers) {
  // %0, %1 full; %2 channel (1,C,1,1). Output 0 over %0, output 1 over %1.
  FusedProgramRef ref = FusedProgramRef::make(
      FusedProgram::parse("in=f,f,c;%3=add(%0,%2);%4=mul(%3,%1);%5=relu(%4);%6=sub(%1,%0);out=%5,%6"));
  for (Shape shape : {Shape{2, 3, 5, 7}, Shape{4, 3, 61, 53}}) {
    const int64_t n = shape.size();
    auto x = random_floats(n, -2, 2, 1), y = random_floats(n, -2, 2, 2), c = random_floats(shape[1], -2, 2, 3);
    Shape shapes[] = {shape, shape, Shape{1, shape[1], 1, 1}};
    std::vector<cpu::FusedLoopFn> loops{nullptr};
    if (cpu::jit::available()) {
      std::string error;
      loops.push_back(cpu::jit::compile_fused(ref.program(), ref.text(), &error));
      ASSERT_NE(loops.back(), nullptr) << error;
    }
    for (cpu::FusedLoopFn loop : loops) {
      for (int threads : {1, 4}) {
        std::vector<float> o0(static_cast<size_t>(n)), o1(static_cast<size_t>(n));
        std::vector<float> xs = x, ys = y;
        void* separate[] = {xs.data(), ys.data(), c.data(), o0.data(), o1.data()};
        cpu::fused_run(ref, loop, separate, shapes, shape, threads);
        std::vector<float> xi = x, yi = y;
        void* inplace[] = {xi.data(), yi.data(), c.data(), xi.data(), yi.data()};
        cpu::fused_run(ref, loop, inplace, shapes, shape, threads);
        std::string what = fmt::format("{} {} threads {}", shape, loop ? "JIT" : "interpreter", threads);
        ASSERT_EQ(xi, o0) << what;
        ASSERT_EQ(yi, o1) << what;
        ASSERT_EQ(xs, x) << what << ": separate outputs must leave the inputs alone";
      }
    }
  }
}

// float16/bfloat16 buffers: the loop runs on float32 chunks, so a 16-bit run
// gives the float32 run's results rounded once, in-place or not, with
// broadcast inputs, on one and several threads.
TEST(FusedKernel, SixteenBitBuffersGiveTheFloat32ResultRoundedOnce) {
  FusedProgramRef ref = FusedProgramRef::make(
      FusedProgram::parse("in=f,f,c,s;%4=add(%0,%2);%5=mul(%4,%1);%6=tanh(%5);%7=sub(%1,%3);out=%6,%7"));
  const Shape shape{4, 3, 61, 53};
  const int64_t n = shape.size();
  Shape shapes[] = {shape, shape, Shape{1, shape[1], 1, 1}, Shape{1}};
  for (DType t : {DType::kBfloat16, DType::kFloat16}) {
    // Inputs exactly representable in t, so float32 sees the same values.
    auto rounded = [&](std::vector<float> v) {
      Shape s{static_cast<int64_t>(v.size())};
      return nd::array<float>(v, s).astype(t).astype(DType::kFloat32).to_vector<float>();
    };
    auto x = rounded(random_floats(n, -2, 2, 1)), y = rounded(random_floats(n, -2, 2, 2));
    auto c = rounded(random_floats(shape[1], -2, 2, 3)), s = rounded({0.75f});
    std::vector<float> w0(static_cast<size_t>(n)), w1(static_cast<size_t>(n));
    std::vector<float> xf = x, yf = y;
    void* wide[] = {xf.data(), yf.data(), c.data(), s.data(), w0.data(), w1.data()};
    cpu::fused_run(ref, nullptr, wide, shapes, shape, 1);
    const std::vector<float> want0 = rounded(w0), want1 = rounded(w1);
    auto narrow = [&](const std::vector<float>& v) {
      return nd::array<float>(v, Shape{static_cast<int64_t>(v.size())}).astype(t);
    };
    std::vector<cpu::FusedLoopFn> loops{nullptr};
    if (cpu::jit::available()) {
      std::string error;
      loops.push_back(cpu::jit::compile_fused(ref.program(), ref.text(), &error));
      ASSERT_NE(loops.back(), nullptr) << error;
    }
    for (cpu::FusedLoopFn loop : loops) {
      for (int threads : {1, 4}) {
        for (bool inplace : {false, true}) {
          NDArray xs = narrow(x), ys = narrow(y), cs = narrow(c), ss = narrow(s), o0 = narrow(w0), o1 = narrow(w1);
          for (NDArray* a : {&xs, &ys, &cs, &ss, &o0, &o1}) a->wait_to_write();
          void* out0 = inplace ? xs.data() : o0.data();
          void* out1 = inplace ? ys.data() : o1.data();
          void* bufs[] = {xs.data(), ys.data(), cs.data(), ss.data(), out0, out1};
          cpu::fused_run(ref, loop, bufs, shapes, shape, threads, t);
          std::string what = fmt::format("{} {} threads {} {}", dtype_name(t), loop ? "JIT" : "interpreter", threads,
                                         inplace ? "in-place" : "separate");
          const NDArray& r0 = inplace ? xs : o0;
          const NDArray& r1 = inplace ? ys : o1;
          ASSERT_EQ(r0.astype(DType::kFloat32).to_vector<float>(), want0) << what;
          ASSERT_EQ(r1.astype(DType::kFloat32).to_vector<float>(), want1) << what;
        }
      }
    }
  }
}

TEST(FusedKernel, JitCompilesOncePerProgram) {
  if (!cpu::jit::available()) GTEST_SKIP() << "built without LLVM";
  FusedProgram p = FusedProgram::parse("in=f;%1=exp(%0);%2=mul(%1,3);out=%2");
  std::string error;
  auto f1 = cpu::jit::compile_fused(p, p.to_string(), &error);
  auto f2 = cpu::jit::compile_fused(p, p.to_string(), &error);
  EXPECT_NE(f1, nullptr) << error;
  EXPECT_EQ(f1, f2);
}

}  // namespace
}  // namespace kiln
