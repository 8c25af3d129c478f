// Device functions of the elementwise ops for elemwise.cu. The ops that are
// fused opcodes call the one scalar source (ir/ops/elemwise_math.h), which
// the fused interpreter (fused.cu) and the NVRTC-generated fused kernels
// (fused_codegen.h) use too; so do the trigonometric, hyperbolic, rounding,
// sign and mod ops (its KILN_UNARY_MATH functions, shared with the CPU
// kernels); the others (clip, leaky, elu, selu, gelu and the gradients) are
// written here.
#pragma once

#include "backends/cuda/kernels.h"
#include "ir/ops/elemwise_math.h"
#include "ir/ops/gelu_tanh.h"

namespace kiln::cuda {

__device__ __forceinline__ float apply_unary(UnaryOp op, float v, float p0, float p1) {
  switch (op) {
    case UnaryOp::kExp: return math::op_exp(v, 0.0f, 0.0f);
    case UnaryOp::kLog: return math::op_log(v, 0.0f, 0.0f);
    case UnaryOp::kSqrt: return math::op_sqrt(v, 0.0f, 0.0f);
    case UnaryOp::kSquare: return math::op_square(v, 0.0f, 0.0f);
    case UnaryOp::kTanh: return math::op_tanh(v, 0.0f, 0.0f);
    case UnaryOp::kErf: return erff(v);
    case UnaryOp::kSin: return math::op_sin(v);
    case UnaryOp::kCos: return math::op_cos(v);
    case UnaryOp::kTan: return math::op_tan(v);
    case UnaryOp::kArcsin: return math::op_arcsin(v);
    case UnaryOp::kArccos: return math::op_arccos(v);
    case UnaryOp::kArctan: return math::op_arctan(v);
    case UnaryOp::kSinh: return math::op_sinh(v);
    case UnaryOp::kCosh: return math::op_cosh(v);
    case UnaryOp::kArcsinh: return math::op_arcsinh(v);
    case UnaryOp::kArccosh: return math::op_arccosh(v);
    case UnaryOp::kArctanh: return math::op_arctanh(v);
    case UnaryOp::kRound: return math::op_round(v);
    case UnaryOp::kRint: return math::op_rint(v);
    case UnaryOp::kCeil: return math::op_ceil(v);
    case UnaryOp::kFloor: return math::op_floor(v);
    case UnaryOp::kSign: return math::op_sign(v);
    case UnaryOp::kSigmoid: return math::op_sigmoid(v, 0.0f, 0.0f);
    case UnaryOp::kRelu: return math::op_relu(v, 0.0f, 0.0f);
    case UnaryOp::kAbs: return math::op_abs(v, 0.0f, 0.0f);
    case UnaryOp::kNegative: return math::op_neg(v, 0.0f, 0.0f);
    case UnaryOp::kClip: return fminf(fmaxf(v, p0), p1);
    case UnaryOp::kSoftrelu: return math::op_softrelu(v, 0.0f, 0.0f);
    case UnaryOp::kSoftsign: return math::op_softsign(v, 0.0f, 0.0f);
    case UnaryOp::kLeaky: return v > 0.0f ? v : p0 * v;
    case UnaryOp::kElu: return v > 0.0f ? v : p0 * expm1f(v);
    case UnaryOp::kSelu: {
      const float alpha = 1.6732632423543772f, lambda = 1.0507009873554805f;
      return lambda * (v > 0.0f ? v : alpha * expm1f(v));
    }
    case UnaryOp::kGelu: return v * 0.5f * erfcf(-v * 0.70710678118654752f);
    case UnaryOp::kGeluTanh: return gelu_tanh::value(v, tanhf(gelu_tanh::arg(v)));
  }
  return v;
}

__device__ __forceinline__ float apply_binary(BinaryOp op, float a, float b, float p0) {
  switch (op) {
    case BinaryOp::kAdd: return math::op_add(a, b, 0.0f);
    case BinaryOp::kSub: return math::op_sub(a, b, 0.0f);
    case BinaryOp::kMul: return math::op_mul(a, b, 0.0f);
    case BinaryOp::kDiv: return math::op_div(a, b, 0.0f);
    case BinaryOp::kPower: return math::op_pow(a, b, 0.0f);
    case BinaryOp::kMaximum: return math::op_max(a, b, 0.0f);
    case BinaryOp::kMinimum: return math::op_min(a, b, 0.0f);
    case BinaryOp::kEqual: return math::op_eq(a, b, 0.0f);
    case BinaryOp::kNotEqual: return math::op_ne(a, b, 0.0f);
    case BinaryOp::kGreater: return math::op_gt(a, b, 0.0f);
    case BinaryOp::kGreaterEqual: return math::op_ge(a, b, 0.0f);
    case BinaryOp::kLesser: return math::op_lt(a, b, 0.0f);
    case BinaryOp::kLesserEqual: return math::op_le(a, b, 0.0f);
    case BinaryOp::kMod: return math::op_mod(a, b);
    case BinaryOp::kFmod: return math::op_fmod(a, b);
    // a = dy, b = forward output
    case BinaryOp::kReluGrad: return b > 0.0f ? a : 0.0f;
    case BinaryOp::kSigmoidGrad: return a * b * (1.0f - b);
    case BinaryOp::kTanhGrad: return a * (1.0f - b * b);
    case BinaryOp::kSoftreluGrad: return -a * expm1f(-b);
    case BinaryOp::kSoftsignGrad: {
      float t = 1.0f - fabsf(b);
      return a * t * t;
    }
    // a = dy, b = forward input
    case BinaryOp::kLeakyGrad: return b > 0.0f ? a : p0 * a;
    case BinaryOp::kEluGrad: return b > 0.0f ? a : a * p0 * expf(b);
    case BinaryOp::kSeluGrad: {
      const float alpha = 1.6732632423543772f, lambda = 1.0507009873554805f;
      return a * lambda * (b > 0.0f ? 1.0f : alpha * expf(b));
    }
    case BinaryOp::kGeluGrad: {
      float cdf = 0.5f * erfcf(-b * 0.70710678118654752f);
      float pdf = expf(-0.5f * b * b) * 0.39894228040143268f;
      return a * (cdf + b * pdf);
    }
    case BinaryOp::kGeluTanhGrad: return a * gelu_tanh::slope(b, tanhf(gelu_tanh::arg(b)));
  }
  return a;
}

}  // namespace kiln::cuda
