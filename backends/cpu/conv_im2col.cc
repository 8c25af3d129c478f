// im2col convolution: see conv_im2col.h.
//
// Buffers per chunk of `count` images (P1 = OH x OW positions per image,
// cols = count x P1, CKK = C x kh x kw):
//   col [CKK][cols]  the unfolded input
//   t   [K][cols]    the output (gradient) of the chunk as one matrix: the
//                    products read and write whole matrices, and NCHW keeps
//                    each image's [K][P1] block apart, so t is copied from or
//                    to the user's array.
// The matmuls run on oneDNN's threads; unfolding and the copies are
// split over the same threads.
#include "backends/cpu/conv_im2col.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/onednn_util.h"
#include "backends/cpu/parallel.h"

namespace kiln::cpu {
namespace {

namespace dn = onednn;
using dnnl::memory;

// oneDNN's direct kernels block channels by this many (AVX-512 floats).
constexpr int64_t kChannelBlock = 16;
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
// outside, for r = (c, ky, kx).
void unfold(const Im2colConv& s, const Geometry& g, int threads, const float* x, int64_t n0, int64_t count,
            float* col) {
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
            const float* xs = x + ((n0 + i) * s.channels + c) * plane;
            float* row = col + r * cols + i * g.p1;
            for (int64_t oy = 0; oy < s.out_height; ++oy) {
              float* out = row + oy * s.out_width;
              const int64_t iy = oy * s.stride_h - s.pad_top + ky * s.dilate_h;
              if (iy < 0 || iy >= s.height) {
                std::fill(out, out + s.out_width, 0.0f);
                continue;
              }
              const float* in = xs + iy * s.width;  // input column of output column ox: ox sw + off_x
              std::fill(out, out + ox0, 0.0f);
              if (s.stride_w == 1 && ox1 > ox0) {
                std::memcpy(out + ox0, in + ox0 + off_x, static_cast<size_t>(ox1 - ox0) * sizeof(float));
              } else {
                for (int64_t ox = ox0; ox < ox1; ++ox) out[ox] = in[ox * s.stride_w + off_x];
              }
              std::fill(out + ox1, out + s.out_width, 0.0f);
            }
          }
        }
      },
      1);
}

// t[k][i * P1 + p] = y[n0 + i][k][p] for the chunk's images.
void gather_chunk(const Im2colConv& s, const Geometry& g, int threads, const float* y, int64_t n0, int64_t count,
                  float* t) {
  const int64_t cols = count * g.p1, K = s.out_channels;
  parallel_for(
      threads, count * K,
      [&](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) {
          const int64_t i = u / K, k = u % K;
          std::memcpy(t + k * cols + i * g.p1, y + ((n0 + i) * K + k) * g.p1, static_cast<size_t>(g.p1) * sizeof(float));
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

// One matmul dst (+)= a . b of row-major matrices, a [m][k] and b [k][n]; a or
// b read transposed (stored [k][m] / [n][k]) when asked.
struct Product {
  int64_t m, k, n;
  bool a_transposed = false, b_transposed = false, accumulate = false;
};

// `threads`: the threads oneDNN splits the product over (1 inside a parallel region).
void run_product(dn::Call& call, int threads, const Product& p, const float* a, const float* b, float* dst) {
  std::string key = "im2col_matmul|";
  dn::append_key(key, {p.m, p.k, p.n, p.a_transposed, p.b_transposed, p.accumulate, threads});
  struct Plan {
    dnnl::matmul prim;
    size_t scratchpad = 0;
    memory::desc a, b, dst;
  };
  auto plan = dn::cached<Plan>(key, [&] {
    Plan made;
    made.a = memory::desc({p.m, p.k}, memory::data_type::f32,
                          p.a_transposed ? memory::dims{1, p.m} : memory::dims{p.k, 1});
    made.b = memory::desc({p.k, p.n}, memory::data_type::f32,
                          p.b_transposed ? memory::dims{1, p.k} : memory::dims{p.n, 1});
    made.dst = dn::plain_desc({p.m, p.n});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(made.a, made.b, made.dst),
                                    dn::post_ops_attr(p.accumulate, std::nullopt), dn::engine());
    made.prim = dnnl::matmul(pd);
    made.scratchpad = dn::scratchpad_bytes(pd);
    return made;
  });
  call.run(plan->prim, plan->scratchpad,
           {{DNNL_ARG_SRC, call.wrap(plan->a, a)}, {DNNL_ARG_WEIGHTS, call.wrap(plan->b, b)},
            {DNNL_ARG_DST, call.wrap(plan->dst, dst)}});
  dn::Call::stream().wait();
}

std::atomic<bool>& mode_flag() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("KILN_IM2COL");
    return env == nullptr || (std::string(env) != "0" && std::string(env) != "off" && std::string(env) != "false");
  }()};
  return on;
}

