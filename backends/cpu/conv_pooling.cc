// CPU kernels of Pooling and _backward_Pooling.
//
// 2-D pooling (the models' case) runs direct loops over the NCHW planes,
// parallel over planes: oneDNN's only implementation for plain NCHW is
// `simple_nchw`, which took 10-20x the time of this memory-bound loop in
// LeNet training (and blocked layouts would need reorders both ways). The
// loops follow the same conventions as the oneDNN path below: max ignores
// padding and routes the gradient to the first maximum in row-major window
// order; avg divides by the window's extent inside the padded input
// (count_include_pad) or by its valid elements; sum divides by nothing.
//
// 1-D and 3-D pooling run oneDNN's pooling primitives over the user's
// channel-first arrays (no reorders), and so does channel-last data (layout
// NWC/NHWC/NDHWC: ir/ops/conv_layout.h) of any rank, without MXNet's
// output rescaling (NotSupported where it is needed: sum pooling, or an
// average over windows cut by the "full" convention's padding) and without
// dilation.
//
// float16 and bfloat16: the direct loops load 16-bit elements into float32,
// accumulate in float32 (a row of outputs, or for the backward a plane of
// input gradients, in a per-thread buffer) and round each result once.
// oneDNN pools bfloat16 (and float16, on CPUs where it has float16 pooling)
// directly where no MXNet rescaling is needed (which would round twice);
// other 1-D/3-D calls in 16-bit run a direct loop over each window (1-D as
// 3-D with unit leading axes) that also loads into float32, accumulates in
// float32 and rounds once. Channel-last 16-bit data oneDNN cannot pool goes
// through float32 copies (the widening adaptor) instead.
//
// oneDNN has max, avg-including-padding and avg-excluding-padding. Sum pooling
// is the including-padding average times the kernel size. oneDNN's including-
// padding average always divides by the kernel size, while MXNet divides a
// window that hangs over the right padding ("full" convention) by its extent
// inside the padded input; both differences are one multiplier per output
// position, separable over the spatial axes, applied to the output (forward)
// or to out_grad (backward).
//
// Dilated max pooling (dilate > 1 on some axis; the geometry admits it for
// max only) runs its own direct loop over 1 to 3 spatial axes, with the same
// conventions: taps in the padding are skipped, and the gradient goes to the
// first maximum in row-major tap order.
//
// Max pooling's backward needs the forward's argmax positions (oneDNN's
// workspace). The forward op does not keep them (it has one output, as in
// MXNet's native kernel): the backward kernel recomputes the forward with a
// workspace into temporaries, then runs the backward primitive. That costs
// one extra pooling pass per backward, which is small next to convolutions.
#include <array>
#include <cfloat>
#include <cstring>
#include <vector>

#include "backends/cpu/elemwise_kernels.h"
#include "backends/cpu/onednn_util.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/thread_buffer.h"
#include "backends/cpu/widen.h"
#include "ir/ops/conv.h"
#include "ir/ops/conv_layout.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

namespace dn = cpu::onednn;
using dnnl::memory;
using cpu::load;
using cpu::store;

struct PoolProblem {
  WindowGeometry g;
  PoolType type = PoolType::kMax;
  dnnl::algorithm alg = dnnl::algorithm::pooling_max;
  memory::dims src, dst, strides, kernel, pad_l, pad_r;
  memory::data_type dt = memory::data_type::f32;  // of data, output and their gradients
  bool channels_last = false;                     // the user's arrays (dims stay channel-first)
  int64_t work = 0;
  std::string key;  // everything above

  // The layout of the user's data or output (`dims`).
  memory::desc user_desc(const memory::dims& dims) const {
    return channels_last ? dn::channels_last_desc(dims, dt) : dn::plain_desc(dims, dt);
  }
};

PoolProblem make_problem(const PoolingAttrs& a, const Shape& data, DType dtype) {
  PoolProblem p;
  p.dt = dn::data_type(dtype);
  p.g = pooling_geometry(a, data);
  p.type = pool_type(a);
  if (p.type == PoolType::kMax) {
    p.alg = dnnl::algorithm::pooling_max;
  } else if (p.type == PoolType::kAvg && !pool_count_include_pad(a)) {
    p.alg = dnnl::algorithm::pooling_avg_exclude_padding;
  } else {
    p.alg = dnnl::algorithm::pooling_avg_include_padding;
  }
  p.channels_last = channels_last(a.layout);
  const int64_t channels = data_channels(data, p.channels_last);
  p.src = {data[0], channels};
  for (int i = 0; i < p.g.nsp; ++i) p.src.push_back(p.g.in[i]);
  p.dst = dn::to_dims(p.g.out_shape(data[0], channels));
  for (int i = 0; i < p.g.nsp; ++i) {
    p.strides.push_back(p.g.stride[i]);
    p.kernel.push_back(p.g.kernel[i]);
    p.pad_l.push_back(p.g.pad_l[i]);
    p.pad_r.push_back(p.g.pad_r[i]);
  }
  for (const auto* d : {&p.src, &p.dst, &p.strides, &p.kernel, &p.pad_l, &p.pad_r}) dn::append_key(p.key, *d);
  p.key += fmt::format("{}|{}|{}|{}|", static_cast<int>(p.type), static_cast<int>(p.alg), static_cast<int>(p.dt),
                       p.channels_last ? "last" : "");
  p.work = data.size() + p.g.out_shape(data[0], channels).size() * p.g.kernel_size();
  return p;
}

