// fuse-elementwise: Before/After graphs for what fuses and what must not, the
// program text form, and random graphs that compute the same outputs before
// and after.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "ir/ops/fused.h"
#include "frontend/formats/mxnet/symbol_json.h"
#include "passes/fuse_elementwise.h"
#include "tests/passes/eval_graph.h"
#include "tests/passes/random_graph.h"

namespace kiln::passes {
namespace {

std::string fuse(const char* text, int64_t* fused = nullptr) {
  PassContext ctx(PassOptions{});
  std::string out = run_pass("fuse-elementwise", ir::parse_graph(text), ctx).to_text();
  if (fused) *fused = ctx.stats.back().fused;
  return out;
}

TEST(FusedProgram, TextRoundTrips) {
  const char* text = "in=f,s,c,r;%4=mul(%0,%1);%5=add(%4,-0.5);%6=where(%2,%5,%3);%7=exp(%6);out=%7,%4";
  FusedProgram p = FusedProgram::parse(text);
  EXPECT_EQ(p.to_string(), text);
  EXPECT_EQ(p.inputs.size(), 4u);
  EXPECT_EQ(p.instrs.size(), 4u);
  EXPECT_EQ(p.instrs[1].args[1].literal, -0.5f);
  EXPECT_EQ(FusedProgram::parse(p.to_string()), p);
}

TEST(FusedProgram, BadProgramsSayWhatIsWrong) {
  auto error = [](const char* text) {
    try {
      FusedProgram::parse(text);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("in=f;%2=exp(%0);out=%2").find("expected %1"), std::string::npos);
  EXPECT_NE(error("in=f;%1=frob(%0);out=%1").find("unknown instruction 'frob'"), std::string::npos);
  EXPECT_NE(error("in=f;%1=add(%0);out=%1").find("expected ','"), std::string::npos);
  EXPECT_NE(error("in=f;%1=exp(%2);out=%1").find("not defined before"), std::string::npos);
  EXPECT_NE(error("in=s;%1=exp(%0);out=%1").find("no full input"), std::string::npos);
  EXPECT_NE(error("in=f;%1=exp(%0);out=%1,%1").find("output twice"), std::string::npos);
}

TEST(FuseElementwise, ChainBecomesOneNode) {
  const char* before = R"IR(graph {
  %x = input f32[4,5]
  %a = exp(%x) : f32[4,5]
  %b = _mul_scalar(%a) {scalar="2"} : f32[4,5]
  %c = Activation(%b) {act_type="relu"} : f32[4,5]
  %d = _rminus_scalar(%c) {scalar="1"} : f32[4,5]
  return %d
}
)IR";
  const char* after = R"IR(graph {
  %x = input f32[4,5]
  %fused/d = _kiln_fused_elemwise(%x) {program="in=f;%1=exp(%0);%2=mul(%1,2);%3=relu(%2);%4=sub(1,%3);out=%4"} : f32[4,5]
  return %fused/d
}
)IR";
  int64_t fused = 0;
  EXPECT_EQ(fuse(before, &fused), after);
  EXPECT_EQ(fused, 4);
  // The fused graph's text parses back to the same graph.
  EXPECT_EQ(ir::parse_graph(after).to_text(), after);
}

TEST(FuseElementwise, ConstantsSlotsAreNotNodes) {
  // A const node's one input entry holds its slot in the constant table
  // ({-1, slot}), not a node: the pass must not follow it (it read its
  // per-node tables at index -1; AddressSanitizer reports that).
  const char* before = R"IR(graph {
  %x = input f32[4,5]
  %a = exp(%x) : f32[4,5]
  %c = const f32[4,5] slot=0
  %b = elemwise_add(%a, %c) : f32[4,5]
  return %b
}
)IR";
  int64_t fused = 0;
  const std::string after = fuse(before, &fused);
  EXPECT_EQ(fused, 2);
  EXPECT_NE(after.find("%c = const f32[4,5] slot=0"), std::string::npos) << after;
}

