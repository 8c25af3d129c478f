// The scalar math of the fused elementwise opcodes, written once and used as
// host C++, as CUDA device code (nvcc) and as text for NVRTC.
//
//   float y = math::op_sigmoid(x, 0.0f, 0.0f);              // host or device
//   float z = math::fused_eval(FusedOpcode::kMax, a, b, 0);  // by opcode
//   std::string src = math::kFusedMathSource;                // NVRTC prelude
//
// KILN_FUSED_MATH(FN, T, SFX) expands to one function per opcode,
// `FN T op_<name>(T a, T b, T c)` (unused operands ignored), computing in T
// with the C math functions named with suffix SFX (`f` for float: expf,
// logf, ...). It is expanded three ways, all from the same tokens:
//   - host C++ (any translation unit): float and double overloads, `inline`;
//     constant folding evaluates float32 nodes with the float ones (exactly
//     what the kernels compute) and float64 nodes with the double ones;
//   - nvcc (__CUDACC__): float and double, `__host__ __device__`; the CUDA
//     elementwise kernels (elemwise_ops.cuh) and the fused interpreter
//     (fused.cu) call these;
//   - NVRTC: kFusedMathSource is the float expansion, stringified after macro
//     expansion, with FN = KILN_FUSED_DEVICE_FN (which the generated source
//     defines as `__device__ __forceinline__`); the generated fused kernels
//     (backends/cuda/fused_codegen.h) call these by name.
// The body must therefore use no macro other than its parameters (NAN,
// INFINITY or a libm macro would be expanded differently by each compiler)
// and no comment (stringification drops line breaks).
//
// Semantics (the documented ones of ir/ops/fused.h): comparisons give 1 or 0;
// max/min propagate a NaN of either operand; relu(NaN) is 0; where(c, x, y)
// is x where c != 0 (NaN counts as non-zero); sigmoid never overflows (it
// goes through exp(-|x|)); softrelu is max(x, 0) + log1p(exp(-|x|)).
//
// Implementations that do not call these functions, and how they are held
// to them:
//   - the CPU interpreter's eight-lane loops (backends/cpu/fused_interpret.cc)
//     and the CPU's unfused vectorized kernels use Cephes polynomials
//     (backends/cpu/elemwise_math.h) for exp/log/tanh/sigmoid/softrelu and
//     compute the rest with the same operations on vectors;
//   - the LLVM JIT (backends/cpu/jit/fused_jit.cc) emits IR per opcode.
// tests/runtime/fused_math_test.cc runs every opcode through the
// interpreter (and the JIT when built) on edge values (NaN, +-inf, +-0,
// subnormals, large, negative) against these functions: bit for bit where
// no libm function is involved, within 1 ulp where one is (the polynomials'
// error elsewhere is up to 3 ulp: fused_kernel_test holds them to 1e-6
// relative on random data).
//
// Thread safety: pure functions.
#pragma once

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define KILN_FUSED_MATH_FN __host__ __device__ __forceinline__
#else
#define KILN_FUSED_MATH_FN inline
#endif

// The instruction set of fused programs: X(Id, "name", arity, function).
// clang-format off
#define KILN_FUSED_OPCODES(X)                                                                     \
  X(Add, "add", 2, op_add) X(Sub, "sub", 2, op_sub) X(Mul, "mul", 2, op_mul)                      \
  X(Div, "div", 2, op_div) X(Pow, "pow", 2, op_pow) X(Max, "max", 2, op_max)                      \
  X(Min, "min", 2, op_min) X(Eq, "eq", 2, op_eq) X(Ne, "ne", 2, op_ne) X(Gt, "gt", 2, op_gt)      \
  X(Ge, "ge", 2, op_ge) X(Lt, "lt", 2, op_lt) X(Le, "le", 2, op_le) X(Where, "where", 3, op_where) \
  X(Neg, "neg", 1, op_neg) X(Abs, "abs", 1, op_abs) X(Square, "square", 1, op_square)             \
  X(Sqrt, "sqrt", 1, op_sqrt) X(Exp, "exp", 1, op_exp) X(Log, "log", 1, op_log)                   \
  X(Tanh, "tanh", 1, op_tanh) X(Sigmoid, "sigmoid", 1, op_sigmoid) X(Relu, "relu", 1, op_relu)    \
  X(Softrelu, "softrelu", 1, op_softrelu) X(Softsign, "softsign", 1, op_softsign)

