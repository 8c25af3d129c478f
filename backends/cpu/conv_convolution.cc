// CPU kernels of Convolution and its backward ops, on oneDNN.
//
// The primitives choose their layouts (format_tag::any: blocked formats such
// as nChw16c on AVX-512), which run several times faster than plain NCHW
// (oneDNN falls back to im2col + GEMM there, and its backward-weights GEMM
// path is slower still). Blocked layouts pad the channels to whole blocks, so
// layers whose input channels are not a multiple of 16 use nhwc activations
// instead, which oneDNN's kernels run with a channel tail: LeNet's 20 -> 50
// channel 5x5 layer (KILN_PROFILE, batch 256) forward 10.0 -> 7.3 ms, weight
// gradient 11.9 -> 7.5 ms, data gradient 10.4 -> 8.1 ms. Layers with at most
// 4 input channels (first layers) run their forward as im2col + a matrix
// product and their weight gradient as im2col + dot products
// (backends/cpu/conv_im2col.h); 3x3 stride-1 layers with at least 16
// channels run all three as Winograd (backends/cpu/conv_winograd.h). Other
// weight gradients of layers with small outputs (4x4) run as unfolded matrix
// products (gemm_backward_weight, conv_im2col.h says why).
//
// User arrays are NCHW (weights OIHW), so each call reorders its operands
// into the chosen layouts and the result back -- or channel-last (layout
// NHWC, weights OHWI: ir/ops/conv_layout.h), which the primitives then use as
// they are, with no reorder of the activations (the layout oneDNN's 16-bit
// kernels want; the channels-last pass puts 16-bit graphs in it). The float32
// Winograd and im2col are channel-first only; channel-last bf16 3x3 stride-1
// forwards run a bf16 Winograd on CPUs with AVX512-BF16 and no AMX
// (backends/cpu/conv_winograd_bf16.h). Weights are reordered on every
// call in training (they change every step); inference (KernelContext::is_train
// false) takes the reordered weights from the weight cache
// (backends/cpu/weight_cache.h), which compares the weights' bytes with the
// ones it reordered, so a changed weight is never served stale.
//
// bfloat16 and float16 data run the same primitives in that type (fp32
// accumulation inside oneDNN; the channel-first Winograd and im2col are
// float32 only), or widen
// to float32 where this CPU's oneDNN has no kernel for the type.
//
// Plans (primitive descriptors, primitives and the reorders around them) are
// cached per (dtype, shapes, window, groups, bias, post-ops, thread count). The bias
// gradient is not computed here: the GradFn sums out_grad with the `sum` op.
//
// _kiln_conv_act (ir/ops/fused_layers.h) is the forward kernel with oneDNN post-ops:
// a `sum` that adds the residual already in the destination (reordered into
// the primitive's layout with the other inputs), then the activation, both
// applied while each output block is in cache.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/conv_im2col.h"
#include "backends/cpu/conv_winograd.h"
#include "backends/cpu/conv_winograd_bf16.h"
#include "backends/cpu/onednn_util.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/weight_cache.h"
#include "backends/cpu/widen.h"
#include "ir/ops/conv.h"
#include "ir/ops/conv_layout.h"
#include "ir/ops/fused_layers.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

namespace dn = cpu::onednn;
using dnnl::memory;

// One convolution problem in oneDNN's terms.
struct ConvProblem {
  memory::dims src, weights, bias, dst, strides, dilates, pad_l, pad_r;
  bool has_bias = false;
  bool with_sum = false;           // forward post-ops (_kiln_conv_act)
  std::optional<ActType> act;
  bool channels_last = false;  // the user's arrays: data NHWC, weights OHWI (layout attribute)
  bool nhwc = false;           // activations in nhwc rather than a layout oneDNN chooses
  memory::data_type dt = memory::data_type::f32;  // of every operand (f32, bf16 or f16)
  int64_t macs = 0;   // multiply-adds
  std::string key;    // everything above

