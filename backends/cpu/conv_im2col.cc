// im2col convolution: see conv_im2col.h.
//
// Buffers per chunk of `count` images (P1 = OH x OW positions per image,
// cols = count x P1, CKK = C x kh x kw):
//   col [CKK][cols]  the unfolded input
//   t   [K][cols]    the chunk's output as one matrix: the product writes a
//                    whole matrix, and NCHW keeps each image's [K][P1] block
//                    apart, so t is copied to the user's array.
// With a share of the batch per thread each thread runs all steps alone;
// otherwise the matmuls run on oneDNN's threads and unfolding and the copies
// are split over the same threads.
#include "backends/cpu/conv_im2col.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "backends/cpu/elemwise_kernels.h"
#include "backends/cpu/onednn_util.h"
#include "backends/cpu/parallel.h"

namespace kiln::cpu {
namespace {

namespace dn = onednn;
using dnnl::memory;

// Up to this many input channels the forward runs here.
constexpr int64_t kMaxChannels = 4;
// Bytes of col per chunk and thread: the product reads it right after the
// unfolding wrote it, from L2 (see conv_im2col.h).
constexpr int64_t kColBytes = int64_t{512} << 10;

struct Geometry {
  int64_t ckk, p1, chunk;
  explicit Geometry(const Im2colConv& s)
      : ckk(s.channels * s.kernel_h * s.kernel_w), p1(s.out_height * s.out_width) {
    const int64_t per_image = std::max<int64_t>(1, ckk * p1 * static_cast<int64_t>(sizeof(float)));
    chunk = std::clamp<int64_t>(kColBytes / per_image, 1, std::max<int64_t>(1, s.batch));
  }
  int64_t macs(const Im2colConv& s) const { return s.batch * s.out_channels * p1 * ckk; }
};

// col[r][i * P1 + oy * OW + ox] = x[n0 + i][c][oy sh - pt + ky dh][ox sw - pl + kx dw], 0
// outside, for r = (c, ky, kx). T: float, or a 16-bit float copied as it is.
template <typename T>
void unfold(const Im2colConv& s, const Geometry& g, int threads, const T* x, int64_t n0, int64_t count, T* col) {
  const T zero{};
  const int64_t cols = count * g.p1, plane = s.height * s.width;
  parallel_for(
      threads, g.ckk,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t c = r / (s.kernel_h * s.kernel_w), ky = r / s.kernel_w % s.kernel_h, kx = r % s.kernel_w;
          // Output columns [ox0, ox1) read inside the image.
          const int64_t off_x = kx * s.dilate_w - s.pad_left;
          const int64_t ox0 = std::clamp<int64_t>((-off_x + s.stride_w - 1) / s.stride_w, 0, s.out_width);
          const int64_t ox1 = std::clamp<int64_t>((s.width - off_x + s.stride_w - 1) / s.stride_w, ox0, s.out_width);
          for (int64_t i = 0; i < count; ++i) {
            const T* xs = x + ((n0 + i) * s.channels + c) * plane;
            T* row = col + r * cols + i * g.p1;
            for (int64_t oy = 0; oy < s.out_height; ++oy) {
              T* out = row + oy * s.out_width;
              const int64_t iy = oy * s.stride_h - s.pad_top + ky * s.dilate_h;
              if (iy < 0 || iy >= s.height) {
                std::fill(out, out + s.out_width, zero);
                continue;
              }
              const T* in = xs + iy * s.width;  // input column of output column ox: ox sw + off_x
              std::fill(out, out + ox0, zero);
              if (s.stride_w == 1 && ox1 > ox0) {
                std::memcpy(out + ox0, in + ox0 + off_x, static_cast<size_t>(ox1 - ox0) * sizeof(T));
              } else {
                for (int64_t ox = ox0; ox < ox1; ++ox) out[ox] = in[ox * s.stride_w + off_x];
              }
              std::fill(out + ox1, out + s.out_width, zero);
            }
          }
        }
      },
      1);
}

// y[n0 + i][k][p] = t[k][i * P1 + p] + bias[k] (bias may be null).
void scatter_chunk(const Im2colConv& s, const Geometry& g, int threads, const float* t, const float* bias, int64_t n0,
                   int64_t count, float* y) {
  const int64_t cols = count * g.p1, K = s.out_channels;
  parallel_for(
      threads, count * K,
      [&](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) {
          const int64_t i = u / K, k = u % K;
          const float* tr = t + k * cols + i * g.p1;
          float* yr = y + ((n0 + i) * K + k) * g.p1;
          const float b = bias != nullptr ? bias[k] : 0.0f;
          for (int64_t p = 0; p < g.p1; ++p) yr[p] = tr[p] + b;
        }
      },
      1);
}