TEST(FuseElementwise, ValuesReadOutsideStayOutputs) {
  // %a is read by FullyConnected and %b is a graph output: both stay outputs.
  const char* before = R"IR(graph {
  %x = input f32[2,3]
  %w = param f32[3,3]
  %a = tanh(%x) : f32[2,3]
  %b = sigmoid(%a) : f32[2,3]
  %c = elemwise_mul(%a, %b) : f32[2,3]
  %fc = FullyConnected(%a, %w) {no_bias="True", num_hidden="3"} : f32[2,3]
  return %c, %b, %fc
}
)IR";
  const char* after = R"IR(graph {
  %x = input f32[2,3]
  %w = param f32[3,3]
  %fused/c = _kiln_fused_elemwise(%x) {program="in=f;%1=tanh(%0);%2=sigmoid(%1);%3=mul(%1,%2);out=%1,%2,%3"} : f32[2,3], f32[2,3], f32[2,3]
  %fc = FullyConnected(%fused/c, %w) {no_bias="True", num_hidden="3"} : f32[2,3]
  return %fused/c#2, %fused/c#1, %fc
}
)IR";
  EXPECT_EQ(fuse(before), after);
}

TEST(FuseElementwise, NoCycleThroughAnOutsideNode) {
  // %b reads the group {%a} through FullyConnected %fc: fusing %a and %b
  // would make the fused node read its own output.
  const char* before = R"IR(graph {
  %x = input f32[2,2]
  %w = param f32[2,2]
  %a = relu(%x) : f32[2,2]
  %fc = FullyConnected(%a, %w) {no_bias="True", num_hidden="2"} : f32[2,2]
  %b = elemwise_add(%a, %fc) : f32[2,2]
  return %b
}
)IR";
  EXPECT_EQ(fuse(before), ir::parse_graph(before).to_text());
}

TEST(FuseElementwise, NoCycleThroughAnotherGroup) {
  // Groups {e, b, c} and {a, d} would each feed the other; d stays apart.
  const char* before = R"IR(graph {
  %x = input f32[3]
  %y = input f32[2,3]
  %a = exp(%x) : f32[3]
  %e = tanh(%y) : f32[2,3]
  %b = broadcast_add(%e, %a) : f32[2,3]
  %c = relu(%e) : f32[2,3]
  %s = sum(%c) {axis="(0,)"} : f32[3]
  %d = elemwise_mul(%a, %s) : f32[3]
  %f = broadcast_mul(%b, %d) : f32[2,3]
  return %f
}
)IR";
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pass("fuse-elementwise", ir::parse_graph(before), ctx);  // verify() checks the order
  ir::verify(out);
  auto bind = testing::random_bindings(ir::parse_graph(before), 3);
  testing::expect_all_close(testing::eval_graph(ir::parse_graph(before), bind), testing::eval_graph(out, bind), 1e-6,
                            1e-6);
}

TEST(FuseElementwise, NoCycleThroughAnEarlierNodeReadingALaterGroup) {
  // {y, m} reads {g} (m = y * g); %t (transpose, not fusible) comes before
  // %g but reads y's group, so w = g + t must not join {g}: that group would
  // then read itself through t and {y, m}.
  const char* before = R"IR(graph {
  %in = input f32[4,4]
  %y = exp(%in) : f32[4,4]
  %t = transpose(%y) : f32[4,4]
  %g = tanh(%in) : f32[4,4]
  %m = elemwise_mul(%y, %g) : f32[4,4]
  %w = elemwise_add(%g, %t) : f32[4,4]
  return %m, %w
}
)IR";
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pass("fuse-elementwise", ir::parse_graph(before), ctx);  // verify() checks the order
  ir::verify(out);
  auto bind = testing::random_bindings(ir::parse_graph(before), 3);
  testing::expect_all_close(testing::eval_graph(ir::parse_graph(before), bind), testing::eval_graph(out, bind), 1e-6,
                            1e-6);
}

TEST(FuseElementwise, BroadcastOperands) {
  // A bias per channel (1,C,1,1), a row (C) and a single element fuse; a
  // (N,1,H,1) operand (two broadcast axes) does not.
  const char* before = R"IR(graph {
  %x = input f32[2,3,4,5]
  %bias = param f32[1,3,1,1]
  %s = param f32[1]
  %row = param f32[5]
  %odd = param f32[2,1,4,1]
  %a = broadcast_add(%x, %bias) : f32[2,3,4,5]
  %b = broadcast_mul(%a, %s) : f32[2,3,4,5]
  %c = broadcast_sub(%b, %row) : f32[2,3,4,5]
  %d = relu(%c) : f32[2,3,4,5]
  %e = broadcast_add(%d, %odd) : f32[2,3,4,5]
  return %e
}
)IR";
  const char* after = R"IR(graph {
  %x = input f32[2,3,4,5]
  %bias = param f32[1,3,1,1]
  %s = param f32[1]
  %row = param f32[5]
  %odd = param f32[2,1,4,1]
  %fused/d = _kiln_fused_elemwise(%x, %bias, %s, %row) {program="in=f,c,s,r;%4=add(%0,%1);%5=mul(%4,%2);%6=sub(%5,%3);%7=relu(%6);out=%7"} : f32[2,3,4,5]
  %e = broadcast_add(%fused/d, %odd) : f32[2,3,4,5]
  return %e
}
)IR";
  EXPECT_EQ(fuse(before), after);
}