  // The layout of src or dst (`dims`) the primitives use.
  memory::desc activation_desc(const memory::dims& dims) const {
    return nhwc ? dn::channels_last_desc(dims, dt) : dn::any_desc(dims, dt);
  }
  // The layouts of the user's arrays.
  memory::desc user_activation(const memory::dims& dims) const {
    return channels_last ? dn::channels_last_desc(dims, dt) : dn::plain_desc(dims, dt);
  }
  memory::desc user_weights() const {
    return channels_last ? dn::channels_last_desc(weights, dt, weights.size() - src.size() + 1)
                         : dn::plain_desc(weights, dt);
  }

  dnnl::convolution_forward::desc forward_desc() const {
    auto s = activation_desc(src), w = dn::any_desc(weights, dt), d = activation_desc(dst);
    // Fused convolutions run in inference graphs only: oneDNN may pick faster kernels.
    auto prop = act ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
    if (has_bias)
      return {prop, dnnl::algorithm::convolution_direct, s, w, dn::plain_desc(bias, dt), d, strides, dilates, pad_l, pad_r};
    return {prop, dnnl::algorithm::convolution_direct, s, w, d, strides, dilates, pad_l, pad_r};
  }
};

ConvProblem make_problem(const ConvolutionAttrs& a, const Shape& data, DType dtype, bool with_sum = false,
                         std::optional<ActType> act = std::nullopt) {
  WindowGeometry g = convolution_geometry(a, data);
  ConvProblem p;
  p.channels_last = channels_last(a.layout);
  const int64_t channels = data_channels(data, p.channels_last);
  p.dt = dn::data_type(dtype);
  p.key = fmt::format("{}|", dtype_short_name(dtype));
  // oneDNN's dims are channel-first whatever the memory layout.
  p.src = {data[0], channels};
  for (int i = 0; i < g.nsp; ++i) p.src.push_back(g.in[i]);
  p.dst = dn::to_dims(g.out_shape(data[0], a.num_filter));
  // MXNet's [num_filter, C / groups, k...] is oneDNN's goihw with the group split off.
  if (a.num_group > 1) p.weights = {a.num_group, a.num_filter / a.num_group, channels / a.num_group};
  else p.weights = {a.num_filter, channels};
  for (int i = 0; i < g.nsp; ++i) {
    p.weights.push_back(g.kernel[i]);
    p.strides.push_back(g.stride[i]);
    p.dilates.push_back(g.dilate[i] - 1);  // oneDNN counts the gaps
    p.pad_l.push_back(g.pad_l[i]);
    p.pad_r.push_back(g.pad_r[i]);
  }
  p.has_bias = !a.no_bias;
  if (p.has_bias) p.bias = {a.num_filter};
  for (const auto* d : {&p.src, &p.weights, &p.dst, &p.strides, &p.dilates, &p.pad_l, &p.pad_r})
    dn::append_key(p.key, *d);
  p.key += p.has_bias ? "bias|" : "|";
  p.with_sum = with_sum;
  p.act = act;
  p.key += dn::post_ops_key(with_sum, act);
  // Blocked layouts would pad these channels to a multiple of 16 (see the top
  // of this file); channel-last arrays are used as they are.
  p.nhwc = p.channels_last || (p.src.size() == 4 && channels % 16 != 0);
  p.key += p.channels_last ? "last|" : p.nhwc ? "nhwc|" : "|";
  p.macs = g.out_shape(data[0], a.num_filter).size() * (channels / a.num_group) * g.kernel_size();
  return p;
}

struct ForwardPlan {
  dnnl::convolution_forward prim;
  size_t scratchpad = 0;
  dn::Conversion src, weights, dst;
  dn::Conversion sum;  // the residual into dst's layout (with_sum)
  memory::desc bias;
};

struct BackwardDataPlan {
  dnnl::convolution_backward_data prim;
  size_t scratchpad = 0;
  dn::Conversion diff_dst, weights, diff_src;
};

struct BackwardWeightsPlan {
  dnnl::convolution_backward_weights prim;
  size_t scratchpad = 0;
  dn::Conversion src, diff_dst, diff_weights;
};

dnnl::convolution_forward::primitive_desc forward_pd(const ConvProblem& p) {
  return {p.forward_desc(), dn::post_ops_attr(p.with_sum, p.act), dn::engine()};
}

