// CPU kernels of BatchNorm and _backward_BatchNorm, on oneDNN's batch
// normalization primitives.
//
// Data of any rank is viewed as [outer, channels, inner] around the channel
// axis (a plain 3-D array to oneDNN), so every axis works without copies.
// Train mode (KernelContext::is_train and not use_global_stats) normalizes
// with the batch statistics (biased variance, as MXNet), writes them to
// outputs 1 and 2, and then updates moving_mean/moving_var in place (inputs 3
// and 4, which the op declares as mutated). Predict mode normalizes with the
// moving statistics and copies them to outputs 1 and 2, so the backward op
// always finds the statistics the forward used in its (mean, var) inputs and
// only needs the mode, which it reads from its own call's is_train.
// fix_gamma passes a scale of ones; d_gamma is 0.
//
// oneDNN 2.6's backward primitive fails at execution when given separate
// scale and shift (use_scale | use_shift with DNNL_ARG_DIFF_SHIFT), so both
// directions use the packed [2, C] scale-shift form, copied per call (C floats).
#include <algorithm>
#include <cstring>

#include "backends/cpu/onednn_util.h"
#include "ir/ops/conv.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

namespace dn = cpu::onednn;
using dnnl::memory;
using dnnl::normalization_flags;

struct NormProblem {
  memory::desc data;
  normalization_flags flags = normalization_flags::use_scale_shift;
  float eps = 0;
  bool train = false;
  int64_t work = 0;
  std::string key;  // everything above
};

NormProblem make_problem(const BatchNormAttrs& a, const Shape& data, bool is_train) {
  BatchNormDims d = batch_norm_dims(a, data);
  NormProblem p;
  // 4-D (nchw) rather than 3-D: oneDNN's vectorized plain-layout kernel takes nchw, not ncw.
  memory::dims dims{d.outer, d.channels, d.inner, 1};
  p.data = dn::plain_desc(dims);
  p.train = is_train && !a.use_global_stats;
  if (!p.train) p.flags |= normalization_flags::use_global_stats;
  p.eps = static_cast<float>(a.eps);
  dn::append_key(p.key, dims);
  p.key += fmt::format("{}|{}|", static_cast<unsigned>(p.flags), p.eps);
  p.work = 4 * data.size();
  return p;
}

struct ForwardPlan {
  dnnl::batch_normalization_forward prim;
  size_t scratchpad = 0;
};

struct BackwardPlan {
  dnnl::batch_normalization_backward prim;
  size_t scratchpad = 0;
};

dnnl::batch_normalization_forward::primitive_desc forward_pd(const NormProblem& p, dnnl::prop_kind prop) {
  dnnl::batch_normalization_forward::desc desc(prop, p.data, p.eps, p.flags);
  return {desc, dn::scratchpad_attr(), dn::engine()};
}

ForwardPlan make_forward_plan(const NormProblem& p) {
  auto pd = forward_pd(p, p.train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference);
  return {dnnl::batch_normalization_forward(pd), dn::scratchpad_bytes(pd)};
}

BackwardPlan make_backward_plan(const NormProblem& p) {
  dnnl::batch_normalization_backward::desc desc(dnnl::prop_kind::backward, p.data, p.data, p.eps, p.flags);
  dnnl::batch_normalization_backward::primitive_desc pd(desc, dn::scratchpad_attr(), dn::engine(),
                                                        forward_pd(p, dnnl::prop_kind::forward_training));
  return {dnnl::batch_normalization_backward(pd), dn::scratchpad_bytes(pd)};
}

memory::desc vector_desc(const NormProblem& p) { return dn::plain_desc({p.data.dims()[1]}); }
memory::desc scale_shift_desc(const NormProblem& p) { return dn::plain_desc({2, p.data.dims()[1]}); }

