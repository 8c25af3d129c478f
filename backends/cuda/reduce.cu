// Reductions over axes (sum, mean, max, min, prod, L1/L2 norm, argmax/argmin).
//
// Many outputs (or short reductions, or arg reductions): one block per
// output element, each thread strides over the reduced elements, then a
// shared-memory tree combines the block.
//
// Few outputs with long reductions (a conv bias gradient: sum over (0, 2, 3)
// of N x C x H x W, C outputs of N*H*W each), when the reduced axes fold into
// at most two (rows x cols with strides): two passes, so the whole GPU reads.
// A grid of (output, chunk) blocks writes each chunk's partial result to the
// workspace (float4 loads when the rows are contiguous and 16-byte aligned),
// then one warp per output combines the partials and applies the final step
// (mean's division, L2's square root).
//
// x float32, float16 or bfloat16 (half_io.cuh; 16-bit rows read as 16-byte
// packs of 8), accumulated in float32; the result rounded once to y's dtype.
#include <cfloat>

#include "backends/cuda/half_io.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/row_walk.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float identity_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: case ReduceOp::kArgmax: return -INFINITY;
    case ReduceOp::kMin: case ReduceOp::kArgmin: return INFINITY;
    case ReduceOp::kProd: return 1.0f;
    default: return 0.0f;
  }
}

__device__ __forceinline__ float combine(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::kMax: return (a > b || a != a) ? a : b;
    case ReduceOp::kMin: return (a < b || a != a) ? a : b;
    case ReduceOp::kProd: return a * b;
    default: return a + b;
  }
}

__device__ __forceinline__ float prepare(ReduceOp op, float v) {
  if (op == ReduceOp::kNormL1) return fabsf(v);
  if (op == ReduceOp::kNormL2) return v * v;
  return v;
}

template <typename T>
__global__ void reduce_kernel(ReduceOp op, const T* __restrict__ x, void* __restrict__ y, int y_dtype, ReduceIndex ix) {
  __shared__ float values[kThreads];
  __shared__ int64_t positions[kThreads];
  const bool arg = op == ReduceOp::kArgmax || op == ReduceOp::kArgmin;
  for (int64_t o = blockIdx.x; o < ix.outputs; o += gridDim.x) {
    int64_t base = 0, rest = o;
    for (int d = ix.outer_ndim - 1; d >= 0; --d) {
      base += (rest % ix.outer_shape[d]) * ix.outer_stride[d];
      rest /= ix.outer_shape[d];
    }
    float acc = identity_of(op);
    int64_t pos = ix.count;  // "none yet": larger than any index
    for (int64_t k = threadIdx.x; k < ix.count; k += blockDim.x) {
      int64_t off = base, r = k;
      for (int d = ix.inner_ndim - 1; d >= 0; --d) {
        off += (r % ix.inner_shape[d]) * ix.inner_stride[d];
        r /= ix.inner_shape[d];
      }
      float v = prepare(op, load_f32(x[off]));
      if (arg) {
        bool better = op == ReduceOp::kArgmax ? (v > acc || (v != v && acc == acc)) : (v < acc || (v != v && acc == acc));
        if (pos == ix.count || better) {
          if (pos == ix.count || better) {
            acc = v;
            pos = k;
          }
        }
      } else {
        acc = combine(op, acc, v);
      }
    }
    values[threadIdx.x] = acc;
    positions[threadIdx.x] = pos;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) {
        float a = values[threadIdx.x], b = values[threadIdx.x + half];
        if (arg) {
          int64_t pa = positions[threadIdx.x], pb = positions[threadIdx.x + half];
          bool take_b;
          if (pb == ix.count) take_b = false;
          else if (pa == ix.count) take_b = true;
          else if (a != a) take_b = b != b && pb < pa;  // first NaN wins
          else if (b != b) take_b = true;
          else if (a == b) take_b = pb < pa;  // first occurrence wins
          else take_b = op == ReduceOp::kArgmax ? b > a : b < a;
          if (take_b) {
            values[threadIdx.x] = b;
            positions[threadIdx.x] = pb;
          }
        } else {
          values[threadIdx.x] = combine(op, a, b);
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      float r = values[0];
      if (op == ReduceOp::kMean) r = ix.count > 0 ? r / static_cast<float>(ix.count) : NAN;
      if (op == ReduceOp::kNormL2) r = sqrtf(r);
      if (arg) r = static_cast<float>(positions[0] == ix.count ? 0 : positions[0]);
      store_f32_dyn(y, y_dtype, o, r);
    }
    __syncthreads();
  }
}

