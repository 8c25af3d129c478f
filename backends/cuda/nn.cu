// Softmax, log-softmax (forward and backward) and the fused softmax
// cross-entropy: one thread per row of [outer, n, inner] (the row's elements
// are `inner` apart). Rows of the chapter's models are short (10 classes),
// so a thread per row keeps every thread busy; long rows (n in the
// thousands) would want a block per row (README.md).
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void softmax_kernel(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, float inv_t,
                               bool log) {
  const int64_t rows = outer * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    float m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = fmaxf(m, x[base + j * inner] * inv_t);
    double total = 0;
    for (int64_t j = 0; j < n; ++j) total += expf(x[base + j * inner] * inv_t - m);
    const float lse = m + static_cast<float>(::log(total));
    for (int64_t j = 0; j < n; ++j) {
      float v = x[base + j * inner] * inv_t;
      y[base + j * inner] = log ? v - lse : expf(v - lse);
    }
  }
}

__global__ void softmax_backward_kernel(const float* dy, const float* y, float* dx, int64_t outer, int64_t n,
                                        int64_t inner, float inv_t, bool log) {
  const int64_t rows = outer * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    double dot = 0;
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = base + j * inner;
      dot += log ? dy[i] : dy[i] * y[i];
    }
    const float d = static_cast<float>(dot);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = base + j * inner;
      dx[i] = inv_t * (log ? dy[i] - expf(y[i]) * d : y[i] * (dy[i] - d));
    }
  }
}

__global__ void cross_entropy_kernel(const float* x, const float* label, const float* dy, float* out, int64_t rows,
                                     int64_t classes, int* bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const float* xr = x + r * classes;
    // Truncated toward zero, NaN read as 0: as the CPU kernel reads labels.
    const float lf = label[r];
    const int64_t k = lf != lf ? 0 : (lf <= -1.0f || lf >= static_cast<float>(classes)) ? -1 : static_cast<int64_t>(lf);
    if (k < 0 || k >= classes) {
      if (atomicCAS(bad, -1, static_cast<int>(r)) == -1) bad[1] = __float_as_int(lf);
      if (dy == nullptr) out[r] = NAN;
      continue;
    }
    float m = -INFINITY;
    for (int64_t c = 0; c < classes; ++c) m = fmaxf(m, xr[c]);
    double total = 0;
    for (int64_t c = 0; c < classes; ++c) total += expf(xr[c] - m);
    if (dy == nullptr) {
      out[r] = static_cast<float>(static_cast<double>(m) + ::log(total) - static_cast<double>(xr[k]));
      continue;
    }
    const float g = dy[r];
    const float scale = static_cast<float>(static_cast<double>(g) / total);
    float* o = out + r * classes;
    for (int64_t c = 0; c < classes; ++c) o[c] = expf(xr[c] - m) * scale - (c == k ? g : 0.0f);
  }
}

int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

}  // namespace

cudaError_t launch_softmax(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, float inv_temperature,
                           bool log, cudaStream_t s) {
  if (outer * inner == 0) return cudaSuccess;
  softmax_kernel<<<blocks_for(outer * inner), kThreads, 0, s>>>(x, y, outer, n, inner, inv_temperature, log);
  return cudaGetLastError();
}

cudaError_t launch_softmax_backward(const float* dy, const float* y, float* dx, int64_t outer, int64_t n,
                                    int64_t inner, float inv_temperature, bool log, cudaStream_t s) {
  if (outer * inner == 0) return cudaSuccess;
  softmax_backward_kernel<<<blocks_for(outer * inner), kThreads, 0, s>>>(dy, y, dx, outer, n, inner, inv_temperature,
                                                                         log);
  return cudaGetLastError();
}

cudaError_t launch_softmax_cross_entropy(const float* x, const float* label, const float* dy, float* out,
                                         int64_t rows, int64_t classes, int* bad_label_row, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  cross_entropy_kernel<<<blocks_for(rows), kThreads, 0, s>>>(x, label, dy, out, rows, classes, bad_label_row);
  return cudaGetLastError();
}

}  // namespace kiln::cuda
