// nd::scaled_dot_product_attention on the fused _kiln_attention op
// (backends/cpu/attention.cc) against nd::attention_reference, its
// decomposition: values and the gradients of q, k and v, causal or not, at
// lengths that are not multiples of the kernel's tiles; finite differences in
// float64; hybridized against imperative; MXNet JSON and ONNX round trips;
// the errors of bad inputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "frontend/formats/onnx/model.h"
#include "frontend/invoke.h"
#include "frontend/kiln.h"
#include "frontend/nd.h"
#include "frontend/nd_attention.h"
#include "frontend/nn/export_onnx.h"
#include "ir/ops/attention.h"
#include "runtime/engine.h"
#include "runtime/kernel.h"
#include "runtime/storage.h"
#include "tests/frontend/attention_grads.h"
#include "tests/frontend/grad_check.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

NDArray values(Shape s, uint64_t seed, DType t) {
  return nd::array(test::uniform(s.size(), -1.5, 1.5, seed), s).astype(t);
}

struct Shapes {
  Shape q, k, v;
  bool causal = false;
  std::optional<double> scale;
};

std::string describe(const Shapes& c, DType t) {
  return fmt::format("q {} k {} v {} causal={} {}", c.q, c.k, c.v, c.causal, dtype_name(t));
}

using test::AttentionGrads;

// Output and input gradients of sum(attention(q, k, v) * w).
template <typename F>
AttentionGrads run(F&& attention, const Shapes& c, DType t) {
  return test::attention_grads(
      [&](const NDArray& q, const NDArray& k, const NDArray& v) {
        return attention(q, k, v, nd::AttentionOptions{.causal = c.causal, .scale = c.scale});
      },
      values(c.q, 1, t), values(c.k, 2, t), values(c.v, 3, t), [&](const Shape& s) { return values(s, 4, t); });
}

const std::vector<Shapes>& shapes() {
  static const std::vector<Shapes> all = {
      {{2, 3, 37, 24}, {2, 3, 37, 24}, {2, 3, 37, 24}, false},
      {{2, 3, 37, 24}, {2, 3, 37, 24}, {2, 3, 37, 24}, true},
      {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, true},  // T = 1
      {{2, 1, 5}, {2, 1, 5}, {2, 1, 7}, false},
      {{1, 2, 130, 16}, {1, 2, 130, 16}, {1, 2, 130, 8}, true},  // three tiles, a partial one
      {{3, 70, 8}, {3, 70, 8}, {3, 70, 8}, false, 0.3},          // an explicit scale
      {{2, 2, 5, 8}, {2, 2, 70, 8}, {2, 2, 70, 12}, true},       // Tq < Tk: the last 5 positions
      {{2, 1, 9}, {2, 200, 9}, {2, 200, 9}, true},               // decoding one token
      {{2, 65, 3}, {2, 129, 3}, {2, 129, 5}, true},
  };
  return all;
}

using test::expect_same;

TEST(Attention, FusedMatchesTheReferenceInFloat32AndFloat64) {
  ASSERT_TRUE(has_kernel(OpId::kAttention, DeviceKind::kCPU));
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    const double tol = t == DType::kFloat64 ? 1e-12 : 1e-5;
    for (const Shapes& c : shapes()) {
      AttentionGrads want = run(nd::attention_reference, c, t);
      AttentionGrads got = run(nd::scaled_dot_product_attention, c, t);
      expect_same(got, want, tol, describe(c, t));
    }
  }
}

TEST(Attention, RunsOneFusedOpAndKeepsLogsumexp) {
  NDArray q = values({2, 7, 4}, 1, DType::kFloat64), k = values({2, 9, 4}, 2, DType::kFloat64);
  NDArray v = values({2, 9, 3}, 3, DType::kFloat64);
  std::vector<NDArray> o = invoke(OpId::kAttention, {q, k, v}, OpAttrs::make(AttentionAttrs{.causal = true}));
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[0].shape(), (Shape{2, 7, 3}));
  EXPECT_EQ(o[1].shape(), (Shape{2, 7}));
  EXPECT_EQ(o[1].dtype(), DType::kFloat64);
  // lse = log sum_j exp(s_ij) over allowed j (j <= i + 2).
  NDArray s = nd::batch_dot(q, k, false, true) * 0.5;
  NDArray masked = s + (1.0 - nd::causal_mask(7, 9, {DType::kFloat64})) * -1e300;
  NDArray lse = nd::log(nd::sum(nd::exp(masked), {-1}));
  test::expect_close(o[1], lse, 1e-12, "lse");
  EXPECT_EQ(invoke(OpId::kAttention, {q.astype(DType::kFloat32), k.astype(DType::kFloat32), v.astype(DType::kFloat32)},
                   OpAttrs::make(AttentionAttrs{}))[1]
                .dtype(),
            DType::kFloat32);
}