TEST(FuseElementwise, LeavesOtherDtypesAndSingleOpsAlone) {
  const char* before = R"IR(graph {
  %x = input f64[4]
  %y = input f32[4]
  %a = exp(%x) : f64[4]
  %b = relu(%a) : f64[4]
  %c = exp(%y) : f32[4]
  return %b, %c
}
)IR";
  int64_t fused = -1;
  EXPECT_EQ(fuse(before, &fused), ir::parse_graph(before).to_text());
  EXPECT_EQ(fused, 0);
}

// 16-bit chains fuse like float32 ones (the node keeps their dtype); a Cast
// between dtypes is not elementwise-fusible and bounds the groups.
TEST(FuseElementwise, Bfloat16ChainsFuseAndCastsBoundThem) {
  const char* before = R"IR(graph {
  %x = input f32[4,5]
  %a = exp(%x) : f32[4,5]
  %b = relu(%a) : f32[4,5]
  %h = Cast(%b) {dtype="bfloat16"} : bf16[4,5]
  %c = _mul_scalar(%h) {scalar="2"} : bf16[4,5]
  %d = sigmoid(%c) : bf16[4,5]
  return %d
}
)IR";
  const char* after = R"IR(graph {
  %x = input f32[4,5]
  %fused/b = _kiln_fused_elemwise(%x) {program="in=f;%1=exp(%0);%2=relu(%1);out=%2"} : f32[4,5]
  %h = Cast(%fused/b) {dtype="bfloat16"} : bf16[4,5]
  %fused/d = _kiln_fused_elemwise(%h) {program="in=f;%1=mul(%0,2);%2=sigmoid(%1);out=%2"} : bf16[4,5]
  return %fused/d
}
)IR";
  int64_t fused = 0;
  EXPECT_EQ(fuse(before, &fused), after);
  EXPECT_EQ(fused, 4);
  EXPECT_EQ(ir::parse_graph(after).to_text(), after);
}

TEST(FuseElementwise, ActivationFormsLeakyClipWhereAndBackward) {
  const char* before = R"IR(graph {
  %x = input f32[8]
  %g = input f32[8]
  %a = LeakyReLU(%x) {slope="0.1"} : f32[8]
  %b = clip(%a) {a_max="1", a_min="-1"} : f32[8]
  %c = _greater_scalar(%b) {scalar="0"} : f32[8]
  %d = where(%c, %b, %x) : f32[8]
  %e = Activation(%d) {act_type="softrelu"} : f32[8]
  %f = _backward_Activation(%g, %e) {act_type="sigmoid"} : f32[8]
  return %f
}
)IR";
  const char* after = R"IR(graph {
  %x = input f32[8]
  %g = input f32[8]
  %fused/f = _kiln_fused_elemwise(%x, %g) {program="in=f,f;%2=gt(%0,0);%3=mul(0.1,%0);%4=where(%2,%0,%3);%5=max(%4,-1);%6=min(%5,1);%7=gt(%6,0);%8=where(%7,%6,%0);%9=softrelu(%8);%10=mul(%1,%9);%11=sub(1,%9);%12=mul(%10,%11);out=%12"} : f32[8]
  return %fused/f
}
)IR";
  EXPECT_EQ(fuse(before), after);
}

TEST(FuseElementwise, FusedNodesAreNotExported) {
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[4]
  %fused = _kiln_fused_elemwise(%x) {program="in=f;%1=exp(%0);%2=relu(%1);out=%2"} : f32[4]
  return %fused
}
)IR");
  try {
    mxnet::to_json(g);
    FAIL() << "to_json accepted a fused node";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("fuse-elementwise"), std::string::npos) << e.what();
  }
}