// Per spatial axis and output index, the factor that turns oneDNN's result
// into MXNet's (see the file comment); `needed` is false when all are 1.
struct OutputScales {
  bool needed = false;
  int nsp = 0;
  std::array<int64_t, 3> out{1, 1, 1};
  std::array<std::vector<float>, 3> axis;
};

OutputScales output_scales(const PoolProblem& p) {
  OutputScales s;
  s.nsp = p.g.nsp;
  const bool include_pad = p.alg == dnnl::algorithm::pooling_avg_include_padding;
  for (int i = 0; i < p.g.nsp; ++i) {
    const int64_t k = p.g.kernel[i], stride = p.g.stride[i], pad = p.g.pad_l[i], in = p.g.in[i];
    s.out[i] = p.g.out[i];
    s.axis[i].assign(static_cast<size_t>(p.g.out[i]), 1.0f);
    if (!include_pad) continue;
    for (int64_t o = 0; o < p.g.out[i]; ++o) {
      int64_t start = o * stride - pad;
      int64_t extent = std::min(start + k, in + pad) - start;  // the window inside the padded input
      float f = p.type == PoolType::kSum ? static_cast<float>(k) : static_cast<float>(k) / static_cast<float>(extent);
      s.axis[i][static_cast<size_t>(o)] = f;
      s.needed = s.needed || f != 1.0f;
    }
  }
  return s;
}

// dst = src * scales, plane by plane (dst may be src).
void apply_scales(const OutputScales& s, int threads, int64_t planes, const float* src, float* dst) {
  const int64_t n0 = s.out[0], n1 = s.out[1], n2 = s.out[2];
  const int64_t plane = n0 * n1 * n2;
  std::vector<float> one{1.0f};
  const float* f0 = s.axis[0].data();
  const float* f1 = s.nsp > 1 ? s.axis[1].data() : one.data();
  const float* f2 = s.nsp > 2 ? s.axis[2].data() : one.data();
  cpu::parallel_for(
      threads, planes,
      [&](int64_t b, int64_t e) {
        for (int64_t q = b; q < e; ++q) {
          const float* x = src + q * plane;
          float* y = dst + q * plane;
          for (int64_t i = 0; i < n0; ++i)
            for (int64_t j = 0; j < n1; ++j) {
              const float f = f0[i] * f1[j];
              const float* xr = x + (i * n1 + j) * n2;
              float* yr = y + (i * n1 + j) * n2;
              for (int64_t l = 0; l < n2; ++l) yr[l] = xr[l] * f * f2[l];
            }
        }
      },
      std::max<int64_t>(1, cpu::kDefaultGrain / std::max<int64_t>(plane, 1)));
}

struct ForwardPlan {
  dnnl::pooling_forward prim;
  size_t scratchpad = 0;
  OutputScales scales;
};

struct BackwardPlan {
  dnnl::pooling_forward forward;  // forward_training: recomputes max pooling's workspace
  size_t forward_scratchpad = 0;
  memory::desc workspace;  // empty unless max pooling
  dnnl::pooling_backward prim;
  size_t scratchpad = 0;
  OutputScales scales;
};

dnnl::pooling_forward::primitive_desc forward_pd(const PoolProblem& p, dnnl::prop_kind prop) {
  dnnl::pooling_forward::desc desc(prop, p.alg, p.user_desc(p.src), p.user_desc(p.dst), p.strides, p.kernel,
                                   p.pad_l, p.pad_r);
  return {desc, dn::scratchpad_attr(), dn::engine()};
}