TEST(Attention, MatchesFiniteDifferencesInFloat64) {
  for (bool causal : {false, true}) {
    testing::check_gradients(
        [&](std::span<const NDArray> x) {
          return nd::scaled_dot_product_attention(x[0], x[1], x[2], {.causal = causal});
        },
        {values({2, 4, 3}, 5, DType::kFloat64), values({2, 6, 3}, 6, DType::kFloat64),
         values({2, 6, 5}, 7, DType::kFloat64)},
        {.eps = 1e-6, .rtol = 1e-6, .atol = 1e-8});
  }
}

TEST(Attention, SixteenBitInputsMatchFloat32) {
  for (DType low : {DType::kBfloat16, DType::kFloat16}) {
    NDArray q = values({2, 2, 33, 16}, 1, low), k = values({2, 2, 33, 16}, 2, low), v = values({2, 2, 33, 16}, 3, low);
    NDArray got = nd::scaled_dot_product_attention(q, k, v, {.causal = true});
    EXPECT_EQ(got.dtype(), low);
    NDArray want = nd::attention_reference(q.astype(DType::kFloat32), k.astype(DType::kFloat32),
                                           v.astype(DType::kFloat32), {.causal = true});
    test::expect_close(got.astype(DType::kFloat32), want, low == DType::kBfloat16 ? 2e-2 : 4e-3,
                       std::string(dtype_name(low)));
  }
}

// The 16-bit kernels compute in float32 on the converted inputs: exactly the
// float32 kernel's results on those inputs, rounded once (lse unrounded).
TEST(Attention, SixteenBitKernelsAreTheFloat32KernelsRoundedOnce) {
  const DType f32 = DType::kFloat32;
  for (DType low : {DType::kBfloat16, DType::kFloat16}) {
    for (const Shapes& c : shapes()) {
      const OpAttrs a = OpAttrs::make(AttentionAttrs{.causal = c.causal, .scale = c.scale});
      NDArray q = values(c.q, 1, low), k = values(c.k, 2, low), v = values(c.v, 3, low);
      std::vector<NDArray> got = invoke(OpId::kAttention, {q, k, v}, a);
      std::vector<NDArray> want = invoke(OpId::kAttention, {q.astype(f32), k.astype(f32), v.astype(f32)}, a);
      const std::string what = describe(c, low);
      ASSERT_EQ(got[0].dtype(), low) << what;
      ASSERT_EQ(got[1].dtype(), f32) << what;
      EXPECT_EQ(got[0].to_vector<double>(), want[0].astype(low).to_vector<double>()) << what << ": out";
      EXPECT_EQ(got[1].to_vector<double>(), want[1].to_vector<double>()) << what << ": lse";
      NDArray dout = values(got[0].shape(), 4, low), dlse = values(got[1].shape(), 5, f32);
      std::vector<NDArray> g = invoke(OpId::kAttentionBackward, {dout, dlse, q, k, v, got[0], got[1]}, a);
      std::vector<NDArray> w = invoke(OpId::kAttentionBackward,
                                      {dout.astype(f32), dlse, q.astype(f32), k.astype(f32), v.astype(f32),
                                       got[0].astype(f32), got[1]},
                                      a);
      for (size_t i = 0; i < 3; ++i) {
        ASSERT_EQ(g[i].dtype(), low) << what;
        EXPECT_EQ(g[i].to_vector<double>(), w[i].astype(low).to_vector<double>()) << what << ": gradient " << i;
      }
    }
  }
}