// Runs step(worker, n0, count, step_threads, col, t) over the batch in
// chunks of at most g.chunk images. With at least as many images as threads,
// each thread takes a contiguous share of the batch and runs its chunks alone
// (step_threads 1), all in one parallel region: with the threads sharing each
// step instead (three parallel regions per chunk), one LeNet training run in
// three on this 2-core machine took 1.5x as long, whenever a descheduled
// thread stalled the barriers. Fewer images: the threads share each step.
// Returns the number of workers (each has its own col and t from `call`).
template <typename Step>
int over_chunks(dn::Call& call, const Im2colConv& s, const Geometry& g, Step&& step) {
  const int threads = call.threads();
  const bool per_thread = threads > 1 && s.batch >= threads;
  const int workers = per_thread ? threads : 1;
  std::vector<float*> col(static_cast<size_t>(workers)), t(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) {  // allocated here: Call::temp is not thread safe
    col[static_cast<size_t>(i)] = static_cast<float*>(call.temp(dn::plain_desc({g.ckk, g.chunk * g.p1})).get_data_handle());
    t[static_cast<size_t>(i)] =
        static_cast<float*>(call.temp(dn::plain_desc({s.out_channels, g.chunk * g.p1})).get_data_handle());
  }
  auto process = [&](int worker, int64_t begin, int64_t end, int step_threads) {
    for (int64_t n0 = begin; n0 < end; n0 += g.chunk)
      step(worker, begin, n0, std::min(g.chunk, end - n0), step_threads, col[static_cast<size_t>(worker)],
           t[static_cast<size_t>(worker)]);
  };
  if (!per_thread) {
    process(0, 0, s.batch, threads);
    return 1;
  }
  const int64_t share = (s.batch + workers - 1) / workers;
  parallel_for(
      threads, threads,
      [&](int64_t w0, int64_t w1) {
        for (int64_t w = w0; w < w1; ++w)
          process(static_cast<int>(w), std::min(s.batch, w * share), std::min(s.batch, (w + 1) * share), 1);
      },
      1);
  return workers;
}

}  // namespace

bool im2col_mode() { return mode_flag().load(std::memory_order_relaxed); }
bool im2col_set_mode(bool on) { return mode_flag().exchange(on); }

bool im2col_applies(const Im2colConv& s) {
  return im2col_mode() && s.channels % kChannelBlock != 0 && s.batch > 0 && s.out_height > 0 && s.out_width > 0;
}

void im2col_forward(const engine::RunContext& run, const Im2colConv& s, const float* x, const float* w,
                    const float* bias, float* y) {
  const Geometry g(s);
  dn::Call call(run, g.macs(s));
  over_chunks(call, s, g, [&](int, int64_t, int64_t n0, int64_t count, int threads, float* col, float* t) {
    unfold(s, g, threads, x, n0, count, col);
    run_product(call, threads, {.m = s.out_channels, .k = g.ckk, .n = count * g.p1}, w, col, t);
    scatter_chunk(s, g, threads, t, bias, n0, count, y);
  });
}

void im2col_backward_weight(const engine::RunContext& run, const Im2colConv& s, const float* x, const float* dy,
                            float* dw) {
  const Geometry g(s);
  dn::Call call(run, g.macs(s));
  // Each worker sums its chunks into its own part of dw; the parts are added
  // in worker order at the end (deterministic for a thread count).
  const int64_t size = s.out_channels * g.ckk;
  const bool per_thread = call.threads() > 1 && s.batch >= call.threads();
  float* parts = per_thread ? static_cast<float*>(
                                  call.temp(dn::plain_desc({call.threads(), size})).get_data_handle())
                            : dw;
  if (per_thread) std::fill(parts, parts + call.threads() * size, 0.0f);  // a worker may get no images
  const int workers =
      over_chunks(call, s, g, [&](int worker, int64_t begin, int64_t n0, int64_t count, int threads, float* col, float* t) {
        unfold(s, g, threads, x, n0, count, col);
        gather_chunk(s, g, threads, dy, n0, count, t);
        run_product(call, threads,
                    {.m = s.out_channels, .k = count * g.p1, .n = g.ckk, .b_transposed = true, .accumulate = n0 > begin},
                    t, col, parts + worker * size);
      });
  if (workers == 1) return;
  for (int64_t i = 0; i < size; ++i) {
    float sum = 0;
    for (int wk = 0; wk < workers; ++wk) sum += parts[wk * size + i];
    dw[i] = sum;
  }
}

}  // namespace kiln::cpu
