// Device functions of the elementwise ops, shared by elemwise.cu and fused.cu
// (the fused-program interpreter), so both compute exactly the same values.
#pragma once

#include "backends/cuda/kernels.h"
#include "ir/ops/gelu_tanh.h"

namespace kiln::cuda {

__device__ __forceinline__ float apply_unary(UnaryOp op, float v, float p0, float p1) {
  switch (op) {
    case UnaryOp::kExp: return expf(v);
    case UnaryOp::kLog: return logf(v);
    case UnaryOp::kSqrt: return sqrtf(v);
    case UnaryOp::kSquare: return v * v;
    case UnaryOp::kTanh: return tanhf(v);
    case UnaryOp::kSigmoid: {
      float e = expf(-fabsf(v));
      float sg = 1.0f / (1.0f + e);
      return v >= 0.0f ? sg : (v != v ? v : e * sg);
    }
    case UnaryOp::kRelu: return v > 0.0f ? v : 0.0f;
    case UnaryOp::kAbs: return fabsf(v);
    case UnaryOp::kNegative: return -v;
    case UnaryOp::kClip: return fminf(fmaxf(v, p0), p1);
    case UnaryOp::kSoftrelu: return fmaxf(v, 0.0f) + log1pf(expf(-fabsf(v)));
    case UnaryOp::kSoftsign: return v / (1.0f + fabsf(v));
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
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kPower: return powf(a, b);
    case BinaryOp::kMaximum: return (a > b || a != a) ? a : b;
    case BinaryOp::kMinimum: return (a < b || a != a) ? a : b;
    case BinaryOp::kEqual: return a == b ? 1.0f : 0.0f;
    case BinaryOp::kNotEqual: return a != b ? 1.0f : 0.0f;
    case BinaryOp::kGreater: return a > b ? 1.0f : 0.0f;
    case BinaryOp::kGreaterEqual: return a >= b ? 1.0f : 0.0f;
    case BinaryOp::kLesser: return a < b ? 1.0f : 0.0f;
    case BinaryOp::kLesserEqual: return a <= b ? 1.0f : 0.0f;
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
