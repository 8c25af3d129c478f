// _kiln_fused_elemwise on a GPU: the NVRTC-generated kernels
// (backends/cuda/fused_nvrtc.h) and the interpreter kernel against the
// shared scalar math computed on the host (ir/ops/elemwise_math.h, what the
// unfused kernels compute), for every opcode, every input kind, float32,
// float16 and bfloat16, odd sizes, 16-byte aligned and unaligned arrays and
// several outputs; the unfused GPU ops against the fused node; the kernel
// cache compiles once per signature. Skips with one line without a GPU.
//
// Tolerance: the device's expf/logf/tanhf/powf/log1pf differ from the host's
// libm by a few ulp, and NVRTC contracts a multiply and an add into an FMA:
// float32 1e-5 relative + 1e-5 absolute; a 16-bit output may round to the
// neighbour of the host's: one unit of the format (2e-3 float16, 1.6e-2
// bfloat16).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/fused_nvrtc.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "frontend/ndarray.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/elemwise_math.h"
#include "ir/ops/fused.h"
#include "tests/cuda/cuda_test_util.h"

namespace kiln {
namespace {

constexpr Device kGpu = Device::cuda(0);

double tolerance(DType t) { return t == DType::kFloat32 ? 1e-5 : t == DType::kFloat16 ? 2e-3 : 1.6e-2; }

float round_to(DType t, float v) {
  if (t == DType::kFloat16) return half_to_float(float_to_half(v));
  if (t == DType::kBfloat16) return bf16_to_float(float_to_bf16(v));
  return v;
}

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-3, 3);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1e-40f, 1.0f};
  for (size_t i = 0; i < v.size(); i += 13) v[i] = specials[(i / 13) % 7];
  return v;
}

// The shape an input of `kind` has against `out` (channel: axis 1; row: the last axis).
Shape input_shape(FusedInputKind kind, const Shape& out) {
  switch (kind) {
    case FusedInputKind::kFull: return out;
    case FusedInputKind::kScalar: return Shape{1};
    case FusedInputKind::kChannel: {
      std::vector<int64_t> dims(static_cast<size_t>(out.ndim()), 1);
      dims[1] = out[1];
      return Shape(dims);
    }
    case FusedInputKind::kRow: return Shape{out[out.ndim() - 1]};
  }
  return out;
}


// A GPU array of `dtype` holding `values` (rounded to it): a fresh one
// (16-byte aligned), or with `offset` a view at element offset n into a
// larger one (not 16-byte aligned when n is odd or n * element size is not a
// multiple of 16).
NDArray gpu_array(const std::vector<float>& values, const Shape& shape, DType dtype, bool offset) {
  if (!offset) return nd::array<float>(values, shape).astype(dtype).copy_to(kGpu);
  const int64_t n = shape.size();
  std::vector<float> two(static_cast<size_t>(2 * n), 7.0f);
  std::copy(values.begin(), values.end(), two.begin() + n);
  NDArray whole = nd::array<float>(two, Shape{2, n}).astype(dtype).copy_to(kGpu);
  return whole.at(1).reshape(IntTuple(shape.begin(), shape.end()));
}

// The host reference: the shared scalar math, per position, inputs as the
// kernels index them, each output rounded once to `dtype`.
std::vector<std::vector<float>> reference(const FusedProgram& p, const std::vector<std::vector<float>>& inputs,
                                          const std::vector<Shape>& shapes, const Shape& out, DType dtype) {
  const int64_t n = out.size();
  std::vector<std::vector<float>> res(p.outputs.size(), std::vector<float>(static_cast<size_t>(n)));
  std::vector<float> v(static_cast<size_t>(p.num_values()));
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < p.inputs.size(); ++k) {
      int64_t at = i;
      if (p.inputs[k] == FusedInputKind::kScalar) at = 0;
      if (p.inputs[k] == FusedInputKind::kChannel || p.inputs[k] == FusedInputKind::kRow) {
        int axis = fused_broadcast_axis(shapes[k], out);
        at = (i / fused_inner_size(out, axis)) % out[axis];
      }
      v[k] = round_to(dtype, inputs[k][static_cast<size_t>(at)]);
    }
    for (size_t j = 0; j < p.instrs.size(); ++j) {
      const FusedInstr& ins = p.instrs[j];
      float a[3] = {};
      for (int q = 0; q < fused_opcode_arity(ins.op); ++q) {
        const FusedOperand& o = ins.args[static_cast<size_t>(q)];
        a[q] = o.is_value() ? v[static_cast<size_t>(o.value)] : o.literal;
      }
      v[p.inputs.size() + j] = math::fused_eval(ins.op, a[0], a[1], a[2]);
    }
    for (size_t o = 0; o < p.outputs.size(); ++o)
      res[o][static_cast<size_t>(i)] = round_to(dtype, v[static_cast<size_t>(p.outputs[o])]);
  }
  return res;
}