// ---- two passes for few, long reductions

constexpr int kWarps = kThreads / 32;
constexpr int64_t kTargetBlocks = 2048;         // a few waves of 256 threads on 132 SMs
constexpr int64_t kMinPerBlock = 4 * kThreads;  // items per (output, chunk) block

// The reduced elements as rows x cols (in items of `vec` elements: 16-byte
// packs, or single elements) with strides.
struct Plan {
  bool two_pass = false;
  int vec = 1;
  int64_t cols = 1, row_stride = 0, col_stride = 1, n = 0;  // n = rows * cols items per output
  ChunkSplit split;
};

bool is_arg(ReduceOp op) { return op == ReduceOp::kArgmax || op == ReduceOp::kArgmin; }

Plan make_plan(ReduceOp op, const ReduceIndex& ix, int vec) {
  Plan p;
  if (is_arg(op) || ix.inner_ndim < 1 || ix.inner_ndim > 2 || ix.count <= 0) return p;
  int64_t rows = 1;
  if (ix.inner_ndim == 2) {
    rows = ix.inner_shape[0];
    p.row_stride = ix.inner_stride[0];
  }
  p.cols = ix.inner_shape[ix.inner_ndim - 1];
  p.col_stride = ix.inner_stride[ix.inner_ndim - 1];
  if (vec > 1) {
    // Whole rows of 16-byte packs at 16-byte aligned offsets from every output's base.
    bool ok = p.col_stride == 1 && p.cols % vec == 0 && p.row_stride % vec == 0;
    for (int d = 0; d < ix.outer_ndim; ++d) ok = ok && ix.outer_stride[d] % vec == 0;
    if (!ok) return make_plan(op, ix, 1);
    p.vec = vec;
    p.cols /= vec;
    p.row_stride /= vec;
  }
  p.n = rows * p.cols;
  int64_t per_output = (kTargetBlocks + ix.outputs - 1) / ix.outputs;
  p.split = split_chunks(p.n, per_output < 65535 ? per_output : 65535, kMinPerBlock);
  p.two_pass = p.split.chunks >= 2;
  return p;
}

__device__ __forceinline__ float warp_combine(ReduceOp op, float v) {
  for (int d = 16; d > 0; d /= 2) v = combine(op, v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}

// partials[o][chunk]: chunk blockIdx.y of output blockIdx.x, `prepare`d and
// combined; items are 16-byte packs (Pack<T>) when kPacked, else elements.
template <typename T, bool kPacked>
__global__ void partial_kernel(ReduceOp op, const T* __restrict__ x, float* __restrict__ partials, ReduceIndex ix,
                               Plan p) {
  using P = Pack<T>;
  constexpr int kVec = kPacked ? P::kN : 1;
  __shared__ float warp_values[kWarps];
  const int64_t o = blockIdx.x;
  int64_t base = 0, rest = o;
  for (int d = ix.outer_ndim - 1; d >= 0; --d) {
    base += (rest % ix.outer_shape[d]) * ix.outer_stride[d];
    rest /= ix.outer_shape[d];
  }
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * p.split.len;
  const int64_t end = begin + p.split.len < p.n ? begin + p.split.len : p.n;
  float acc = identity_of(op);
  for_each_in_range(begin, end, p.cols, p.row_stride, p.col_stride, base / kVec, [&](int64_t i) {
    if constexpr (kPacked) {
      P v;
      v.load(x, i);
      float pack = identity_of(op);
#pragma unroll
      for (int e = 0; e < P::kN; ++e) pack = combine(op, pack, prepare(op, v.get(e)));
      acc = combine(op, acc, pack);
    } else {
      acc = combine(op, acc, prepare(op, load_f32(x[i])));
    }
  });
  acc = warp_combine(op, acc);
  if (threadIdx.x % 32 == 0) warp_values[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) acc = combine(op, acc, warp_values[w]);
    partials[o * gridDim.y + blockIdx.y] = acc;
  }
}