TEST(FuseElementwise, GradientRefusesFusedNodes) {
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = param f32[4]
  %fused = _kiln_fused_elemwise(%x) {program="in=f;%1=exp(%0);%2=relu(%1);out=%2"} : f32[4]
  %loss = sum(%fused) : f32[]
  return %loss
}
)IR");
  PassContext ctx(PassOptions{});
  try {
    run_pass("gradient", g, ctx);
    FAIL() << "gradient accepted a fused node";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("fused group"), std::string::npos) << e.what();
  }
}

// Random graphs (float64 in random_graph.h) recast to float32 so they fuse.
ir::Graph random_f32_graph(uint32_t seed) {
  std::string text = testing::random_graph(seed, 30).to_text();
  for (size_t at = text.find("f64"); at != std::string::npos; at = text.find("f64", at)) text.replace(at, 3, "f32");
  return ir::parse_graph(text);
}

TEST(FuseElementwise, RandomGraphsComputeTheSameOutputs) {
  int64_t fused = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    ir::Graph g = random_f32_graph(seed);
    PassContext ctx(PassOptions{});
    ir::Graph out = run_pass("fuse-elementwise", g, ctx);
    fused += ctx.stats.back().fused;
    EXPECT_LE(out.num_ops(), g.num_ops());
    auto bind = testing::random_bindings(g, seed);
    testing::expect_all_close(testing::eval_graph(g, bind), testing::eval_graph(out, bind), 1e-5, 1e-5,
                              fmt::format("seed {}", seed));
  }
  EXPECT_GT(fused, 40);
}

// The random graphs in float16 and bfloat16: a fused group rounds once per
// output where the unfused ops round after each op, so the two agree to a
// few 16-bit roundings relative to the output's magnitude.
TEST(FuseElementwise, RandomGraphsIn16BitComputeTheSameOutputs) {
  for (const char* dtype : {"bf16", "f16"}) {
    int64_t fused = 0;
    const double eps = std::string(dtype) == "bf16" ? 1.0 / 128 : 1.0 / 1024;
    for (uint32_t seed = 1; seed <= 40; ++seed) {
      std::string text = testing::random_graph(seed, 30).to_text();
      for (size_t at = text.find("f64"); at != std::string::npos; at = text.find("f64", at)) text.replace(at, 3, dtype);
      ir::Graph g = ir::parse_graph(text);
      PassContext ctx(PassOptions{});
      ir::Graph out = run_pass("fuse-elementwise", g, ctx);
      fused += ctx.stats.back().fused;
      auto bind = testing::random_bindings(g, seed);
      std::vector<NDArray> want = testing::eval_graph(g, bind), got = testing::eval_graph(out, bind);
      ASSERT_EQ(want.size(), got.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].dtype(), want[i].dtype());
        std::vector<double> x = got[i].astype(DType::kFloat64).to_vector<double>();
        std::vector<double> y = want[i].astype(DType::kFloat64).to_vector<double>();
        double scale = 0;
        for (double v : y) scale = std::isfinite(v) ? std::max(scale, std::fabs(v)) : scale;
        for (size_t k = 0; k < x.size(); ++k) {
          if (!std::isfinite(y[k])) continue;  // an overflow the unfused chain rounded into
          ASSERT_NEAR(x[k], y[k], 4 * eps * (std::fabs(y[k]) + scale) + 1e-6)
              << dtype << " seed " << seed << " output " << i << " element " << k;
        }
      }
    }
    EXPECT_GT(fused, 40) << dtype;
  }
}

// Hybridized graphs on CPUs fuse unless KILN_FUSE=0; on a GPU they fuse when
// Kiln was built with NVRTC (generated kernels run the groups), and stay
// unfused otherwise (an interpreter kernel would run them) unless KILN_FUSE=1.
TEST(FuseElementwise, FusesCpuGraphsAndGpuGraphsWithGeneratedKernels) {
  if (std::getenv("KILN_FUSE") != nullptr || std::getenv("KILN_CUDA_FUSED") != nullptr)
    GTEST_SKIP() << "KILN_FUSE or KILN_CUDA_FUSED is set in the environment";
  EXPECT_TRUE(fuse_elementwise_on(Device::cpu(0)));
  EXPECT_TRUE(fuse_elementwise_on(Device::cpu(1)));
#if defined(KILN_HAVE_NVRTC)
  EXPECT_TRUE(fuse_elementwise_on(Device::cuda(0)));
#else
  EXPECT_FALSE(fuse_elementwise_on(Device::cuda(0)));
#endif
}

}  // namespace
}  // namespace kiln::passes