// c [m][n] (+)= a [m][k] . b [k][n] as a oneDNN matmul split over `threads`
// threads (1 inside a parallel region): a and b of type `dt`, row-major, b
// given transposed ([n][k] in memory) when `b_transposed`; c float32,
// accumulated into (the sum post-op) when `accumulate`.
void matmul_into(dn::Call& call, int threads, memory::data_type dt, int64_t m, int64_t k, int64_t n, const void* a,
                 const void* b, bool b_transposed, float* c, bool accumulate) {
  std::string key = fmt::format("im2col_matmul|{}|{}|{}|", static_cast<int>(dt), b_transposed, accumulate);
  dn::append_key(key, {m, k, n, threads});
  struct Plan {
    dnnl::matmul prim;
    size_t scratchpad = 0;
    memory::desc a, b, c;
  };
  auto plan = dn::cached<Plan>(key, [&] {
    Plan made{.a = dn::plain_desc({m, k}, dt),
              .b = b_transposed ? memory::desc({k, n}, dt, memory::dims{1, k}) : dn::plain_desc({k, n}, dt),
              .c = dn::plain_desc({m, n})};
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(made.a, made.b, made.c),
                                    dn::post_ops_attr(accumulate, std::nullopt), dn::engine());
    made.prim = dnnl::matmul(pd);
    made.scratchpad = dn::scratchpad_bytes(pd);
    return made;
  });
  call.run(plan->prim, plan->scratchpad,
           {{DNNL_ARG_SRC, call.wrap(plan->a, a)}, {DNNL_ARG_WEIGHTS, call.wrap(plan->b, b)},
            {DNNL_ARG_DST, call.wrap(plan->c, c)}});
  dn::Call::stream().wait();
}

// t [m][n] = a [m][k] . b [k][n] in float32.
void product(dn::Call& call, int threads, int64_t m, int64_t k, int64_t n, const float* a, const float* b, float* t) {
  matmul_into(call, threads, memory::data_type::f32, m, k, n, a, b, false, t, false);
}

std::atomic<bool>& mode_flag() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("KILN_IM2COL");
    return env == nullptr || (std::string(env) != "0" && std::string(env) != "off" && std::string(env) != "false");
  }()};
  return on;
}

}  // namespace

bool im2col_mode() { return mode_flag().load(std::memory_order_relaxed); }
bool im2col_set_mode(bool on) { return mode_flag().exchange(on); }

bool im2col_applies(const Im2colConv& s) {
  return im2col_mode() && s.channels <= kMaxChannels && s.batch > 0 && s.out_height > 0 && s.out_width > 0;
}

// With at least as many images as threads, each thread takes a contiguous
// share of the batch and runs its chunks alone, all in one parallel region:
// with the threads sharing each step instead (three parallel regions per
// chunk), one LeNet training run in three on this 2-core machine took 1.5x as
// long, whenever a descheduled thread stalled the barriers. Fewer images: the
// threads share each step.
void im2col_forward(const engine::RunContext& run, const Im2colConv& s, const float* x, const float* w,
                    const float* bias, float* y) {
  const Geometry g(s);
  dn::Call call(run, g.macs(s));
  const int threads = call.threads();
  const int workers = threads > 1 && s.batch >= threads ? threads : 1;
  std::vector<float*> col(static_cast<size_t>(workers)), t(static_cast<size_t>(workers));
  for (size_t i = 0; i < col.size(); ++i) {  // allocated here: Call::temp is not thread safe
    col[i] = static_cast<float*>(call.temp(dn::plain_desc({g.ckk, g.chunk * g.p1})).get_data_handle());
    t[i] = static_cast<float*>(call.temp(dn::plain_desc({s.out_channels, g.chunk * g.p1})).get_data_handle());
  }
  // Images [begin, end) by `worker`, its steps on `step_threads` threads.
  auto process = [&](int64_t worker, int64_t begin, int64_t end, int step_threads) {
    float* wcol = col[static_cast<size_t>(worker)];
    float* wt = t[static_cast<size_t>(worker)];
    for (int64_t n0 = begin; n0 < end; n0 += g.chunk) {
      const int64_t count = std::min(g.chunk, end - n0);
      unfold(s, g, step_threads, x, n0, count, wcol);
      product(call, step_threads, s.out_channels, g.ckk, count * g.p1, w, wcol, wt);
      scatter_chunk(s, g, step_threads, wt, bias, n0, count, y);
    }
  };
  if (workers == 1) return process(0, 0, s.batch, threads);
  parallel_shares(workers, s.batch, [&](int wk, int64_t begin, int64_t end) { process(wk, begin, end, 1); });
}

// Per image: unfold it alone (col [CKK][P1]) and take one dot product per
// (output channel, tap) over the output plane, into the worker's part of dw;
// the parts are added in worker order (deterministic for a thread count).
void im2col_backward_weight(const engine::RunContext& run, const Im2colConv& s, const float* x, const float* dy,
                            float* dw) {
  const Geometry g(s);
  const int64_t K = s.out_channels, size = K * g.ckk;
  const int workers = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(g.macs(s) < onednn::kParallelWork ? 1 : run.num_threads, s.batch)));
  std::vector<float> parts(static_cast<size_t>(workers * size), 0.0f);
  parallel_shares(workers, s.batch, [&](int wk, int64_t begin, int64_t end) {
    std::vector<float> col(static_cast<size_t>(g.ckk * g.p1));
    float* acc = parts.data() + wk * size;
    for (int64_t n = begin; n < end; ++n) {
      unfold(s, g, 1, x, n, 1, col.data());
      for (int64_t k = 0; k < K; ++k) {
        const float* gk = dy + (n * K + k) * g.p1;
        for (int64_t r = 0; r < g.ckk; ++r) {
          const float* cr = col.data() + r * g.p1;
          float sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t q = 0; q < g.p1; ++q) sum += gk[q] * cr[q];
          acc[k * g.ckk + r] += sum;
        }
      }
    }
  });
  for (int64_t i = 0; i < size; ++i) {
    float sum = 0;
    for (int wk = 0; wk < workers; ++wk) sum += parts[static_cast<size_t>(wk * size + i)];
    dw[i] = sum;
  }
}