// One warp per output: combines its `chunks` partials, then mean's division or L2's root.
__global__ void combine_kernel(ReduceOp op, const float* __restrict__ partials, int64_t chunks,
                               void* __restrict__ y, int y_dtype, int64_t outputs, int64_t count) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (o >= outputs) return;  // the whole warp: o depends on the warp only
  float acc = identity_of(op);
  for (int64_t j = lane; j < chunks; j += 32) acc = combine(op, acc, partials[o * chunks + j]);
  acc = warp_combine(op, acc);
  if (lane == 0) {
    if (op == ReduceOp::kMean) acc = acc / static_cast<float>(count);
    if (op == ReduceOp::kNormL2) acc = sqrtf(acc);
    store_f32_dyn(y, y_dtype, o, acc);
  }
}

size_t partials_bytes(const ReduceIndex& ix, const Plan& p) {
  return p.two_pass ? static_cast<size_t>(ix.outputs * p.split.chunks) * sizeof(float) : 0;
}

}  // namespace

size_t reduce_workspace_bytes(ReduceOp op, const ReduceIndex& index) {
  if (index.outputs == 0) return 0;
  // Any plan (the dtype's pack width and x's alignment pick one at launch).
  size_t bytes = 0;
  for (int vec : {1, 4, 8}) {
    const size_t b = partials_bytes(index, make_plan(op, index, vec));
    bytes = b > bytes ? b : bytes;
  }
  return bytes;
}

cudaError_t launch_reduce(ReduceOp op, int dtype, const void* x, void* y, int y_dtype, const ReduceIndex& index,
                          void* workspace, cudaStream_t s) {
  if (index.outputs == 0) return cudaSuccess;
  if (y_dtype != kDtypeFloat32 && y_dtype != dtype) return cudaErrorInvalidValue;
  cudaError_t first = cudaSuccess;  // the first pass's launch status
  cudaError_t e = dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const Plan p = make_plan(op, index, (reinterpret_cast<uintptr_t>(x) & 15) == 0 ? Pack<T>::kN : 1);
    if (p.two_pass) {
      float* partials = static_cast<float*>(workspace);
      dim3 grid(static_cast<unsigned>(index.outputs), static_cast<unsigned>(p.split.chunks));
      if (p.vec > 1) partial_kernel<T, true><<<grid, kThreads, 0, s>>>(op, xt, partials, index, p);
      else partial_kernel<T, false><<<grid, kThreads, 0, s>>>(op, xt, partials, index, p);
      if ((first = cudaGetLastError()) != cudaSuccess) return;
      unsigned blocks = static_cast<unsigned>((index.outputs + kWarps - 1) / kWarps);
      combine_kernel<<<blocks, kThreads, 0, s>>>(op, partials, p.split.chunks, y, y_dtype, index.outputs, index.count);
      return;
    }
    int64_t blocks = index.outputs < 65535 * 8 ? index.outputs : 65535 * 8;
    reduce_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(op, xt, y, y_dtype, index);
  });
  if (e != cudaSuccess) return e;
  return first != cudaSuccess ? first : cudaGetLastError();
}

}  // namespace kiln::cuda
