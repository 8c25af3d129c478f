// Softmax, log-softmax (forward and backward) and the fused softmax
// cross-entropy: one thread per row of [outer, n, inner] (the row's elements
// are `inner` apart). Rows of the chapter's models are short (10 classes),
// so a thread per row keeps every thread busy; long rows (n in the
// thousands) would want a block per row (README.md). Data float32, float16
// or bfloat16 (half_io.cuh), computed in float32 with sums in double.
#include "backends/cuda/half_io.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void softmax_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, float inv_t, bool log) {
  const int64_t rows = outer * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    float m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = fmaxf(m, load_f32(x[base + j * inner]) * inv_t);
    double total = 0;
    for (int64_t j = 0; j < n; ++j) total += expf(load_f32(x[base + j * inner]) * inv_t - m);
    const float lse = m + static_cast<float>(::log(total));
    for (int64_t j = 0; j < n; ++j) {
      float v = load_f32(x[base + j * inner]) * inv_t;
      y[base + j * inner] = store_as<T>(log ? v - lse : expf(v - lse));
    }
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* dy, const T* y, T* dx, int64_t outer, int64_t n, int64_t inner,
                                        float inv_t, bool log) {
  const int64_t rows = outer * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    double dot = 0;
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = base + j * inner;
      const float g = load_f32(dy[i]);
      dot += log ? g : g * load_f32(y[i]);
    }
    const float d = static_cast<float>(dot);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = base + j * inner;
      const float g = load_f32(dy[i]), v = load_f32(y[i]);
      dx[i] = store_as<T>(inv_t * (log ? g - expf(v) * d : v * (g - d)));
    }
  }
}

template <typename T>
__global__ void cross_entropy_kernel(const T* x, const float* label, const T* dy, T* out, int64_t rows,
                                     int64_t classes, int* bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const T* xr = x + r * classes;
    // Truncated toward zero, NaN read as 0: as the CPU kernel reads labels.
    const float lf = label[r];
    const int64_t k = lf != lf ? 0 : (lf <= -1.0f || lf >= static_cast<float>(classes)) ? -1 : static_cast<int64_t>(lf);
    if (k < 0 || k >= classes) {
      if (atomicCAS(bad, -1, static_cast<int>(r)) == -1) bad[1] = __float_as_int(lf);
      if (dy == nullptr) out[r] = store_as<T>(NAN);
      continue;
    }
    float m = -INFINITY;
    for (int64_t c = 0; c < classes; ++c) m = fmaxf(m, load_f32(xr[c]));
    double total = 0;
    for (int64_t c = 0; c < classes; ++c) total += expf(load_f32(xr[c]) - m);
    if (dy == nullptr) {
      out[r] = store_as<T>(static_cast<float>(static_cast<double>(m) + ::log(total) -
                                              static_cast<double>(load_f32(xr[k]))));
      continue;
    }
    const float g = load_f32(dy[r]);
    const float scale = static_cast<float>(static_cast<double>(g) / total);
    T* o = out + r * classes;
    for (int64_t c = 0; c < classes; ++c) o[c] = store_as<T>(expf(load_f32(xr[c]) - m) * scale - (c == k ? g : 0.0f));
  }
}

int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

}  // namespace

cudaError_t launch_softmax(int dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                           float inv_temperature, bool log, cudaStream_t s) {
  if (outer * inner == 0) return cudaSuccess;
  cudaError_t e = dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_kernel<T><<<blocks_for(outer * inner), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                     outer, n, inner, inv_temperature, log);
  });
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t launch_softmax_backward(int dtype, const void* dy, const void* y, void* dx, int64_t outer, int64_t n,
                                    int64_t inner, float inv_temperature, bool log, cudaStream_t s) {
  if (outer * inner == 0) return cudaSuccess;
  cudaError_t e = dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<blocks_for(outer * inner), kThreads, 0, s>>>(
        static_cast<const T*>(dy), static_cast<const T*>(y), static_cast<T*>(dx), outer, n, inner, inv_temperature,
        log);
  });
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t launch_softmax_cross_entropy(int dtype, const void* x, const float* label, const void* dy, void* out,
                                         int64_t rows, int64_t classes, int* bad_label_row, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  cudaError_t e = dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_kernel<T><<<blocks_for(rows), kThreads, 0, s>>>(static_cast<const T*>(x), label,
                                                                  static_cast<const T*>(dy), static_cast<T*>(out),
                                                                  rows, classes, bad_label_row);
  });
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace kiln::cuda