// Whether this oneDNN pools 16-bit `t` data on this CPU (probed once per dtype).
bool onednn_pools_in(DType t) {
  auto probe = [](memory::data_type dt) {
    try {
      const memory::dims two{2};
      dnnl::pooling_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max,
                                       dn::plain_desc({2, 16, 8}, dt), dn::plain_desc({2, 16, 4}, dt), two, two,
                                       memory::dims{0}, memory::dims{0});
      dnnl::pooling_forward::primitive_desc pd(desc, dn::engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  };
  static const bool bf16 = probe(memory::data_type::bf16);
  static const bool f16 = probe(memory::data_type::f16);
  return t == DType::kBfloat16 ? bf16 : t == DType::kFloat16 ? f16 : t == DType::kFloat32;
}

ForwardPlan make_forward_plan(const PoolProblem& p) {
  auto pd = forward_pd(p, dnnl::prop_kind::forward_inference);
  return {dnnl::pooling_forward(pd), dn::scratchpad_bytes(pd), output_scales(p)};
}

BackwardPlan make_backward_plan(const PoolProblem& p) {
  auto fwd = forward_pd(p, dnnl::prop_kind::forward_training);
  dnnl::pooling_backward::desc desc(p.alg, p.user_desc(p.src), p.user_desc(p.dst), p.strides, p.kernel, p.pad_l,
                                    p.pad_r);
  dnnl::pooling_backward::primitive_desc pd(desc, dn::scratchpad_attr(), dn::engine(), fwd);
  BackwardPlan plan;
  if (p.type == PoolType::kMax) {
    plan.forward = dnnl::pooling_forward(fwd);
    plan.forward_scratchpad = dn::scratchpad_bytes(fwd);
    plan.workspace = fwd.workspace_desc();
  }
  plan.prim = dnnl::pooling_backward(pd);
  plan.scratchpad = dn::scratchpad_bytes(pd);
  plan.scales = output_scales(p);
  return plan;
}


// ---- Direct 2-D pooling over NCHW planes

// One spatial axis of the window: for output o, the input range
// [begin[o], end[o]) inside the input, and the divisor's factor for o.
struct AxisWindows {
  std::vector<int64_t> begin, end;
  std::vector<float> divisor;
};

AxisWindows axis_windows(const PoolProblem& p, int i) {
  const int64_t k = p.g.kernel[i], stride = p.g.stride[i], pad = p.g.pad_l[i], in = p.g.in[i], out = p.g.out[i];
  AxisWindows w;
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * stride - pad;
    const int64_t b = std::max<int64_t>(start, 0), e = std::min(start + k, in);
    w.begin.push_back(b);
    w.end.push_back(std::max(b, e));
    float d = 1.0f;
    if (p.type == PoolType::kAvg) {
      d = p.alg == dnnl::algorithm::pooling_avg_include_padding
              ? static_cast<float>(std::min(start + k, in + pad) - start)
              : static_cast<float>(std::max<int64_t>(e - b, 1));
    }
    w.divisor.push_back(d);
  }
  return w;
}

struct Windows2d {
  AxisWindows h, w;
  int64_t ih = 0, iw = 0, oh = 0, ow = 0;
};

Windows2d windows_2d(const PoolProblem& p) {
  return {axis_windows(p, 0), axis_windows(p, 1), p.g.in[0], p.g.in[1], p.g.out[0], p.g.out[1]};
}

// Outputs [lo, hi) along w whose windows lie inside the input, unclipped
// (only windows at the edges are clipped, so they are contiguous).
std::pair<int64_t, int64_t> full_columns(const Windows2d& w, int64_t kw) {
  int64_t lo = w.ow, hi = w.ow;
  for (int64_t o = 0; o < w.ow; ++o) {
    if (w.w.end[static_cast<size_t>(o)] - w.w.begin[static_cast<size_t>(o)] != kw) continue;
    if (lo == w.ow) lo = o;
    hi = o + 1;
  }
  return {lo, hi};
}