// (data, gamma, beta, moving_mean, moving_var) -> (out, mean, var)
void batch_norm_forward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<BatchNormAttrs>();
  NormProblem p = make_problem(a, in[0].shape, ctx.is_train);
  dn::Call call(ctx.run, p.work);
  const int64_t channels = p.data.dims()[1];
  float* moving_mean = in[3].ptr<float>();
  float* moving_var = in[4].ptr<float>();
  float* mean = out[1].ptr<float>();
  float* var = out[2].ptr<float>();
  if (!p.train) {
    std::memcpy(mean, moving_mean, out[1].bytes());
    std::memcpy(var, moving_var, out[2].bytes());
  }
  if (in[0].size() > 0) {
    auto plan = dn::cached<ForwardPlan>(fmt::format("bnorm_fwd|{}{}", p.key, call.threads()), [&] { return make_forward_plan(p); });
    memory::desc vec = vector_desc(p);
    memory scale_shift = call.temp(scale_shift_desc(p));
    float* ss = static_cast<float*>(scale_shift.get_data_handle());
    if (a.fix_gamma) std::fill(ss, ss + channels, 1.0f);
    else std::memcpy(ss, in[1].data, in[1].bytes());
    std::memcpy(ss + channels, in[2].data, in[2].bytes());
    call.run(plan->prim, plan->scratchpad,
             {{DNNL_ARG_SRC, call.wrap(p.data, in[0].data)},
              {DNNL_ARG_DST, call.wrap(p.data, out[0].data)},
              {DNNL_ARG_MEAN, call.wrap(vec, mean)},
              {DNNL_ARG_VARIANCE, call.wrap(vec, var)},
              {DNNL_ARG_SCALE_SHIFT, scale_shift}});
    call.finish();
  } else if (p.train) {  // no samples: statistics of an empty batch
    std::fill(mean, mean + channels, 0.0f);
    std::fill(var, var + channels, 0.0f);
  }
  if (p.train) {
    const float m = a.momentum;
    for (int64_t c = 0; c < channels; ++c) {
      moving_mean[c] = moving_mean[c] * m + mean[c] * (1 - m);
      moving_var[c] = moving_var[c] * m + var[c] * (1 - m);
    }
  }
}

// (out_grad, data, gamma, mean, var) -> (d_data, d_gamma, d_beta)
void batch_norm_backward(const KernelContext& ctx, std::span<const TensorView> in,
                         std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<BatchNormAttrs>();
  if (in[1].size() == 0) {
    for (const TensorView& t : out)
      if (t.size() > 0) std::memset(t.data, 0, t.bytes());
    return;
  }
  NormProblem p = make_problem(a, in[1].shape, ctx.is_train);
  dn::Call call(ctx.run, p.work);
  auto plan = dn::cached<BackwardPlan>(fmt::format("bnorm_bwd|{}{}", p.key, call.threads()), [&] { return make_backward_plan(p); });
  memory::desc vec = vector_desc(p);
  const int64_t channels = p.data.dims()[1];
  memory scale_shift = call.temp(scale_shift_desc(p)), diff_scale_shift = call.temp(scale_shift_desc(p));
  float* ss = static_cast<float*>(scale_shift.get_data_handle());
  if (a.fix_gamma) std::fill(ss, ss + channels, 1.0f);
  else std::memcpy(ss, in[2].data, in[2].bytes());
  std::fill(ss + channels, ss + 2 * channels, 0.0f);  // the shift does not enter the backward
  call.run(plan->prim, plan->scratchpad,
           {{DNNL_ARG_DIFF_DST, call.wrap(p.data, in[0].data)},
            {DNNL_ARG_SRC, call.wrap(p.data, in[1].data)},
            {DNNL_ARG_MEAN, call.wrap(vec, in[3].data)},
            {DNNL_ARG_VARIANCE, call.wrap(vec, in[4].data)},
            {DNNL_ARG_SCALE_SHIFT, scale_shift},
            {DNNL_ARG_DIFF_SRC, call.wrap(p.data, out[0].data)},
            {DNNL_ARG_DIFF_SCALE_SHIFT, diff_scale_shift}});
  call.finish();
  const float* dss = static_cast<const float*>(diff_scale_shift.get_data_handle());
  if (a.fix_gamma) std::memset(out[1].data, 0, out[1].bytes());
  else std::memcpy(out[1].data, dss, out[1].bytes());
  std::memcpy(out[2].data, dss + channels, out[2].bytes());
}

}  // namespace

void register_cpu_batch_norm_kernels() {
  register_kernel(OpId::kBatchNorm, DeviceKind::kCPU, batch_norm_forward);
  register_kernel(OpId::kBatchNormBackward, DeviceKind::kCPU, batch_norm_backward);
}

}  // namespace kiln
