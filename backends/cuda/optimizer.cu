// Fused optimizer updates (ir/ops/optimizer.h has the formulas): one pass over
// weight, gradient and state, in place.
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void update_kernel(UpdateOp op, const float* w_in, const float* grad, float* s0, float* s1, float* w,
                              int64_t n, UpdateParams p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float g = p.rescale_grad * grad[i];
    auto clip = [&](float v) { return p.clip_gradient >= 0 ? fmaxf(-p.clip_gradient, fminf(p.clip_gradient, v)) : v; };
    float wi = w_in[i];
    switch (op) {
      case UpdateOp::kSgd:
        w[i] = (1.0f - p.lr * p.wd) * wi - p.lr * clip(g);
        break;
      case UpdateOp::kSgdMom: {
        float mom = p.momentum * s0[i] - p.lr * p.wd * wi - p.lr * clip(g);
        s0[i] = mom;
        w[i] = wi + mom;
        break;
      }
      case UpdateOp::kNagMom: {
        float d = clip(g) + p.wd * wi;
        float mom = p.momentum * s0[i] - p.lr * d;
        s0[i] = mom;
        w[i] = wi + p.momentum * mom - p.lr * d;
        break;
      }
      case UpdateOp::kAdam: {
        float d = clip(g + p.wd * wi);
        float mean = p.beta1 * s0[i] + (1.0f - p.beta1) * d;
        float var = p.beta2 * s1[i] + (1.0f - p.beta2) * d * d;
        s0[i] = mean;
        s1[i] = var;
        w[i] = wi - p.lr * mean / (sqrtf(var) + p.epsilon);
        break;
      }
      case UpdateOp::kAdamW: {
        float d = clip(g);
        float mean = p.beta1 * s0[i] + (1.0f - p.beta1) * d;
        float var = p.beta2 * s1[i] + (1.0f - p.beta2) * d * d;
        s0[i] = mean;
        s1[i] = var;
        w[i] = wi - p.eta * (p.lr * mean / (sqrtf(var) + p.epsilon) + p.wd * wi);
        break;
      }
    }
  }
}

}  // namespace

cudaError_t launch_update(UpdateOp op, const float* weight_in, const float* grad, float* state0, float* state1,
                          float* weight_out, int64_t n, const UpdateParams& p, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  update_kernel<<<static_cast<int>(blocks > 4096 ? 4096 : blocks), kThreads, 0, s>>>(op, weight_in, grad, state0,
                                                                                   state1, weight_out, n, p);
  return cudaGetLastError();
}

}  // namespace kiln::cuda