// Planes [q0, q1) of x (each ih*iw) -> y (each oh*ow). A row of outputs
// accumulates in float32: in y itself for float32, else in a thread buffer.
template <typename T>
void pool_forward_planes(const PoolProblem& p, const Windows2d& w, const T* x, T* y, int64_t q0, int64_t q1) {
  constexpr bool kDirect = std::is_same_v<T, float>;
  const bool is_max = p.type == PoolType::kMax;
  const bool is_avg = p.type == PoolType::kAvg;
  // Unclipped, unpadded windows along w share one stride: the common 2x2 / 3x3
  // case, done as strided loads the compiler vectorizes.
  const int64_t kw = p.g.kernel[1], sw = p.g.stride[1];
  std::vector<float> inv_w(static_cast<size_t>(w.ow));
  for (int64_t o = 0; o < w.ow; ++o) inv_w[static_cast<size_t>(o)] = 1.0f / w.w.divisor[static_cast<size_t>(o)];
  const auto [full_lo, full_hi] = full_columns(w, kw);
  float* row = kDirect ? nullptr : cpu::thread_buffer<float>(static_cast<size_t>(w.ow));
  for (int64_t q = q0; q < q1; ++q) {
    const T* xp = x + q * w.ih * w.iw;
    T* yp = y + q * w.oh * w.ow;
    for (int64_t oh = 0; oh < w.oh; ++oh) {
      float* yr;
      if constexpr (kDirect)
        yr = yp + oh * w.ow;
      else
        yr = row;
      const float init = is_max ? -FLT_MAX : 0.0f;
      for (int64_t o = 0; o < w.ow; ++o) yr[o] = init;
      for (int64_t ih = w.h.begin[static_cast<size_t>(oh)]; ih < w.h.end[static_cast<size_t>(oh)]; ++ih) {
        const T* xr = xp + ih * w.iw;
        // Clipped columns, one by one.
        for (int64_t o = 0; o < w.ow; ++o) {
          if (o == full_lo) o = full_hi;
          if (o >= w.ow) break;
          float acc = yr[o];
          for (int64_t i = w.w.begin[static_cast<size_t>(o)]; i < w.w.end[static_cast<size_t>(o)]; ++i)
            acc = is_max ? std::max(acc, load(xr[i])) : acc + load(xr[i]);
          yr[o] = acc;
        }
        // Full columns: output full_lo + o reads xs[o * sw + j], j < kw.
        if (full_hi > full_lo) {
          const T* xs = xr + w.w.begin[static_cast<size_t>(full_lo)];
          float* ys = yr + full_lo;
          const int64_t n = full_hi - full_lo;
          for (int64_t j = 0; j < kw; ++j) {
            if (is_max) {
              for (int64_t o = 0; o < n; ++o) ys[o] = std::max(ys[o], load(xs[o * sw + j]));
            } else {
              for (int64_t o = 0; o < n; ++o) ys[o] += load(xs[o * sw + j]);
            }
          }
        }
      }
      if (is_avg) {
        const float inv_h = 1.0f / w.h.divisor[static_cast<size_t>(oh)];
        for (int64_t o = 0; o < w.ow; ++o) yr[o] *= inv_h * inv_w[static_cast<size_t>(o)];
      }
      if constexpr (!kDirect) {
        T* out = yp + oh * w.ow;
        for (int64_t o = 0; o < w.ow; ++o) out[o] = store<T>(yr[o]);
      }
    }
  }
}

// avg and sum: the value v[o] every input of window (oh, o) receives from
// the output gradient row gr: gr[o] / divisor, or gr[o].
template <typename T>
void window_values(const PoolProblem& p, const Windows2d& w, const T* gr, int64_t oh, std::vector<float>& v) {
  if (p.type != PoolType::kAvg) {
    for (int64_t o = 0; o < w.ow; ++o) v[static_cast<size_t>(o)] = load(gr[o]);
    return;
  }
  const float dh = w.h.divisor[static_cast<size_t>(oh)];
  for (int64_t o = 0; o < w.ow; ++o)
    v[static_cast<size_t>(o)] = load(gr[o]) / (dh * w.w.divisor[static_cast<size_t>(o)]);
}

// Whether the windows along an axis follow each other from 0 without gaps
// or overlap (stride = kernel, no padding: LeNet's 2x2 average pooling).
bool windows_tile(const AxisWindows& a) {
  int64_t at = 0;
  for (size_t o = 0; o < a.begin.size(); ++o) {
    if (a.begin[o] != at || a.end[o] < at) return false;
    at = a.end[o];
  }
  return true;
}

// dx for avg and sum pooling whose windows tile the plane (windows_tile on
// both axes): each input receives its one window's value, written once, with
// no clearing pass and no read-modify-write; inputs past the last window get 0.
template <typename T>
void pool_backward_planes_tiled(const PoolProblem& p, const Windows2d& w, const T* dy, T* dx, int64_t q0, int64_t q1) {
  const int64_t plane_in = w.ih * w.iw, plane_out = w.oh * w.ow;
  const int64_t covered_h = w.oh > 0 ? w.h.end.back() : 0, covered_w = w.ow > 0 ? w.w.end.back() : 0;
  const T zero = store<T>(0.0f);
  std::vector<float> v(static_cast<size_t>(w.ow));
  for (int64_t q = q0; q < q1; ++q) {
    const T* g = dy + q * plane_out;
    T* d = dx + q * plane_in;
    for (int64_t oh = 0; oh < w.oh; ++oh) {
      window_values(p, w, g + oh * w.ow, oh, v);
      for (int64_t ih = w.h.begin[static_cast<size_t>(oh)]; ih < w.h.end[static_cast<size_t>(oh)]; ++ih) {
        T* dr = d + ih * w.iw;
        for (int64_t o = 0; o < w.ow; ++o)
          std::fill(dr + w.w.begin[static_cast<size_t>(o)], dr + w.w.end[static_cast<size_t>(o)],
                    store<T>(v[static_cast<size_t>(o)]));
        std::fill(dr + covered_w, dr + w.iw, zero);
      }
    }
    std::fill(d + covered_h * w.iw, d + plane_in, zero);
  }
}