// A mask, or a device without the kernel, runs the decomposition.
TEST(Attention, MaskedCallsRunTheReference) {
  NDArray q = values({2, 5, 4}, 1, DType::kFloat64), k = values({2, 6, 4}, 2, DType::kFloat64);
  NDArray v = values({2, 6, 4}, 3, DType::kFloat64);
  NDArray mask = nd::array<double>({1, 1, 0, 1, 1, 0}, Shape{1, 6}).astype(DType::kFloat64);
  test::expect_close(nd::scaled_dot_product_attention(q, k, v, {.causal = true, .mask = mask}),
                     nd::attention_reference(q, k, v, {.causal = true, .mask = mask}), 0, "masked");
}

// q, k, v as inputs of a hybridized block.
struct AttentionBlock : nn::HybridBlock {
  bool causal = false;
  std::vector<NDArray> forward(std::span<const NDArray> x) override {
    return {nd::scaled_dot_product_attention(x[0], x[1], x[2], {.causal = causal})};
  }
};

TEST(Attention, HybridizedEqualsImperative) {
  for (bool causal : {false, true}) {
    Shapes c{{2, 2, 37, 8}, {2, 2, 37, 8}, {2, 2, 37, 8}, causal};
    AttentionBlock block;
    block.causal = causal;
    auto call = [&](const NDArray& q, const NDArray& k, const NDArray& v, const nd::AttentionOptions&) {
      std::vector<NDArray> in{q, k, v};
      return block(std::span<const NDArray>(in))[0];
    };
    AttentionGrads want = run(call, c, DType::kFloat32);
    block.hybridize();
    AttentionGrads got = run(call, c, DType::kFloat32);
    AttentionGrads again = run(call, c, DType::kFloat32);  // the cached graph
    expect_same(got, want, 1e-6, "hybridized");
    expect_same(again, want, 1e-6, "hybridized, second call");
  }
}

std::string read_file(const fs::path& p) {
  std::stringstream s;
  s << std::ifstream(p).rdbuf();
  return s.str();
}

TEST(Attention, ExportsAsMxnetJsonAndReloads) {
  AttentionBlock block;
  block.causal = true;
  block.hybridize();
  std::vector<NDArray> in{values({2, 3, 11, 8}, 1, DType::kFloat32), values({2, 3, 13, 8}, 2, DType::kFloat32),
                          values({2, 3, 13, 6}, 3, DType::kFloat32)};
  NDArray want = block(std::span<const NDArray>(in))[0];
  fs::path dir = fs::temp_directory_path() / fmt::format("kiln_attention_{}", ::getpid());
  fs::create_directories(dir);
  auto [json, params] = block.export_model((dir / "attn").string());
  std::string text = read_file(json);
  EXPECT_CONTAINS(text, "\"op\": \"_kiln_attention\"");
  EXPECT_CONTAINS(text, "\"causal\": \"True\"");
  auto back = nn::SymbolBlock::imports(json, {"data0", "data1", "data2"}, params);
  test::expect_close(back(std::span<const NDArray>(in))[0], want, 1e-6, "reloaded");
  fs::remove_all(dir);
}

TEST(Attention, ExportsToOnnxAsItsDecompositionAndReimports) {
  for (bool causal : {false, true}) {
    AttentionBlock block;
    block.causal = causal;
    block.hybridize();
    std::vector<NDArray> in{values({2, 3, 11, 8}, 1, DType::kFloat32), values({2, 3, 13, 8}, 2, DType::kFloat32),
                            values({2, 3, 13, 6}, 3, DType::kFloat32)};
    NDArray want = block(std::span<const NDArray>(in))[0];
    fs::path path = fs::temp_directory_path() / fmt::format("kiln_attention_{}_{}.onnx", causal, ::getpid());
    nn::export_onnx(block, path.string());  // runs libonnx's checker and shape inference
    onnx::Model m = onnx::Model::load(path.string());
    fs::remove(path);
    std::vector<NDArray> got = m.run(std::span<const NDArray>(in));
    ASSERT_EQ(got.size(), 1u);
    test::expect_close(got[0], want, 1e-5, causal ? "onnx causal" : "onnx");
  }
}

