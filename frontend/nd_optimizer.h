// nd functions of the optimizer family: fused parameter updates that write
// the weight (and the optimizer state) in place. The options are the ops'
// attribute structs (ir/ops/optimizer.h has the formulas, MXNet's).
//
//   nd::sgd_update(w, w.grad(), {.lr = 0.1, .wd = 1e-4});
//   nd::sgd_mom_update(w, w.grad(), mom, {.lr = 0.1, .momentum = 0.9});
//   // Adam: the op applies no bias correction; fold it into lr at step t (from 1):
//   double lr_t = lr * std::sqrt(1 - std::pow(beta2, t)) / (1 - std::pow(beta1, t));
//   nd::adam_update(w, w.grad(), mean, var, {.lr = lr_t});
//   // AdamW: decoupled decay, w -= eta * (lr * mean / (sqrt(var) + epsilon) + wd * w):
//   nd::adamw_update(w, w.grad(), mean, var, {.lr = bias_correction, .eta = lr, .wd = 0.01});
//
// Each call queues one kernel that reads grad and writes weight and state;
// it returns at once. Weight, grad and state must share one shape and dtype
// (float32 or float64) and device: ShapeError/TypeError/DeviceError at the call.
// Updates are not recorded by autograd.
#pragma once

#include "frontend/ndarray.h"
#include "ir/ops/optimizer.h"

namespace kiln::nd {

void sgd_update(const NDArray& weight, const NDArray& grad, const SgdAttrs& options);
void sgd_mom_update(const NDArray& weight, const NDArray& grad, const NDArray& mom, const SgdMomAttrs& options);
void nag_mom_update(const NDArray& weight, const NDArray& grad, const NDArray& mom, const NagMomAttrs& options);
void adam_update(const NDArray& weight, const NDArray& grad, const NDArray& mean, const NDArray& var,
                 const AdamAttrs& options);
void adamw_update(const NDArray& weight, const NDArray& grad, const NDArray& mean, const NDArray& var,
                  const AdamWAttrs& options);

}  // namespace kiln::nd