ForwardPlan make_forward_plan(const ConvProblem& p) {
  auto pd = forward_pd(p);
  ForwardPlan plan;
  plan.prim = dnnl::convolution_forward(pd);
  plan.scratchpad = dn::scratchpad_bytes(pd);
  plan.src = {p.user_activation(p.src), pd.src_desc()};
  plan.weights = {p.user_weights(), pd.weights_desc()};
  plan.dst = {pd.dst_desc(), p.user_activation(p.dst)};
  if (p.with_sum) plan.sum = {p.user_activation(p.dst), pd.dst_desc()};
  if (p.has_bias) plan.bias = dn::plain_desc(p.bias, p.dt);
  return plan;
}

BackwardDataPlan make_backward_data_plan(const ConvProblem& p) {
  dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, p.activation_desc(p.src),
                                             dn::any_desc(p.weights, p.dt), p.activation_desc(p.dst), p.strides,
                                             p.dilates, p.pad_l, p.pad_r);
  dnnl::convolution_backward_data::primitive_desc pd(desc, dn::scratchpad_attr(), dn::engine(), forward_pd(p));
  BackwardDataPlan plan;
  plan.prim = dnnl::convolution_backward_data(pd);
  plan.scratchpad = dn::scratchpad_bytes(pd);
  plan.diff_dst = {p.user_activation(p.dst), pd.diff_dst_desc()};
  plan.weights = {p.user_weights(), pd.weights_desc()};
  plan.diff_src = {pd.diff_src_desc(), p.user_activation(p.src)};
  return plan;
}

BackwardWeightsPlan make_backward_weights_plan(const ConvProblem& p) {
  dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, p.activation_desc(p.src),
                                                dn::any_desc(p.weights, p.dt), p.activation_desc(p.dst), p.strides,
                                                p.dilates, p.pad_l, p.pad_r);
  dnnl::convolution_backward_weights::primitive_desc pd(desc, dn::scratchpad_attr(), dn::engine(), forward_pd(p));
  BackwardWeightsPlan plan;
  plan.prim = dnnl::convolution_backward_weights(pd);
  plan.scratchpad = dn::scratchpad_bytes(pd);
  plan.src = {p.user_activation(p.src), pd.src_desc()};
  plan.diff_dst = {p.user_activation(p.dst), pd.diff_dst_desc()};
  plan.diff_weights = {pd.diff_weights_desc(), p.user_weights()};
  return plan;
}

bool any_empty(std::span<const TensorView> in, std::span<const TensorView> out) {
  for (const TensorView& t : in)
    if (t.size() == 0) return true;
  for (const TensorView& t : out)
    if (t.size() == 0) return true;
  return false;
}

// Zero-sized batches or channels: the sums are empty.
void zero_outputs(std::span<const TensorView> out) {
  for (const TensorView& t : out)
    if (t.size() > 0) std::memset(t.data, 0, t.bytes());
}

float activate(ActType act, float v) {
  switch (act) {
    case ActType::kRelu:
      return std::max(v, 0.0f);
    case ActType::kSigmoid:
      return 1.0f / (1.0f + std::exp(-v));
    case ActType::kTanh:
      return std::tanh(v);
    case ActType::kSoftrelu:
      return std::max(v, 0.0f) + std::log1p(std::exp(-std::abs(v)));
    case ActType::kSoftsign:
      break;
  }
  KILN_ASSERT(!"softsign is not fused (inference rejects it)");
  return v;
}

// `p` as a forward Winograd problem (backends/cpu/conv_winograd.h) when its
// shape allows one: 2-D, 3x3, stride 1, no dilation, one group, no activation
// or ReLU; nullopt otherwise.
std::optional<cpu::WinogradConv> winograd_shape(const ConvProblem& p) {
  if (p.src.size() != 4 || p.weights.size() != 4 || p.weights[2] != 3 || p.weights[3] != 3) return std::nullopt;
  if (p.strides != memory::dims{1, 1} || p.dilates != memory::dims{0, 0}) return std::nullopt;
  if (p.act && *p.act != ActType::kRelu) return std::nullopt;
  return cpu::WinogradConv{.batch = p.src[0], .in_channels = p.src[1], .height = p.src[2], .width = p.src[3],
                           .out_channels = p.dst[1], .out_height = p.dst[2], .out_width = p.dst[3],
                           .pad_top = p.pad_l[0], .pad_left = p.pad_l[1]};
}