// Runs `p` on the GPU: inputs from `inputs` (host float32, of `shapes`),
// full inputs and the outputs at an odd offset with `offset`.
std::vector<std::vector<float>> run_gpu(const FusedProgram& p, const std::vector<std::vector<float>>& inputs,
                                        const std::vector<Shape>& shapes, const Shape& out, DType dtype,
                                        bool offset) {
  std::vector<NDArray> in;
  for (size_t k = 0; k < inputs.size(); ++k)
    in.push_back(gpu_array(inputs[k], shapes[k], dtype, offset && p.inputs[k] == FusedInputKind::kFull));
  OpAttrs attrs = OpAttrs::make(FusedElemwiseAttrs{FusedProgramRef::make(p)});
  std::vector<NDArray> outs;
  if (offset) {
    std::vector<float> junk(static_cast<size_t>(out.size()), -12345.0f);
    for (size_t o = 0; o < p.outputs.size(); ++o) outs.push_back(gpu_array(junk, out, dtype, true));
    invoke(OpId::kFusedElemwise, std::span<const NDArray>(in), attrs, {.out = outs});
  } else {
    outs = invoke(OpId::kFusedElemwise, std::span<const NDArray>(in), attrs);
  }
  std::vector<std::vector<float>> res;
  for (NDArray& o : outs) res.push_back(o.to_vector<float>());
  return res;
}

// got == want within tolerance(dtype), NaN where NaN; reports the first few.
void expect_close(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want, DType dtype,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = tolerance(dtype);
  int reported = 0;
  for (size_t o = 0; o < got.size(); ++o) {
    ASSERT_EQ(got[o].size(), want[o].size()) << what;
    for (size_t i = 0; i < got[o].size() && reported < 4; ++i) {
      float g = got[o][i], w = want[o][i];
      bool ok = std::isnan(w) || std::isnan(g)   ? std::isnan(w) && std::isnan(g)
                : std::isinf(w) || std::isinf(g) ? g == w
                                                 : std::abs(g - w) <= tol + tol * std::abs(w);
      if (!ok) {
        ADD_FAILURE() << what << ": output " << o << " element " << i << ": got " << g << ", want " << w;
        ++reported;
      }
    }
  }
}

const char* kind_name(FusedInputKind k) {
  switch (k) {
    case FusedInputKind::kFull: return "f";
    case FusedInputKind::kScalar: return "s";
    case FusedInputKind::kChannel: return "c";
    case FusedInputKind::kRow: return "r";
  }
  return "?";
}

