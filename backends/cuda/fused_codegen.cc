// Source generation of the NVRTC-compiled fused kernels (fused_codegen.h).
#include "backends/cuda/fused_codegen.h"

#include <bit>
#include <cstring>
#include <sstream>

#include "ir/error.h"
#include "ir/ops/elemwise_math.h"

namespace kiln::cuda {
namespace {

#define KILN_CODEGEN_STR_(...) #__VA_ARGS__
#define KILN_CODEGEN_STR(...) KILN_CODEGEN_STR_(__VA_ARGS__)
constexpr char kArgsSource[] = KILN_CODEGEN_STR(KILN_FUSED_KERNEL_ARGS);
#undef KILN_CODEGEN_STR
#undef KILN_CODEGEN_STR_

// Loads and stores of one element, and float32 <-> storage conversions.
constexpr char kFloat32Elem[] = R"(typedef float kiln_elem;
__device__ __forceinline__ float kiln_load(float v) { return v; }
__device__ __forceinline__ float kiln_store(float v) { return v; }
)";
constexpr char kFloat16Elem[] = R"(typedef unsigned short kiln_elem;
__device__ __forceinline__ float kiln_load(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short kiln_store(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
)";
constexpr char kBfloat16Elem[] = R"(typedef unsigned short kiln_elem;
__device__ __forceinline__ float kiln_load(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
__device__ __forceinline__ unsigned short kiln_store(float f) {
  unsigned x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (unsigned short)(x >> 16);
}
)";

const char* opcode_function(FusedOpcode op) {
  switch (op) {
#define KILN_X(id, name, arity, fn) \
  case FusedOpcode::k##id:          \
    return #fn;
    KILN_FUSED_OPCODES(KILN_X)
#undef KILN_X
  }
  return "";
}

// A float literal, bit-exact (NaN and infinities included).
std::string literal(float v) {
  std::ostringstream s;
  s << "__uint_as_float(0x" << std::hex << std::bit_cast<uint32_t>(v) << "u)";
  return s.str();
}

}  // namespace

std::string FusedSignature::key() const {
  return program + "|" + std::string(dtype_name(dtype)) + (vector ? "|v" : "|s") + (channel_grouped ? "|g" : "|e") +
         (index64 ? "|i64" : "|i32");
}

FastDiv fused_fast_div(uint32_t d) {
  KILN_CHECK(d >= 1 && d < (1u << 31), InternalError, "internal error: fused_fast_div({}): divisor out of range", d);
  uint32_t shift = 0;
  while ((uint64_t{1} << shift) < d) ++shift;
  uint64_t mul = ((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1;
  return {static_cast<uint32_t>(mul), shift};
}

std::string fused_kernel_source(const FusedProgram& p, const FusedSignature& sig) {
  const int k = static_cast<int>(p.inputs.size());
  const int o = static_cast<int>(p.outputs.size());
  KILN_CHECK(k <= kFusedKernelMaxOperands && o <= kFusedKernelMaxOperands, NotSupported,
             "_kiln_fused_elemwise: the generated CUDA kernels take at most {} inputs and {} outputs (got {} and {}, "
             "program \"{}\")",
             kFusedKernelMaxOperands, kFusedKernelMaxOperands, k, o, sig.program);
  const char* elem = nullptr;
  int width = 0;  // elements per 16 bytes
  switch (sig.dtype) {
    case DType::kFloat32: elem = kFloat32Elem, width = 4; break;
    case DType::kFloat16: elem = kFloat16Elem, width = 8; break;
    case DType::kBfloat16: elem = kBfloat16Elem, width = 8; break;
    default:
      throw NotSupported(fmt::format("_kiln_fused_elemwise on CUDA: dtype {} (expected float32, float16 or bfloat16)",
                                     dtype_name(sig.dtype)));
  }
  std::ostringstream s;
  s << "// _kiln_fused_elemwise \"" << sig.program << "\" (" << dtype_name(sig.dtype)
    << (sig.vector ? ", 16-byte accesses" : ", scalar accesses") << (sig.index64 ? ", 64-bit indices" : "") << ")\n";
  s << "#define KILN_FUSED_DEVICE_FN __device__ __forceinline__\n";
  s << "namespace kiln { namespace math {\n" << math::kFusedMathSource << "\n} }\n";
  s << kArgsSource << "\n" << elem;
  s << "typedef " << (sig.index64 ? "long long" : "unsigned") << " kiln_index;\n";

  // The position in channel/row input j of position i.
  for (int j = 0; j < k; ++j) {
    FusedInputKind kind = p.inputs[static_cast<size_t>(j)];
    if (kind != FusedInputKind::kChannel && kind != FusedInputKind::kRow) continue;
    s << "__device__ __forceinline__ kiln_index kiln_at" << j << "(const FusedKernelArgs& a, kiln_index i) {\n";
    if (sig.index64) {
      if (kind == FusedInputKind::kRow)
        s << "  return i % a.len[" << j << "];\n";
      else
        s << "  return (i / a.inner[" << j << "]) % a.len[" << j << "];\n";
    } else {
      if (kind == FusedInputKind::kRow)
        s << "  const unsigned q = i;\n";
      else
        s << "  const unsigned q = (__umulhi(i, a.inner_mul[" << j << "]) + i) >> a.inner_shift[" << j << "];\n";
      s << "  const unsigned r = (__umulhi(q, a.len_mul[" << j << "]) + q) >> a.len_shift[" << j << "];\n";
      s << "  return q - r * (unsigned)a.len[" << j << "];\n";
    }
    s << "}\n";
  }

  // The program on one position: x[] its inputs, y[] its outputs.
  s << "__device__ __forceinline__ void kiln_body(const float* x, float* y) {\n";
  for (int j = 0; j < k; ++j) s << "  const float v" << j << " = x[" << j << "];\n";
  for (size_t j = 0; j < p.instrs.size(); ++j) {
    const FusedInstr& ins = p.instrs[j];
    s << "  const float v" << (static_cast<size_t>(k) + j) << " = kiln::math::" << opcode_function(ins.op) << "(";
    for (int q = 0; q < 3; ++q) {
      const FusedOperand& a = ins.args[static_cast<size_t>(q)];
      if (q > 0) s << ", ";
      if (q >= fused_opcode_arity(ins.op))
        s << "0.0f";
      else if (a.is_value())
        s << "v" << a.value;
      else
        s << literal(a.literal);
    }
    s << ");\n";
  }
  for (int j = 0; j < o; ++j) s << "  y[" << j << "] = v" << p.outputs[static_cast<size_t>(j)] << ";\n";
  s << "}\n";

  // Loads of input j at position `pos` into `dst`.
  auto load_one = [&](int j, const std::string& dst, const std::string& pos) {
    switch (p.inputs[static_cast<size_t>(j)]) {
      case FusedInputKind::kFull:
        s << "    " << dst << " = kiln_load(((const kiln_elem*)a.in[" << j << "])[" << pos << "]);\n";
        break;
      case FusedInputKind::kScalar: s << "    " << dst << " = s" << j << ";\n"; break;
      case FusedInputKind::kChannel:
      case FusedInputKind::kRow:
        s << "    " << dst << " = kiln_load(((const kiln_elem*)a.in[" << j << "])[kiln_at" << j << "(a, " << pos
          << ")]);\n";
        break;
    }
  };

  s << "extern \"C\" __global__ void __launch_bounds__(256) " << kFusedKernelName << "(const FusedKernelArgs a) {\n";
  s << "  const kiln_index n = (kiln_index)a.n;\n";
  s << "  const kiln_index stride = (kiln_index)gridDim.x * blockDim.x;\n";
  s << "  const kiln_index t = (kiln_index)blockIdx.x * blockDim.x + threadIdx.x;\n";
  for (int j = 0; j < k; ++j)
    if (p.inputs[static_cast<size_t>(j)] == FusedInputKind::kScalar)
      s << "  const float s" << j << " = kiln_load(((const kiln_elem*)a.in[" << j << "])[0]);\n";
  s << "  kiln_index tail = 0;\n";
  if (sig.vector) {
    const char* vec = sig.dtype == DType::kFloat32 ? "float4" : "uint4";
    s << "  const kiln_index nv = n / " << width << ";\n";
    s << "  for (kiln_index v = t; v < nv; v += stride) {\n";
    s << "    float x[" << width << "][" << k << "];\n    float y[" << width << "][" << o << "];\n";
    for (int j = 0; j < k; ++j) {
      if (p.inputs[static_cast<size_t>(j)] == FusedInputKind::kFull) {
        s << "    {\n    const " << vec << " q = ((const " << vec << "*)a.in[" << j << "])[v];\n";
        const char* lanes[] = {"x", "y", "z", "w"};
        for (int e = 0; e < width; ++e) {
          if (width == 4)
            s << "    x[" << e << "][" << j << "] = q." << lanes[e] << ";\n";
          else
            s << "    x[" << e << "][" << j << "] = kiln_load((kiln_elem)(q." << lanes[e / 2]
              << (e % 2 == 0 ? " & 0xffffu" : " >> 16") << "));\n";
        }
        s << "    }\n";
      } else if (sig.channel_grouped && p.inputs[static_cast<size_t>(j)] == FusedInputKind::kChannel) {
        load_one(j, "x[0][" + std::to_string(j) + "]", "v * " + std::to_string(width));
        for (int e = 1; e < width; ++e) s << "    x[" << e << "][" << j << "] = x[0][" << j << "];\n";
      } else {
        for (int e = 0; e < width; ++e)
          load_one(j, "x[" + std::to_string(e) + "][" + std::to_string(j) + "]",
                   "v * " + std::to_string(width) + " + " + std::to_string(e));
      }
    }
    s << "#pragma unroll\n    for (int e = 0; e < " << width << "; ++e) kiln_body(x[e], y[e]);\n";
    for (int j = 0; j < o; ++j) {
      s << "    {\n    " << vec << " r;\n";
      const char* lanes[] = {"x", "y", "z", "w"};
      for (int e = 0; e < 4; ++e) {
        if (width == 4)
          s << "    r." << lanes[e] << " = y[" << e << "][" << j << "];\n";
        else
          s << "    r." << lanes[e] << " = (unsigned)kiln_store(y[" << 2 * e << "][" << j
            << "]) | ((unsigned)kiln_store(y[" << 2 * e + 1 << "][" << j << "]) << 16);\n";
      }
      s << "    ((" << vec << "*)a.out[" << j << "])[v] = r;\n    }\n";
    }
    s << "  }\n  tail = nv * " << width << ";\n";
  }
  s << "  for (kiln_index i = tail + t; i < n; i += stride) {\n";
  s << "    float x[" << k << "];\n    float y[" << o << "];\n";
  for (int j = 0; j < k; ++j) load_one(j, "x[" + std::to_string(j) + "]", "i");
  s << "    kiln_body(x, y);\n";
  for (int j = 0; j < o; ++j) s << "    ((kiln_elem*)a.out[" << j << "])[i] = kiln_store(y[" << j << "]);\n";
  s << "  }\n}\n";
  return s.str();
}

}  // namespace kiln::cuda