// Planes [q0, q1): dx = pooling's gradient for dy (x: the forward's input,
// for max). A plane's gradient accumulates in float32: in dx itself for
// float32, else in a thread buffer rounded into dx when the plane is done.
template <typename T>
void pool_backward_planes(const PoolProblem& p, const Windows2d& w, const T* dy, const T* x, T* dx, int64_t q0,
                          int64_t q1) {
  if (p.type != PoolType::kMax && windows_tile(w.h) && windows_tile(w.w))
    return pool_backward_planes_tiled(p, w, dy, dx, q0, q1);
  constexpr bool kDirect = std::is_same_v<T, float>;
  const int64_t plane_in = w.ih * w.iw, plane_out = w.oh * w.ow;
  const int64_t kw = p.g.kernel[1], sw = p.g.stride[1];
  const auto [full_lo, full_hi] = full_columns(w, kw);
  std::vector<float> v(static_cast<size_t>(w.ow));
  float* staged = kDirect ? nullptr : cpu::thread_buffer<float>(static_cast<size_t>(plane_in));
  for (int64_t q = q0; q < q1; ++q) {
    const T* g = dy + q * plane_out;
    float* d;
    if constexpr (kDirect)
      d = dx + q * plane_in;
    else
      d = staged;
    std::memset(d, 0, static_cast<size_t>(plane_in) * sizeof(float));
    const T* xp = x + q * plane_in;
    for (int64_t oh = 0; oh < w.oh; ++oh) {
      const int64_t h0 = w.h.begin[static_cast<size_t>(oh)], h1 = w.h.end[static_cast<size_t>(oh)];
      if (p.type == PoolType::kMax) {
        for (int64_t ow = 0; ow < w.ow; ++ow) {
          const int64_t w0 = w.w.begin[static_cast<size_t>(ow)], w1 = w.w.end[static_cast<size_t>(ow)];
          int64_t arg = -1;
          float best = -FLT_MAX;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw)
              if (arg < 0 || load(xp[ih * w.iw + iw]) > best) {
                best = load(xp[ih * w.iw + iw]);
                arg = ih * w.iw + iw;
              }
          if (arg >= 0) d[arg] += load(g[oh * w.ow + ow]);
        }
        continue;
      }
      // avg and sum: every input of a window receives v = go / divisor.
      window_values(p, w, g + oh * w.ow, oh, v);
      for (int64_t ih = h0; ih < h1; ++ih) {
        float* dr = d + ih * w.iw;
        for (int64_t o = 0; o < w.ow; ++o) {
          if (o == full_lo) o = full_hi;
          if (o >= w.ow) break;
          for (int64_t i = w.w.begin[static_cast<size_t>(o)]; i < w.w.end[static_cast<size_t>(o)]; ++i)
            dr[i] += v[static_cast<size_t>(o)];
        }
        if (full_hi > full_lo) {
          float* ds = dr + w.w.begin[static_cast<size_t>(full_lo)];
          const float* vs = v.data() + full_lo;
          const int64_t n = full_hi - full_lo;
          for (int64_t j = 0; j < kw; ++j)
            for (int64_t o = 0; o < n; ++o) ds[o * sw + j] += vs[o];
        }
      }
    }
    if constexpr (!kDirect) {
      T* out = dx + q * plane_in;
      for (int64_t i = 0; i < plane_in; ++i) out[i] = store<T>(d[i]);
    }
  }
}

int64_t plane_grain(const PoolProblem& p) {
  const int64_t per_plane = std::max<int64_t>(1, p.work / std::max<int64_t>(p.src[0] * p.src[1], 1));
  return std::max<int64_t>(1, cpu::kDefaultGrain * 4 / per_plane);
}

template <typename T>
void pooling_forward_2d(const KernelContext& ctx, const PoolProblem& p, const T* x, T* y) {
  const Windows2d w = windows_2d(p);
  cpu::parallel_for(
      ctx.run.num_threads, p.src[0] * p.src[1],
      [&](int64_t q0, int64_t q1) { pool_forward_planes(p, w, x, y, q0, q1); }, plane_grain(p));
}

template <typename T>
void pooling_backward_2d(const KernelContext& ctx, const PoolProblem& p, const T* dy, const T* x, T* dx) {
  const Windows2d w = windows_2d(p);
  cpu::parallel_for(
      ctx.run.num_threads, p.src[0] * p.src[1],
      [&](int64_t q0, int64_t q1) { pool_backward_planes(p, w, dy, x, dx, q0, q1); }, plane_grain(p));
}

// ---- Dilated max pooling, 1 to 3 spatial axes

bool dilated(const PoolProblem& p) {
  for (int i = 0; i < p.g.nsp; ++i)
    if (p.g.dilate[i] != 1) return true;
  return false;
}

// The window geometry as three axes, leading unit axes for 1-D and 2-D.
struct Axes3 {
  std::array<int64_t, 3> k{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1}, pad{0, 0, 0}, in{1, 1, 1}, out{1, 1, 1};
};

