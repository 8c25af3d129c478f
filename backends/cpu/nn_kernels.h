// Internal to the nn family's CPU kernels (backends/cpu/nn_*.cc): the
// per-file registration functions and a float32/float64 dispatch.
//
//   dispatch_float(x.dtype, [&](auto tag) { using T = decltype(tag); ... });
#pragma once

#include "ir/error.h"
#include "ir/ops/nn.h"
#include "runtime/kernel.h"

namespace kiln::cpu {

template <typename Fn>
decltype(auto) dispatch_float(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32:
      return fn(float{});
    case DType::kFloat64:
      return fn(double{});
    default:
      break;
  }
  throw InternalError(fmt::format("internal error: nn kernel reached with dtype {} (inference admits floats only)", t));
}

// y = act(y) in place, float32, float64, float16 or bfloat16 (nn_activation.cc).
void activation_inplace(int threads, ActType act, const TensorView& y);

void register_nn_dense_kernels();       // nn_dense.cc: FullyConnected, Flatten, add_n
void register_nn_activation_kernels();  // nn_activation.cc: Activation, LeakyReLU and their backward ops
void register_nn_dropout_kernels();     // nn_dropout.cc: Dropout
void register_nn_softmax_kernels();     // nn_softmax.cc: softmax, log_softmax, pick, cross-entropy

}  // namespace kiln::cpu
