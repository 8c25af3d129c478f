// Global-norm clipping (Gluon's gluon.utils.clip_global_norm): rescales a set
// of arrays, usually gradients, so that their joint L2 norm is at most
// max_norm, and returns that norm as it was before.
//
//   std::vector<NDArray> grads;
//   for (auto& [name, p] : net.collect_params()) grads.push_back(p.grad());
//   double norm = clip_global_norm(grads, 1.0);    // every grad *= min(1, 1 / (norm + 1e-8))
//
// norm = sqrt(sum over arrays of sum(a^2)), each array's norm computed on its
// own device and summed in double. When norm > max_norm every array is
// multiplied in place by max_norm / (norm + 1e-8) (Gluon's formula); else
// nothing changes. Waits for the arrays' values (the norm is read on the host).
//
// With check_isfinite, a NaN or infinite norm throws ValueError naming the
// norm, the first array with a non-finite norm (its index, or its name when
// `names` has one per array, and its shape) and leaves every array unchanged (Gluon only warns; scaling by NaN would
// wipe out the parameters at the next update). ValueError also for max_norm <= 0. Float arrays only (TypeError
// otherwise); an empty list has norm 0.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "frontend/ndarray.h"

namespace kiln {

double clip_global_norm(std::span<const NDArray> arrays, double max_norm, bool check_isfinite = true,
                        std::span<const std::string> names = {});
inline double clip_global_norm(const std::vector<NDArray>& arrays, double max_norm, bool check_isfinite = true) {
  return clip_global_norm(std::span<const NDArray>(arrays), max_norm, check_isfinite);
}

}  // namespace kiln