Axes3 axes3(const WindowGeometry& g) {
  Axes3 a;
  for (int i = 0; i < g.nsp; ++i) {
    const int j = 3 - g.nsp + i;
    a.k[j] = g.kernel[i];
    a.s[j] = g.stride[i];
    a.d[j] = g.dilate[i];
    a.pad[j] = g.pad_l[i];
    a.in[j] = g.in[i];
    a.out[j] = g.out[i];
  }
  return a;
}

// The plane offset of the first maximum of output (o0, o1, o2)'s window in
// plane x, or -1 when every tap lies in the padding.
template <typename T>
int64_t dilated_argmax(const Axes3& a, const T* x, int64_t o0, int64_t o1, int64_t o2, float& best) {
  int64_t arg = -1;
  best = -FLT_MAX;
  for (int64_t k0 = 0; k0 < a.k[0]; ++k0) {
    const int64_t i0 = o0 * a.s[0] - a.pad[0] + k0 * a.d[0];
    if (i0 < 0 || i0 >= a.in[0]) continue;
    for (int64_t k1 = 0; k1 < a.k[1]; ++k1) {
      const int64_t i1 = o1 * a.s[1] - a.pad[1] + k1 * a.d[1];
      if (i1 < 0 || i1 >= a.in[1]) continue;
      for (int64_t k2 = 0; k2 < a.k[2]; ++k2) {
        const int64_t i2 = o2 * a.s[2] - a.pad[2] + k2 * a.d[2];
        if (i2 < 0 || i2 >= a.in[2]) continue;
        const int64_t at = (i0 * a.in[1] + i1) * a.in[2] + i2;
        const float v = load(x[at]);
        if (arg < 0 || v > best) {
          best = v;
          arg = at;
        }
      }
    }
  }
  return arg;
}

// Runs the planes (batch x channel) of a pooling over three axes, `in` and
// `out` positions per plane, in parallel: per plane, `visit(xp, q, o, o0, o1,
// o2, staged)` for each output position (o0, o1, o2) in row-major order, o
// its index in the plane and xp the plane of x. In the backward (dy given)
// the visits add the plane's input gradient into `staged` (float32), which is
// rounded into dx once the plane is done.
template <typename T, typename Visit>
void walk_planes(const KernelContext& ctx, const PoolProblem& p, const std::array<int64_t, 3>& in,
                 const std::array<int64_t, 3>& out, const T* x, const T* dy, T* dx, Visit&& visit) {
  const int64_t plane_in = in[0] * in[1] * in[2];
  cpu::parallel_for(
      ctx.run.num_threads, p.src[0] * p.src[1],
      [&](int64_t q0, int64_t q1) {
        std::vector<float> staged(dy ? static_cast<size_t>(plane_in) : 0);
        for (int64_t q = q0; q < q1; ++q) {
          std::fill(staged.begin(), staged.end(), 0.0f);
          int64_t o = 0;
          for (int64_t o0 = 0; o0 < out[0]; ++o0)
            for (int64_t o1 = 0; o1 < out[1]; ++o1)
              for (int64_t o2 = 0; o2 < out[2]; ++o2, ++o) visit(x + q * plane_in, q, o, o0, o1, o2, staged);
          if (dy)
            for (int64_t i = 0; i < plane_in; ++i) dx[q * plane_in + i] = store<T>(staged[static_cast<size_t>(i)]);
        }
      },
      plane_grain(p));
}

// dy == nullptr: forward (y = max of each window). Otherwise backward: dx =
// dy routed to each window's first maximum (x is the forward's input).
template <typename T>
void dilated_max(const KernelContext& ctx, const PoolProblem& p, const T* x, const T* dy, T* y_or_dx) {
  const Axes3 a = axes3(p.g);
  const int64_t plane_out = a.out[0] * a.out[1] * a.out[2];
  walk_planes(ctx, p, a.in, a.out, x, dy, y_or_dx,
              [&](const T* xp, int64_t q, int64_t o, int64_t o0, int64_t o1, int64_t o2, std::vector<float>& staged) {
                float best;
                const int64_t arg = dilated_argmax(a, xp, o0, o1, o2, best);
                if (!dy)
                  y_or_dx[q * plane_out + o] = store<T>(best);
                else if (arg >= 0)
                  staged[static_cast<size_t>(arg)] += load(dy[q * plane_out + o]);
              });
}

// ---- Direct 1-D and 3-D pooling, for 16-bit calls oneDNN cannot take

// The windows along three axes, leading unit axes for 1-D.
struct Windows3d {
  std::array<AxisWindows, 3> ax;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1};
};