namespace {

// Bytes of col per chunk of the matrix-product weight gradient: large enough
// that each product runs long (thousands of positions), small enough to stay
// a modest temporary.
constexpr int64_t kGemmColBytes = int64_t{16} << 20;

std::atomic<int>& gemm_weight_mode() {
  static std::atomic<int> mode{[] {
    const char* env = std::getenv("KILN_CONV_WEIGHT_GEMM");
    if (env == nullptr) return -1;  // auto
    return std::string(env) == "0" ? 0 : 1;
  }()};
  return mode;
}

// a[k][i * P1 + p] = dy[n0 + i][k][p]: the chunk's output gradient as one matrix.
template <typename T>
void gather_output_grad(const Im2colConv& s, int64_t p1, int threads, const T* dy, int64_t n0, int64_t count, T* a) {
  const int64_t K = s.out_channels, cols = count * p1;
  parallel_for(
      threads, K * count,
      [&](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) {
          const int64_t k = u / count, i = u % count;
          std::memcpy(a + k * cols + i * p1, dy + ((n0 + i) * K + k) * p1, static_cast<size_t>(p1) * sizeof(T));
        }
      },
      1);
}

template <typename T>
void gemm_weight_typed(const engine::RunContext& run, const Im2colConv& s, memory::data_type dt, const T* x,
                       const T* dy, T* dw) {
  const Geometry g(s);
  const int64_t K = s.out_channels, ckk = g.ckk, p1 = g.p1;
  const int64_t chunk =
      std::clamp<int64_t>(kGemmColBytes / std::max<int64_t>(1, ckk * p1 * static_cast<int64_t>(sizeof(T))), 1,
                          s.batch);
  dn::Call call(run, s.batch * K * p1 * ckk);
  const int threads = call.threads();
  T* col = static_cast<T*>(call.temp(dn::plain_desc({ckk, chunk * p1}, dt)).get_data_handle());
  T* a = static_cast<T*>(call.temp(dn::plain_desc({K, chunk * p1}, dt)).get_data_handle());
  float* acc = std::is_same_v<T, float> ? reinterpret_cast<float*>(dw)
                                        : static_cast<float*>(call.temp(dn::plain_desc({K, ckk})).get_data_handle());
  for (int64_t n0 = 0; n0 < s.batch; n0 += chunk) {
    const int64_t count = std::min(chunk, s.batch - n0);
    unfold(s, g, threads, x, n0, count, col);
    gather_output_grad(s, p1, threads, dy, n0, count, a);
    // acc [K][CKK] (+)= a [K][cols] . col [CKK][cols]^T
    matmul_into(call, threads, dt, K, count * p1, ckk, a, col, true, acc, n0 > 0);
  }
  if constexpr (!std::is_same_v<T, float>) {
    parallel_for(threads, K * ckk, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dw[i] = store<T>(acc[i]);
    });
  }
}

}  // namespace

bool gemm_weight_applies(const Im2colConv& s) {
  const int mode = gemm_weight_mode().load(std::memory_order_relaxed);
  if (mode == 0 || s.batch <= 0 || s.out_height <= 0 || s.out_width <= 0) return false;
  if (mode == 1) return true;
  return s.out_height * s.out_width <= kGemmWeightMaxPositions;
}

int gemm_weight_set_mode(int mode) { return gemm_weight_mode().exchange(mode); }

void gemm_backward_weight(const engine::RunContext& run, const Im2colConv& s, DType t, const void* x, const void* dy,
                          void* dw) {
  const memory::data_type dt = dn::data_type(t);
  switch (t) {
    case DType::kFloat32:
      return gemm_weight_typed(run, s, dt, static_cast<const float*>(x), static_cast<const float*>(dy),
                               static_cast<float*>(dw));
    case DType::kBfloat16:
      return gemm_weight_typed(run, s, dt, static_cast<const BFloat16*>(x), static_cast<const BFloat16*>(dy),
                               static_cast<BFloat16*>(dw));
    case DType::kFloat16:
      return gemm_weight_typed(run, s, dt, static_cast<const Half*>(x), static_cast<const Half*>(dy),
                               static_cast<Half*>(dw));
    default:
      throw InternalError(fmt::format("internal error: matrix-product weight gradient reached with dtype {}", t));
  }
}

}  // namespace kiln::cpu