// Programs covering every opcode with input 1 of kind `k`: the binary
// opcodes and where on (full, k, full); the unary opcodes on the full input
// and on input 1. At most eight outputs each (the interpreter's limit).
std::vector<FusedProgram> programs_for(FusedInputKind k) {
  struct Use {
    FusedOpcode op;
    std::array<int, 3> args;
  };
  std::vector<Use> binary, unary_full, unary_k;
#define KILN_X(id, name, arity, fn)                          \
  if ((arity) == 1) {                                        \
    unary_full.push_back({FusedOpcode::k##id, {0, 0, 0}});   \
    unary_k.push_back({FusedOpcode::k##id, {1, 0, 0}});      \
  } else if ((arity) == 2) {                                 \
    binary.push_back({FusedOpcode::k##id, {0, 1, 0}});       \
  } else {                                                   \
    binary.push_back({FusedOpcode::k##id, {1, 0, 2}});       \
    binary.push_back({FusedOpcode::k##id, {0, 2, 1}});       \
  }
  KILN_FUSED_OPCODES(KILN_X)
#undef KILN_X
  std::vector<FusedProgram> res;
  auto chunks = [&](const std::vector<Use>& uses, std::vector<FusedInputKind> inputs) {
    for (size_t first = 0; first < uses.size(); first += 8) {
      FusedProgram p;
      p.inputs = inputs;
      for (size_t u = first; u < std::min(uses.size(), first + 8); ++u) {
        FusedInstr ins{uses[u].op, {}};
        for (int q = 0; q < fused_opcode_arity(uses[u].op); ++q)
          ins.args[static_cast<size_t>(q)] = FusedOperand{.value = uses[u].args[static_cast<size_t>(q)]};
        p.instrs.push_back(ins);
        p.outputs.push_back(p.num_values() - 1);
      }
      p.validate();
      res.push_back(std::move(p));
    }
  };
  chunks(binary, {FusedInputKind::kFull, k, FusedInputKind::kFull});
  chunks(unary_full, {FusedInputKind::kFull, k});
  if (k != FusedInputKind::kFull) chunks(unary_k, {FusedInputKind::kFull, k});
  return res;
}

// Odd sizes (a scalar tail after the 16-byte groups; views at an odd offset
// are unaligned), and one whose channel input is constant over each group.
const Shape kShapes[] = {Shape{3, 5, 7, 9}, Shape{2, 37, 1001}, Shape{2, 3, 8, 9}};

// Inputs of `p` against `out`: random values with specials, of each kind's shape.
void make_inputs(const FusedProgram& p, const Shape& out, std::vector<std::vector<float>>& values,
                 std::vector<Shape>& shapes) {
  values.clear(), shapes.clear();
  for (size_t k = 0; k < p.inputs.size(); ++k) {
    shapes.push_back(input_shape(p.inputs[k], out));
    values.push_back(random_values(shapes.back().size(), static_cast<uint32_t>(11 + k)));
  }
}

// Runs fn with the interpreter kernel selected, then selects the generated kernels again.
template <typename Fn>
void with_interpreter(Fn fn) {
  cuda::set_nvrtc_fused_enabled(false);
  try {
    fn();
  } catch (...) {
    cuda::set_nvrtc_fused_enabled(true);
    throw;
  }
  cuda::set_nvrtc_fused_enabled(true);
}

TEST(FusedNvrtc, EveryOpcodeKindAndDtypeMatchesTheInterpreterAndTheSharedMath) {
  KILN_REQUIRE_CUDA();
  ASSERT_TRUE(cuda::nvrtc_fused_enabled()) << "KILN_CUDA_FUSED=interpret is set, or Kiln was built without NVRTC";
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBfloat16}) {
    for (FusedInputKind k :
         {FusedInputKind::kFull, FusedInputKind::kScalar, FusedInputKind::kChannel, FusedInputKind::kRow}) {
      for (const FusedProgram& p : programs_for(k)) {
        for (const Shape& out : kShapes) {
          std::vector<std::vector<float>> values;
          std::vector<Shape> shapes;
          make_inputs(p, out, values, shapes);
          auto want = reference(p, values, shapes, out, dtype);
          for (bool offset : {false, true}) {
            std::string what = fmt::format("{} {} (input 1 of kind {}) out {} {}", p.to_string(), dtype_name(dtype),
                                           kind_name(k), out, offset ? "offset view" : "fresh array");
            expect_close(run_gpu(p, values, shapes, out, dtype, offset), want, dtype, "nvrtc: " + what);
            with_interpreter([&] {
              expect_close(run_gpu(p, values, shapes, out, dtype, offset), want, dtype, "interpreter: " + what);
            });
          }
        }
      }
    }
  }
}

// A chain with literals over all four kinds and three outputs, two of them
// intermediate values.
TEST(FusedNvrtc, ChainWithEveryKindAndSeveralOutputs) {
  KILN_REQUIRE_CUDA();
  FusedProgram p = FusedProgram::parse(
      "in=f,s,c,r;%4=mul(%0,%1);%5=add(%4,%2);%6=sub(%5,%3);%7=relu(%6);%8=mul(%7,0.5);"
      "%9=where(%7,%8,-1.5);%10=sigmoid(%9);out=%10,%4,%7");
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBfloat16}) {
    for (const Shape& out : kShapes) {
      std::vector<std::vector<float>> values;
      std::vector<Shape> shapes;
      make_inputs(p, out, values, shapes);
      auto want = reference(p, values, shapes, out, dtype);
      for (bool offset : {false, true}) {
        std::string what = fmt::format("{} {} {}", dtype_name(dtype), out, offset ? "offset view" : "fresh array");
        expect_close(run_gpu(p, values, shapes, out, dtype, offset), want, dtype, "nvrtc: " + what);
        with_interpreter([&] {
          expect_close(run_gpu(p, values, shapes, out, dtype, offset), want, dtype, "interpreter: " + what);
        });
      }
    }
  }
}

// The unfused GPU ops exp -> _mul_scalar -> relu -> _plus_scalar against the fused node.
TEST(FusedNvrtc, MatchesTheUnfusedOps) {
  KILN_REQUIRE_CUDA();
  const Shape shape{7, 129};
  NDArray x = nd::array<float>(random_values(shape.size(), 3), shape).copy_to(kGpu);
  auto scalar = [](double v) { return OpAttrs::make(ScalarAttrs{.scalar = v}); };
  NDArray a = invoke1(OpId::kExp, {x});
  NDArray b = invoke1(OpId::kMulScalar, {a}, scalar(-0.7));
  NDArray c = invoke1(OpId::kRelu, {b});
  NDArray d = invoke1(OpId::kPlusScalar, {c}, scalar(1.5));
  FusedProgram p = FusedProgram::parse("in=f;%1=exp(%0);%2=mul(%1,-0.7);%3=relu(%2);%4=add(%3,1.5);out=%4");
  NDArray f = invoke1(OpId::kFusedElemwise, {x}, OpAttrs::make(FusedElemwiseAttrs{FusedProgramRef::make(p)}));
  expect_close({f.to_vector<float>()}, {d.to_vector<float>()}, DType::kFloat32, "fused vs unfused");
}

TEST(FusedNvrtc, CompilesOncePerSignature) {
  KILN_REQUIRE_CUDA();
  // A program no other test uses.
  FusedProgram p = FusedProgram::parse("in=f,f;%2=mul(%0,%1);%3=add(%2,0.123456);out=%3");
  std::vector<std::vector<float>> values, other_values;
  std::vector<Shape> shapes, other_shapes;
  make_inputs(p, Shape{3, 5, 7, 9}, values, shapes);
  make_inputs(p, Shape{2, 37, 1001}, other_values, other_shapes);
  const int64_t before = cuda::nvrtc_fused_compile_count();
  auto compiled = [&] { return cuda::nvrtc_fused_compile_count() - before; };
  run_gpu(p, values, shapes, shapes[0], DType::kFloat32, false);
  EXPECT_EQ(compiled(), 1);
  run_gpu(p, values, shapes, shapes[0], DType::kFloat32, false);
  run_gpu(p, other_values, other_shapes, other_shapes[0], DType::kFloat32, false);  // another size
  EXPECT_EQ(compiled(), 1);
  run_gpu(p, values, shapes, shapes[0], DType::kFloat32, true);  // unaligned: scalar accesses
  EXPECT_EQ(compiled(), 2);
  run_gpu(p, values, shapes, shapes[0], DType::kFloat16, false);
  run_gpu(p, values, shapes, shapes[0], DType::kFloat16, false);
  EXPECT_EQ(compiled(), 3);
}

}  // namespace
}  // namespace kiln