// The data gradient of the forward `p` (padding at most 2) as a forward
// convolution of the output gradient with the weights transposed and rotated.
cpu::WinogradConv data_gradient_problem(const ConvProblem& p) {
  return {.batch = p.dst[0], .in_channels = p.dst[1], .height = p.dst[2], .width = p.dst[3],
          .out_channels = p.src[1], .out_height = p.src[2], .out_width = p.src[3],
          .pad_top = 2 - p.pad_l[0], .pad_left = 2 - p.pad_l[1], .transposed_weight = true};
}

// The float32 channel-first Winograd for `p` when it applies and pays, as a
// forward convolution (the data gradient: of the output gradient with the
// weights transposed and rotated); nullopt: the direct convolution runs.
struct WinogradChoice {
  cpu::WinogradConv conv;
  int tile = 0;
};

std::optional<WinogradChoice> choose_winograd(const ConvProblem& p, bool backward_data) {
  if (p.dt != memory::data_type::f32 || p.channels_last) return std::nullopt;
  std::optional<cpu::WinogradConv> s = winograd_shape(p);
  if (!s) return std::nullopt;
  if (backward_data) {
    if (p.pad_l[0] > 2 || p.pad_l[1] > 2) return std::nullopt;
    s = data_gradient_problem(p);
  }
  int tile = cpu::winograd_tile(*s);
  if (tile == 0) return std::nullopt;
  return WinogradChoice{*s, tile};
}

// The bfloat16 Winograd (backends/cpu/conv_winograd_bf16.h) for `p` when it
// applies and pays on this CPU, as a forward convolution (the data gradient:
// of the output gradient with the weights transposed and rotated).
std::optional<cpu::WinogradConv> choose_winograd_bf16(const ConvProblem& p, bool backward_data) {
  if (p.dt != memory::data_type::bf16) return std::nullopt;
  std::optional<cpu::WinogradConv> s = winograd_shape(p);
  if (!s) return std::nullopt;
  if (backward_data) {
    if (p.pad_l[0] > 2 || p.pad_l[1] > 2) return std::nullopt;
    s = data_gradient_problem(p);
  }
  if (!cpu::winograd_bf16_applies(*s)) return std::nullopt;
  return s;
}

// `p` as an im2col problem (backends/cpu/conv_im2col.h): ungrouped 2-D
// without post-ops; nullopt otherwise.
std::optional<cpu::Im2colConv> im2col_problem(const ConvProblem& p) {
  if (p.src.size() != 4 || p.weights.size() != 4 || p.with_sum || p.act || p.channels_last) return std::nullopt;
  cpu::Im2colConv s{.batch = p.src[0], .channels = p.src[1], .height = p.src[2], .width = p.src[3],
                    .out_channels = p.dst[1], .out_height = p.dst[2], .out_width = p.dst[3],
                    .kernel_h = p.weights[2], .kernel_w = p.weights[3], .stride_h = p.strides[0],
                    .stride_w = p.strides[1], .dilate_h = p.dilates[0] + 1, .dilate_w = p.dilates[1] + 1,
                    .pad_top = p.pad_l[0], .pad_left = p.pad_l[1]};
  return s;
}

// The im2col forward for `p` when it applies: float32, at most a few input channels.
std::optional<cpu::Im2colConv> choose_im2col(const ConvProblem& p) {
  if (p.dt != memory::data_type::f32) return std::nullopt;
  auto s = im2col_problem(p);
  if (!s || !cpu::im2col_applies(*s)) return std::nullopt;
  return s;
}