#define KILN_FUSED_MATH(FN, T, SFX)                                                                         \
  FN T op_add(T a, T b, T) { return a + b; }                                                              \
  FN T op_sub(T a, T b, T) { return a - b; }                                                              \
  FN T op_mul(T a, T b, T) { return a * b; }                                                              \
  FN T op_div(T a, T b, T) { return a / b; }                                                              \
  FN T op_pow(T a, T b, T) { return ::pow##SFX(a, b); }                                                     \
  FN T op_max(T a, T b, T) { return (a > b || a != a) ? a : b; }                                          \
  FN T op_min(T a, T b, T) { return (a < b || a != a) ? a : b; }                                          \
  FN T op_eq(T a, T b, T) { return a == b ? T(1) : T(0); }                                                \
  FN T op_ne(T a, T b, T) { return a != b ? T(1) : T(0); }                                                \
  FN T op_gt(T a, T b, T) { return a > b ? T(1) : T(0); }                                                 \
  FN T op_ge(T a, T b, T) { return a >= b ? T(1) : T(0); }                                                \
  FN T op_lt(T a, T b, T) { return a < b ? T(1) : T(0); }                                                 \
  FN T op_le(T a, T b, T) { return a <= b ? T(1) : T(0); }                                                \
  FN T op_where(T c, T x, T y) { return c != T(0) ? x : y; }                                              \
  FN T op_neg(T a, T, T) { return -a; }                                                                   \
  FN T op_abs(T a, T, T) { return ::fabs##SFX(a); }                                                         \
  FN T op_square(T a, T, T) { return a * a; }                                                             \
  FN T op_sqrt(T a, T, T) { return ::sqrt##SFX(a); }                                                        \
  FN T op_exp(T a, T, T) { return ::exp##SFX(a); }                                                          \
  FN T op_log(T a, T, T) { return ::log##SFX(a); }                                                          \
  FN T op_tanh(T a, T, T) { return ::tanh##SFX(a); }                                                        \
  FN T op_sigmoid(T a, T, T) {                                                                            \
    T e = ::exp##SFX(-::fabs##SFX(a));                                                                        \
    T s = T(1) / (T(1) + e);                                                                              \
    return a >= T(0) ? s : (a != a ? a : e * s);                                                          \
  }                                                                                                       \
  FN T op_relu(T a, T, T) { return a > T(0) ? a : T(0); }                                                 \
  FN T op_softrelu(T a, T, T) { return (a > T(0) ? a : T(0)) + ::log1p##SFX(::exp##SFX(-::fabs##SFX(a))); }    \
  FN T op_softsign(T a, T, T) { return a / (T(1) + ::fabs##SFX(a)); }
// clang-format on

// The scalar math of the unary ops that are not fused opcodes (trigonometric,
// hyperbolic, rounding, sign) and of floating-point mod/fmod: one function
// each, `FN T op_<name>(T a)` or `(T a, T b)`, expanded for host C++ (the CPU
// kernels' scalar forms, constant folding) and for nvcc (the CUDA elementwise
// kernels). Not part of kFusedMathSource: these ops do not fuse. Same rules for the body as
// KILN_FUSED_MATH. Semantics: round is half away from zero, rint half to even
// (the default rounding mode); sign keeps +-0 and NaN; mod's result has the
// divisor's sign (NumPy's mod, zero as +-0 after the divisor), fmod the
// dividend's (C's fmod); both give NaN for a zero divisor.
// clang-format off
#define KILN_UNARY_MATH(FN, T, SFX)                                                                         \
  FN T op_sin(T a) { return ::sin##SFX(a); }                                                              \
  FN T op_cos(T a) { return ::cos##SFX(a); }                                                              \
  FN T op_tan(T a) { return ::tan##SFX(a); }                                                              \
  FN T op_arcsin(T a) { return ::asin##SFX(a); }                                                          \
  FN T op_arccos(T a) { return ::acos##SFX(a); }                                                          \
  FN T op_arctan(T a) { return ::atan##SFX(a); }                                                          \
  FN T op_sinh(T a) { return ::sinh##SFX(a); }                                                            \
  FN T op_cosh(T a) { return ::cosh##SFX(a); }                                                            \
  FN T op_arcsinh(T a) { return ::asinh##SFX(a); }                                                        \
  FN T op_arccosh(T a) { return ::acosh##SFX(a); }                                                        \
  FN T op_arctanh(T a) { return ::atanh##SFX(a); }                                                        \
  FN T op_round(T a) { return ::round##SFX(a); }                                                          \
  FN T op_rint(T a) { return ::rint##SFX(a); }                                                            \
  FN T op_ceil(T a) { return ::ceil##SFX(a); }                                                            \
  FN T op_floor(T a) { return ::floor##SFX(a); }                                                          \
  FN T op_sign(T a) { return a > T(0) ? T(1) : (a < T(0) ? T(-1) : a); }                                  \
  FN T op_fmod(T a, T b) { return ::fmod##SFX(a, b); }                                                    \
  FN T op_mod(T a, T b) {                                                                                 \
    T r = ::fmod##SFX(a, b);                                                                              \
    if (r != T(0)) return (r < T(0)) != (b < T(0)) ? r + b : r;                                           \
    return r == r ? ::copysign##SFX(T(0), b) : r;                                                         \
  }
// clang-format on

namespace kiln {

enum class FusedOpcode : uint8_t {
#define KILN_X(id, name, arity, fn) k##id,
  KILN_FUSED_OPCODES(KILN_X)
#undef KILN_X
};

namespace math {

KILN_FUSED_MATH(KILN_FUSED_MATH_FN, float, f)
KILN_FUSED_MATH(KILN_FUSED_MATH_FN, double, )
KILN_UNARY_MATH(KILN_FUSED_MATH_FN, float, f)
KILN_UNARY_MATH(KILN_FUSED_MATH_FN, double, )

// Integer mod (the divisor's sign) and fmod (the dividend's sign), as the
// floating-point forms; a zero divisor gives 0 and so does a divisor of -1
// (whose quotient may overflow).
template <typename T>
KILN_FUSED_MATH_FN T int_fmod(T a, T b) {
  if (b == T(0)) return T(0);
  if constexpr (T(-1) < T(0)) {
    if (b == T(-1)) return T(0);
  }
  return static_cast<T>(a % b);
}
template <typename T>
KILN_FUSED_MATH_FN T int_mod(T a, T b) {
  T r = int_fmod(a, b);
  if constexpr (T(-1) < T(0)) {
    if (r != T(0) && ((r < T(0)) != (b < T(0)))) r = static_cast<T>(r + b);
  }
  return r;
}

// op(a, b, c) by opcode; T is float or double.
template <typename T>
KILN_FUSED_MATH_FN T fused_eval(FusedOpcode op, T a, T b, T c) {
  switch (op) {
#define KILN_X(id, name, arity, fn) \
  case FusedOpcode::k##id:          \
    return fn(a, b, c);
    KILN_FUSED_OPCODES(KILN_X)
#undef KILN_X
  }
  return a;
}

#if !defined(__CUDACC__)
#define KILN_FUSED_STR_(...) #__VA_ARGS__
#define KILN_FUSED_STR(...) KILN_FUSED_STR_(__VA_ARGS__)
// The float functions as CUDA source, for NVRTC: define KILN_FUSED_DEVICE_FN
// before it and enclose it in `namespace kiln { namespace math { ... } }`.
inline constexpr const char kFusedMathSource[] = KILN_FUSED_STR(KILN_FUSED_MATH(KILN_FUSED_DEVICE_FN, float, f));
#undef KILN_FUSED_STR
#undef KILN_FUSED_STR_
#endif

}  // namespace math
}  // namespace kiln
