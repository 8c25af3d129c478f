// Attributes of the optimizer family: fused, in-place parameter updates with
// MXNet's names, defaults and formulas.
//
//   // weight -= lr * (rescale_grad * grad + wd * weight), in one pass over memory:
//   invoke(OpId::kSgdUpdate, {weight, grad}, OpAttrs::make(SgdAttrs{.lr = 0.1}), {.out = {&weight, 1}});
//   // or, from the frontend: nd::sgd_update(weight, grad, SgdAttrs{.lr = 0.1});
//
// Every op has one output, the new weight; callers pass the weight itself as
// `out` (InvokeOptions::out) so the update is in place. The state inputs
// (momentum, Adam's mean and var) are listed in OpDef::mutate_inputs and
// updated in place by the same kernel. Weight, grad and states must share
// one shape and dtype (float32 or float64). None is differentiable.
//
// Per element, with g = rescale_grad * grad and clip(v) = max(-c, min(c, v))
// when clip_gradient c >= 0 (identity when c < 0):
//   sgd_update:      w = (1 - lr*wd) * w - lr * clip(g)
//   sgd_mom_update:  mom = momentum*mom - lr*wd*w - lr*clip(g);  w = w + mom
//   nag_mom_update:  d = clip(g) + wd*w;  mom = momentum*mom - lr*d;  w = w + momentum*mom - lr*d
//   adam_update:     d = clip(g + wd*w);  mean = beta1*mean + (1-beta1)*d;
//                    var = beta2*var + (1-beta2)*d*d;  w = w - lr * mean / (sqrt(var) + epsilon)
//   adamw_update:    d = clip(g);  mean, var as adam_update;
//                    w = w - eta * (lr * mean / (sqrt(var) + epsilon) + wd * w)
//                    (decoupled weight decay: wd never enters the moments)
//
// adam_update applies NO bias correction (as in MXNet, whose Python Adam
// optimizer folds it into the learning rate). A trainer must pass, at step t
// (from 1), lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t). adamw_update
// neither (as MXNet's): optim::AdamW passes eta = the scheduled learning rate,
// lr = sqrt(1 - beta2^t) / (1 - beta1^t) and epsilon * sqrt(1 - beta2^t),
// which is PyTorch's AdamW step exactly. MXNet's adamw_update reads
// rescale_grad as a fifth, array input; here it is an attribute like every
// other update op's (optimizer ops are never exported).
//
// Hyperparameters are doubles here (MXNet's are float): float32 kernels
// compute in float, float64 kernels in double.
//
// `lazy_update` only matters for sparse gradients in MXNet; it is accepted
// and ignored (gradients here are dense).
#pragma once

#include "ir/attrs.h"

namespace kiln {

// sgd_update
struct SgdAttrs {
  double lr = 0;
  double wd = 0;
  double rescale_grad = 1;
  double clip_gradient = -1;
  bool lazy_update = true;
  template <typename V>
  void fields(V& v) {
    v("lr", lr, kRequired);
    v("wd", wd);
    v("rescale_grad", rescale_grad);
    v("clip_gradient", clip_gradient);
    v("lazy_update", lazy_update);
  }
};

// sgd_mom_update(weight, grad, mom)
struct SgdMomAttrs {
  double lr = 0;
  double momentum = 0;
  double wd = 0;
  double rescale_grad = 1;
  double clip_gradient = -1;
  bool lazy_update = true;
  template <typename V>
  void fields(V& v) {
    v("lr", lr, kRequired);
    v("momentum", momentum);
    v("wd", wd);
    v("rescale_grad", rescale_grad);
    v("clip_gradient", clip_gradient);
    v("lazy_update", lazy_update);
  }
};

// nag_mom_update(weight, grad, mom)
struct NagMomAttrs {
  double lr = 0;
  double momentum = 0;
  double wd = 0;
  double rescale_grad = 1;
  double clip_gradient = -1;
  template <typename V>
  void fields(V& v) {
    v("lr", lr, kRequired);
    v("momentum", momentum);
    v("wd", wd);
    v("rescale_grad", rescale_grad);
    v("clip_gradient", clip_gradient);
  }
};

// adam_update(weight, grad, mean, var)
struct AdamAttrs {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double wd = 0;
  double rescale_grad = 1;
  double clip_gradient = -1;
  bool lazy_update = true;
  template <typename V>
  void fields(V& v) {
    v("lr", lr, kRequired);
    v("beta1", beta1);
    v("beta2", beta2);
    v("epsilon", epsilon);
    v("wd", wd);
    v("rescale_grad", rescale_grad);
    v("clip_gradient", clip_gradient);
    v("lazy_update", lazy_update);
  }
};

// adamw_update(weight, grad, mean, var)
struct AdamWAttrs {
  double lr = 0;
  double eta = 1;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double wd = 0;
  double rescale_grad = 1;
  double clip_gradient = -1;
  template <typename V>
  void fields(V& v) {
    v("lr", lr, kRequired);
    v("eta", eta, kRequired);
    v("beta1", beta1);
    v("beta2", beta2);
    v("epsilon", epsilon);
    v("wd", wd);
    v("rescale_grad", rescale_grad);
    v("clip_gradient", clip_gradient);
  }
};

}  // namespace kiln