void run_forward(const KernelContext& ctx, const ConvProblem& p, std::span<const TensorView> in, const TensorView& out) {
  if (auto s = choose_winograd_bf16(p, false)) {
    return cpu::winograd_conv_bf16(ctx.run, *s, p.channels_last, in[0].ptr<BFloat16>(), in[1].ptr<BFloat16>(),
                                   p.has_bias ? in[2].ptr<BFloat16>() : nullptr,
                                   p.with_sum ? in[p.has_bias ? 3 : 2].ptr<BFloat16>() : nullptr, p.act.has_value(),
                                   !ctx.is_train, out.ptr<BFloat16>());
  }
  if (auto wino = choose_winograd(p, false)) {
    return cpu::winograd_conv(ctx.run, wino->conv, wino->tile, in[0].ptr<float>(), in[1].ptr<float>(),
                              p.has_bias ? in[2].ptr<float>() : nullptr,
                              p.with_sum ? in[p.has_bias ? 3 : 2].ptr<float>() : nullptr, p.act, !ctx.is_train,
                              out.ptr<float>());
  }
  if (auto im2col = choose_im2col(p)) {
    return cpu::im2col_forward(ctx.run, *im2col, in[0].ptr<float>(), in[1].ptr<float>(),
                               p.has_bias ? in[2].ptr<float>() : nullptr, out.ptr<float>());
  }
  dn::Call call(ctx.run, p.macs);
  const std::string key = fmt::format("conv_fwd|{}{}", p.key, call.threads());
  auto plan = dn::cached<ForwardPlan>(key, [&] { return make_forward_plan(p); });
  const void* sum = p.with_sum ? in[p.has_bias ? 3 : 2].data : nullptr;
  // Inference: the weights in the primitive's layout from the weight cache.
  std::shared_ptr<const cpu::DerivedWeights> weights;
  if (plan->weights.reorder && !ctx.is_train) {
    weights = cpu::weight_cache_find(key, in[1].data, in[1].bytes(), plan->weights.to.get_size(), [&](void* to) {
      memory from = call.wrap(plan->weights.from, in[1].data), dst = call.wrap(plan->weights.to, to);
      plan->weights.reorder->execute(dn::Call::stream(), from, dst);
      dn::Call::stream().wait();
    });
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, call.in(plan->src, in[0].data)},
                                       {DNNL_ARG_WEIGHTS, weights ? call.wrap(plan->weights.to, weights->data())
                                                                  : call.in(plan->weights, in[1].data)},
                                       {DNNL_ARG_DST, sum ? call.accumulate(plan->dst, plan->sum, sum, out.data)
                                                          : call.out(plan->dst, out.data)}};
  if (p.has_bias) args.emplace(DNNL_ARG_BIAS, call.wrap(plan->bias, in[2].data));
  call.run(plan->prim, plan->scratchpad, std::move(args));
  call.finish();
}

// (data, weight[, bias]) -> out
void convolution_forward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (any_empty(in, out)) return zero_outputs(out);
  if (!dn::computes_in(in[0].dtype)) return cpu::widen(ctx, in, out);
  run_forward(ctx, make_problem(ctx.attrs.as<ConvolutionAttrs>(), in[0].shape, in[0].dtype), in, out[0]);
}

// _kiln_conv_act: (data, weight[, bias][, sum]) -> act(conv + sum)
void conv_act_forward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<ConvActAttrs>();
  if (out[0].size() == 0) return;
  if (out[0].dtype != DType::kFloat32 && (any_empty(in, out) || !dn::computes_in(out[0].dtype)))
    return cpu::widen(ctx, in, out);
  if (any_empty(in, out)) {  // no input channels: the convolution is 0 (as convolution_forward has it)
    float* y = out[0].ptr<float>();
    const float* sum = a.with_sum ? in.back().ptr<float>() : nullptr;
    for (int64_t i = 0; i < out[0].size(); ++i) y[i] = activate(a.act_type, sum ? sum[i] : 0.0f);
    return;
  }
  run_forward(ctx, make_problem(a, in[0].shape, in[0].dtype, a.with_sum, a.act_type), in, out[0]);
}