Windows3d windows_3d(const PoolProblem& p) {
  Windows3d w;
  for (AxisWindows& a : w.ax) a = {{0}, {1}, {1.0f}};
  for (int i = 0; i < p.g.nsp; ++i) {
    const int j = 3 - p.g.nsp + i;
    w.ax[static_cast<size_t>(j)] = axis_windows(p, i);
    w.in[static_cast<size_t>(j)] = p.g.in[i];
    w.out[static_cast<size_t>(j)] = p.g.out[i];
  }
  return w;
}

// Calls f(plane offset) for the inputs of output (o0, o1, o2)'s window
// inside the plane, in row-major order.
template <typename F>
void for_window(const Windows3d& w, int64_t o0, int64_t o1, int64_t o2, F&& f) {
  const auto at = [](const AxisWindows& a, int64_t o) {
    return std::pair{a.begin[static_cast<size_t>(o)], a.end[static_cast<size_t>(o)]};
  };
  const auto [b0, e0] = at(w.ax[0], o0);
  const auto [b1, e1] = at(w.ax[1], o1);
  const auto [b2, e2] = at(w.ax[2], o2);
  for (int64_t i0 = b0; i0 < e0; ++i0)
    for (int64_t i1 = b1; i1 < e1; ++i1)
      for (int64_t i2 = b2; i2 < e2; ++i2) f((i0 * w.in[1] + i1) * w.in[2] + i2);
}

// The divisor of output (o0, o1, o2): 1 but for avg.
float window_divisor(const Windows3d& w, int64_t o0, int64_t o1, int64_t o2) {
  return w.ax[0].divisor[static_cast<size_t>(o0)] * w.ax[1].divisor[static_cast<size_t>(o1)] *
         w.ax[2].divisor[static_cast<size_t>(o2)];
}

// dy == nullptr: forward (y = each window's max, avg or sum). Otherwise
// backward: dx = pooling's gradient for dy (x: the forward's input, for max;
// the gradient goes to the first maximum). Elements are loaded into float32,
// sums and a plane's gradient accumulate in float32, each result is rounded
// once; the same conventions as the 2-D loops.
template <typename T>
void pool_direct_3d(const KernelContext& ctx, const PoolProblem& p, const T* x, const T* dy, T* y_or_dx) {
  const Windows3d w = windows_3d(p);
  const int64_t plane_out = w.out[0] * w.out[1] * w.out[2];
  const bool is_max = p.type == PoolType::kMax;
  walk_planes(ctx, p, w.in, w.out, x, dy, y_or_dx,
              [&](const T* xp, int64_t q, int64_t o, int64_t o0, int64_t o1, int64_t o2, std::vector<float>& staged) {
                if (is_max) {
                  int64_t arg = -1;
                  float best = -FLT_MAX;
                  for_window(w, o0, o1, o2, [&](int64_t at) {
                    const float v = load(xp[at]);
                    if (arg < 0 || v > best) best = v, arg = at;
                  });
                  if (!dy)
                    y_or_dx[q * plane_out + o] = store<T>(best);
                  else if (arg >= 0)
                    staged[static_cast<size_t>(arg)] += load(dy[q * plane_out + o]);
                  return;
                }
                const float div = window_divisor(w, o0, o1, o2);
                if (!dy) {
                  float acc = 0.0f;
                  for_window(w, o0, o1, o2, [&](int64_t at) { acc += load(xp[at]); });
                  y_or_dx[q * plane_out + o] = store<T>(acc / div);
                } else {
                  const float v = load(dy[q * plane_out + o]) / div;
                  for_window(w, o0, o1, o2, [&](int64_t at) { staged[static_cast<size_t>(at)] += v; });
                }
              });
}

// Whether a 1-D or 3-D call runs oneDNN on its own arrays: float32 always;
// 16-bit where oneDNN pools that type and no rescaling follows.
bool onednn_direct(const PoolProblem& p, DType t) {
  return t == DType::kFloat32 || (onednn_pools_in(t) && !output_scales(p).needed);
}

// Channel-last pooling runs on oneDNN only (see the file comment).
void check_channels_last(const PoolProblem& p) {
  KILN_CHECK(!dilated(p), NotSupported, "Pooling: dilated windows need a channel-first layout");
  KILN_CHECK(!output_scales(p).needed, NotSupported,
             "Pooling: {} with a channel-last layout is not supported (needs a channel-first layout)",
             p.type == PoolType::kSum ? "sum pooling" : "averaging windows cut by the 'full' convention's padding");
}

// f(T{}) for the pooled dtypes: float32, float16, bfloat16 (inference admits no float64).
template <typename F>
void dispatch_pooled(DType t, F&& f) {
  cpu::dispatch_floating(t, [&](auto tag) {
    if constexpr (std::is_same_v<decltype(tag), double>)
      KILN_ASSERT(!"Pooling: float64 not admitted by inference");
    else
      f(tag);
  });
}