TEST(Attention, BadInputsAreErrorsAtTheCall) {
  NDArray q = nd::zeros({2, 5, 4}), k = nd::zeros({2, 6, 4}), v = nd::zeros({2, 6, 3});
  EXPECT_CONTAINS(test::error_of<ShapeError>([&] {
                    nd::scaled_dot_product_attention(q, nd::zeros({2, 6, 5}), v);
                  }),
                  "k [2,6,5]");
  EXPECT_CONTAINS(test::error_of<ShapeError>([&] {
                    nd::scaled_dot_product_attention(q, k, nd::zeros({2, 7, 3}));
                  }),
                  "expected q [..., Tq, D]");
  EXPECT_CONTAINS(test::error_of<ShapeError>([&] {
                    nd::scaled_dot_product_attention(nd::zeros({5, 4}), k, v);
                  }),
                  "rank >= 3");
  EXPECT_CONTAINS(test::error_of<TypeError>([&] { nd::scaled_dot_product_attention(q, k.astype(DType::kFloat64), v); }),
                  "need one dtype");
  EXPECT_CONTAINS(test::error_of<TypeError>([&] {
                    nd::scaled_dot_product_attention(q.astype(DType::kInt32), k.astype(DType::kInt32),
                                                     v.astype(DType::kInt32));
                  }),
                  "_kiln_attention");
  EXPECT_CONTAINS(test::error_of<ValueError>([&] {
                    nd::scaled_dot_product_attention(k, q, nd::zeros({2, 5, 3}), {.causal = true});
                  }),
                  "Tq <= Tk");
  // The op itself (a graph or a direct invoke) checks the same.
  EXPECT_CONTAINS(test::error_of<ShapeError>([&] {
                    invoke(OpId::kAttention, {q, nd::zeros({3, 6, 4}), v}, OpAttrs::make(AttentionAttrs{}));
                  }),
                  "_kiln_attention");
}

// Forward and backward allocate O(T) arrays: no [T, T] scores, probabilities
// or gradients of them (which a gradient path through ordinary ops would make).
TEST(Attention, ForwardAndBackwardHoldNoSquareArray) {
  const int64_t t = 2048;  // one [t, t] float32 array: 16 MiB
  NDArray q = values({1, 1, t, 16}, 1, DType::kFloat32), k = values({1, 1, t, 16}, 2, DType::kFloat32);
  NDArray v = values({1, 1, t, 16}, 3, DType::kFloat32);
  for (NDArray* x : {&q, &k, &v}) x->attach_grad();
  engine::wait_all();
  storage::Pool& pool = storage::pool(Device::cpu(0));
  pool.release_cached();
  const int64_t base = pool.stats().in_use;
  pool.reset_peak();
  {
    autograd::Record record;
    autograd::backward({nd::sum(nd::scaled_dot_product_attention(q, k, v, {.causal = true}))});
  }
  engine::wait_all();
  const int64_t peak = pool.stats().peak_in_use - base;
  EXPECT_LT(peak, 2 << 20) << "bytes at the peak of forward + backward";
}

// Second differentiation runs through the backward op's math in ordinary ops.
TEST(Attention, SecondOrderMatchesTheReference) {
  for (bool causal : {false, true}) {
    auto penalty = [&](auto attention) {
      NDArray q = values({2, 5, 3}, 1, DType::kFloat64), k = values({2, 6, 3}, 2, DType::kFloat64);
      NDArray v = values({2, 6, 4}, 3, DType::kFloat64);
      for (NDArray* x : {&q, &k, &v}) x->attach_grad();
      NDArray h;
      {
        autograd::Record record;
        NDArray y = nd::sum(nd::square(attention(q, k, v, nd::AttentionOptions{.causal = causal})));
        std::vector<NDArray> heads{y}, vars{q, k, v};
        std::vector<NDArray> g = autograd::grad(heads, vars, {}, false, true);
        h = nd::sum(nd::square(g[0])) + nd::sum(nd::square(g[1])) + nd::sum(nd::square(g[2]));
      }
      autograd::backward({h});
      return std::vector<NDArray>{q.grad().copy(), k.grad().copy(), v.grad().copy()};
    };
    std::vector<NDArray> want = penalty(nd::attention_reference);
    std::vector<NDArray> got = penalty(nd::scaled_dot_product_attention);
    for (size_t i = 0; i < 3; ++i) test::expect_close(got[i], want[i], 1e-10, fmt::format("input {}", i));
  }
}

}  // namespace
}  // namespace kiln