// (out_grad, weight) -> d_data
void convolution_backward_data(const KernelContext& ctx, std::span<const TensorView> in,
                               std::span<const TensorView> out) {
  if (any_empty(in, out)) return zero_outputs(out);
  if (!dn::computes_in(in[0].dtype)) return cpu::widen(ctx, in, out);
  const auto& a = ctx.attrs.as<ConvolutionBackwardDataAttrs>();
  ConvProblem p = make_problem(a, a.data_shape, in[0].dtype);
  if (auto wino = choose_winograd(p, true)) {
    return cpu::winograd_conv(ctx.run, wino->conv, wino->tile, in[0].ptr<float>(), in[1].ptr<float>(), nullptr,
                              nullptr, std::nullopt, /*cache_weights=*/false, out[0].ptr<float>());
  }
  if (auto s = choose_winograd_bf16(p, true)) {
    return cpu::winograd_conv_bf16(ctx.run, *s, p.channels_last, in[0].ptr<BFloat16>(), in[1].ptr<BFloat16>(),
                                   nullptr, nullptr, false, /*cache_weights=*/false, out[0].ptr<BFloat16>());
  }
  dn::Call call(ctx.run, p.macs);
  auto plan = dn::cached<BackwardDataPlan>(fmt::format("conv_bwd_data|{}{}", p.key, call.threads()), [&] { return make_backward_data_plan(p); });
  call.run(plan->prim, plan->scratchpad,
           {{DNNL_ARG_DIFF_DST, call.in(plan->diff_dst, in[0].data)},
            {DNNL_ARG_WEIGHTS, call.in(plan->weights, in[1].data)},
            {DNNL_ARG_DIFF_SRC, call.out(plan->diff_src, out[0].data)}});
  call.finish();
}

// (out_grad, data) -> d_weight
void convolution_backward_weight(const KernelContext& ctx, std::span<const TensorView> in,
                                 std::span<const TensorView> out) {
  if (any_empty(in, out)) return zero_outputs(out);
  if (!dn::computes_in(in[0].dtype)) return cpu::widen(ctx, in, out);
  ConvolutionAttrs a = ctx.attrs.as<ConvolutionAttrs>();
  a.no_bias = true;  // the bias gradient is a `sum` in the GradFn
  ConvProblem p = make_problem(a, in[1].shape, in[0].dtype);
  if (auto wino = choose_winograd(p, false)) {
    return cpu::winograd_weight_grad(ctx.run, wino->conv, wino->tile, in[1].ptr<float>(), in[0].ptr<float>(),
                                     out[0].ptr<float>());
  }
  if (auto s = choose_winograd_bf16(p, false)) {
    return cpu::winograd_weight_grad_bf16(ctx.run, *s, p.channels_last, in[1].ptr<BFloat16>(), in[0].ptr<BFloat16>(),
                                          out[0].ptr<BFloat16>());
  }
  if (auto im2col = choose_im2col(p)) {
    return cpu::im2col_backward_weight(ctx.run, *im2col, in[1].ptr<float>(), in[0].ptr<float>(),
                                       out[0].ptr<float>());
  }
  if (auto s = im2col_problem(p); s && cpu::gemm_weight_applies(*s))
    return cpu::gemm_backward_weight(ctx.run, *s, in[0].dtype, in[1].data, in[0].data, out[0].data);
  dn::Call call(ctx.run, p.macs);
  auto plan = dn::cached<BackwardWeightsPlan>(fmt::format("conv_bwd_weights|{}{}", p.key, call.threads()), [&] { return make_backward_weights_plan(p); });
  call.run(plan->prim, plan->scratchpad,
           {{DNNL_ARG_SRC, call.in(plan->src, in[1].data)},
            {DNNL_ARG_DIFF_DST, call.in(plan->diff_dst, in[0].data)},
            {DNNL_ARG_DIFF_WEIGHTS, call.out(plan->diff_weights, out[0].data)}});
  call.finish();
}

}  // namespace

void register_cpu_convolution_kernels() {
  constexpr auto kAny = HalfSupport::kAny;
  register_kernel(OpId::kConvolution, DeviceKind::kCPU, convolution_forward, kAny);
  register_kernel(OpId::kConvAct, DeviceKind::kCPU, conv_act_forward, kAny);
  register_kernel(OpId::kConvolutionBackwardData, DeviceKind::kCPU, convolution_backward_data, kAny);
  register_kernel(OpId::kConvolutionBackwardWeight, DeviceKind::kCPU, convolution_backward_weight, kAny);
}

}  // namespace kiln