// (data) -> out
void pooling_forward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (out[0].size() == 0) return;
  const DType t = in[0].dtype;
  PoolProblem p = make_problem(ctx.attrs.as<PoolingAttrs>(), in[0].shape, t);
  if (p.channels_last) check_channels_last(p);
  if (dilated(p)) {
    return dispatch_pooled(t, [&](auto tag) {
      using T = decltype(tag);
      dilated_max<T>(ctx, p, in[0].ptr<T>(), nullptr, out[0].ptr<T>());
    });
  }
  if (p.g.nsp == 2 && !p.channels_last) {
    return dispatch_pooled(t, [&](auto tag) {
      using T = decltype(tag);
      pooling_forward_2d<T>(ctx, p, in[0].ptr<T>(), out[0].ptr<T>());
    });
  }
  if (!onednn_direct(p, t)) {
    if (p.channels_last) return cpu::widen(ctx, in, out);  // the direct loops are channel-first
    return dispatch_pooled(t, [&](auto tag) {
      using T = decltype(tag);
      pool_direct_3d<T>(ctx, p, in[0].ptr<T>(), nullptr, out[0].ptr<T>());
    });
  }
  dn::Call call(ctx.run, p.work);
  auto plan = dn::cached<ForwardPlan>(fmt::format("pool_fwd|{}{}", p.key, call.threads()), [&] { return make_forward_plan(p); });
  call.run(plan->prim, plan->scratchpad,
           {{DNNL_ARG_SRC, call.wrap(p.user_desc(p.src), in[0].data)},
            {DNNL_ARG_DST, call.wrap(p.user_desc(p.dst), out[0].data)}});
  call.finish();
  if (plan->scales.needed) {
    float* y = out[0].ptr<float>();
    apply_scales(plan->scales, call.threads(), p.dst[0] * p.dst[1], y, y);
  }
}

// (out_grad, data, output) -> d_data
void pooling_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (out[0].size() == 0) return;
  if (in[0].size() == 0) {
    std::memset(out[0].data, 0, out[0].bytes());
    return;
  }
  const DType t = in[1].dtype;
  PoolProblem p = make_problem(ctx.attrs.as<PoolingAttrs>(), in[1].shape, t);
  if (p.channels_last) check_channels_last(p);
  if (dilated(p)) {
    return dispatch_pooled(t, [&](auto tag) {
      using T = decltype(tag);
      dilated_max<T>(ctx, p, in[1].ptr<T>(), in[0].ptr<T>(), out[0].ptr<T>());
    });
  }
  if (p.g.nsp == 2 && !p.channels_last) {
    return dispatch_pooled(t, [&](auto tag) {
      using T = decltype(tag);
      pooling_backward_2d<T>(ctx, p, in[0].ptr<T>(), in[1].ptr<T>(), out[0].ptr<T>());
    });
  }
  if (!onednn_direct(p, t)) {
    if (p.channels_last) return cpu::widen(ctx, in, out);  // the direct loops are channel-first
    return dispatch_pooled(t, [&](auto tag) {
      using T = decltype(tag);
      pool_direct_3d<T>(ctx, p, in[1].ptr<T>(), in[0].ptr<T>(), out[0].ptr<T>());
    });
  }
  dn::Call call(ctx.run, p.work);
  auto plan = dn::cached<BackwardPlan>(fmt::format("pool_bwd|{}{}", p.key, call.threads()), [&] { return make_backward_plan(p); });
  const memory::desc src = p.user_desc(p.src), dst = p.user_desc(p.dst);
  std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_SRC, call.wrap(src, out[0].data)}};
  if (p.type == PoolType::kMax) {
    memory workspace = call.temp(plan->workspace);
    call.run(plan->forward, plan->forward_scratchpad,
             {{DNNL_ARG_SRC, call.wrap(src, in[1].data)},
              {DNNL_ARG_DST, call.temp(dst)},
              {DNNL_ARG_WORKSPACE, workspace}});
    args.emplace(DNNL_ARG_WORKSPACE, workspace);
  }
  if (plan->scales.needed) {
    memory scaled = call.temp(dst);
    apply_scales(plan->scales, call.threads(), p.dst[0] * p.dst[1], in[0].ptr<float>(),
                 static_cast<float*>(scaled.get_data_handle()));
    args.emplace(DNNL_ARG_DIFF_DST, scaled);
  } else {
    args.emplace(DNNL_ARG_DIFF_DST, call.wrap(dst, in[0].data));
  }
  call.run(plan->prim, plan->scratchpad, std::move(args));
  call.finish();
}

}  // namespace

void register_cpu_pooling_kernels() {
  register_kernel(OpId::kPooling, DeviceKind::kCPU, pooling_forward, HalfSupport::kAny);
  register_kernel(OpId::kPoolingBackward, DeviceKind::kCPU, pooling_backward, HalfSupport::kAny);
}

}  // namespace kiln
