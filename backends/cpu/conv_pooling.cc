// CPU kernels of Pooling and _backward_Pooling, on oneDNN's pooling
// primitives over the user's channel-first arrays (no reorders).
//
// oneDNN has max, avg-including-padding and avg-excluding-padding. Sum pooling
// is the including-padding average times the kernel size. oneDNN's including-
// padding average always divides by the kernel size, while MXNet divides a
// window that hangs over the right padding ("full" convention) by its extent
// inside the padded input; both differences are one multiplier per output
// position, separable over the spatial axes, applied to the output (forward)
// or to out_grad (backward).
//
// Max pooling's backward needs the forward's argmax positions (oneDNN's
// workspace). The forward op does not keep them (it has one output, as in
// MXNet's native kernel): the backward kernel recomputes the forward with a
// workspace into temporaries, then runs the backward primitive. That costs
// one extra pooling pass per backward, which is small next to convolutions.
#include <array>
#include <cstring>
#include <vector>

#include "backends/cpu/onednn_util.h"
#include "backends/cpu/parallel.h"
#include "ir/ops/conv.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

namespace dn = cpu::onednn;
using dnnl::memory;

struct PoolProblem {
  WindowGeometry g;
  PoolType type = PoolType::kMax;
  dnnl::algorithm alg = dnnl::algorithm::pooling_max;
  memory::dims src, dst, strides, kernel, pad_l, pad_r;
  int64_t work = 0;
  std::string key;  // everything above
};

PoolProblem make_problem(const PoolingAttrs& a, const Shape& data) {
  PoolProblem p;
  p.g = pooling_geometry(a, data);
  p.type = pool_type(a);
  if (p.type == PoolType::kMax) {
    p.alg = dnnl::algorithm::pooling_max;
  } else if (p.type == PoolType::kAvg && !pool_count_include_pad(a)) {
    p.alg = dnnl::algorithm::pooling_avg_exclude_padding;
  } else {
    p.alg = dnnl::algorithm::pooling_avg_include_padding;
  }
  p.src = dn::to_dims(data);
  p.dst = dn::to_dims(p.g.out_shape(data[0], data[1]));
  for (int i = 0; i < p.g.nsp; ++i) {
    p.strides.push_back(p.g.stride[i]);
    p.kernel.push_back(p.g.kernel[i]);
    p.pad_l.push_back(p.g.pad_l[i]);
    p.pad_r.push_back(p.g.pad_r[i]);
  }
  for (const auto* d : {&p.src, &p.dst, &p.strides, &p.kernel, &p.pad_l, &p.pad_r}) dn::append_key(p.key, *d);
  p.key += fmt::format("{}|{}|", static_cast<int>(p.type), static_cast<int>(p.alg));
  p.work = data.size() + p.g.out_shape(data[0], data[1]).size() * p.g.kernel_size();
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
  dnnl::pooling_forward::desc desc(prop, p.alg, dn::plain_desc(p.src), dn::plain_desc(p.dst), p.strides, p.kernel,
                                   p.pad_l, p.pad_r);
  return {desc, dn::scratchpad_attr(), dn::engine()};
}

ForwardPlan make_forward_plan(const PoolProblem& p) {
  auto pd = forward_pd(p, dnnl::prop_kind::forward_inference);
  return {dnnl::pooling_forward(pd), dn::scratchpad_bytes(pd), output_scales(p)};
}

BackwardPlan make_backward_plan(const PoolProblem& p) {
  auto fwd = forward_pd(p, dnnl::prop_kind::forward_training);
  dnnl::pooling_backward::desc desc(p.alg, dn::plain_desc(p.src), dn::plain_desc(p.dst), p.strides, p.kernel,
                                    p.pad_l, p.pad_r);
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

// (data) -> out
void pooling_forward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (out[0].size() == 0) return;
  PoolProblem p = make_problem(ctx.attrs.as<PoolingAttrs>(), in[0].shape);
  dn::Call call(ctx.run, p.work);
  auto plan = dn::cached<ForwardPlan>(fmt::format("pool_fwd|{}{}", p.key, call.threads()), [&] { return make_forward_plan(p); });
  call.run(plan->prim, plan->scratchpad,
           {{DNNL_ARG_SRC, call.wrap(dn::plain_desc(p.src), in[0].data)},
            {DNNL_ARG_DST, call.wrap(dn::plain_desc(p.dst), out[0].data)}});
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
  PoolProblem p = make_problem(ctx.attrs.as<PoolingAttrs>(), in[1].shape);
  dn::Call call(ctx.run, p.work);
  auto plan = dn::cached<BackwardPlan>(fmt::format("pool_bwd|{}{}", p.key, call.threads()), [&] { return make_backward_plan(p); });
  const memory::desc src = dn::plain_desc(p.src), dst = dn::plain_desc(p.dst);
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
  register_kernel(OpId::kPooling, DeviceKind::kCPU, pooling_forward);
  register_kernel(OpId::kPoolingBackward, DeviceKind::kCPU, pooling_backward);
}

}  // namespace kiln
