// OpDefs of the fused family (attributes and semantics: ir/ops/fused_layers.h).
#include "ir/ops/fused_layers.h"

#include "ir/grad.h"
#include "ir/op.h"

namespace kiln {

bool fusable_activation(ActType act) {
  return act == ActType::kRelu || act == ActType::kSigmoid || act == ActType::kTanh || act == ActType::kSoftrelu;
}

namespace {

void check_activation(ActType act) {
  KILN_CHECK(fusable_activation(act), NotSupported,
             "act_type '{}' has no fused form (relu, sigmoid, tanh and softrelu do)", print_attr(act));
}

// The layer's own inference on its first `n` inputs (data, weight[, bias]).
template <typename LayerAttrs>
void infer_layer(OpId layer, const LayerAttrs& a, std::span<const TensorType> in, size_t n,
                 std::vector<TensorType>& out) {
  infer_types(op_def(layer), OpAttrs::make(a), in.first(n), out);
}

void infer_conv_act(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<ConvActAttrs>();
  check_activation(a.act_type);
  const size_t layer_inputs = a.no_bias ? 2 : 3, want = layer_inputs + (a.with_sum ? 1 : 0);
  KILN_CHECK(in.size() == want, ValueError,
             "expected {} inputs (data, weight{}{}) with no_bias={} and with_sum={}, got {}", want,
             a.no_bias ? "" : ", bias", a.with_sum ? ", sum" : "", print_attr(a.no_bias), print_attr(a.with_sum),
             in.size());
  infer_layer(OpId::kConvolution, static_cast<const ConvolutionAttrs&>(a), in, layer_inputs, out);
  if (a.with_sum)
    KILN_CHECK(in[layer_inputs] == out[0], ShapeError, "sum is {}{} but the convolution's output is {}{}",
               dtype_short_name(in[layer_inputs].dtype), in[layer_inputs].shape, dtype_short_name(out[0].dtype),
               out[0].shape);
}

void infer_fc_act(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<FcActAttrs>();
  check_activation(a.act_type);
  const size_t want = a.no_bias ? 2 : 3;
  KILN_CHECK(in.size() == want, ValueError, "expected {} inputs (data, weight{}) with no_bias={}, got {}", want,
             a.no_bias ? "" : ", bias", print_attr(a.no_bias), in.size());
  infer_layer(OpId::kFullyConnected, static_cast<const FullyConnectedAttrs&>(a), in, want, out);
}

// The unfused chain's gradient: dz = _backward_Activation(dy, y), the
// residual's gradient is dz, and the layer's own GradFn turns dz into the
// gradients of data, weight and bias.
template <typename LayerAttrs>
void grad_layer_act(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads, OpId layer, const LayerAttrs& a,
                    ActType act, bool with_sum) {
  GradValue dz = b.op(OpId::kActivationBackward, {g.out_grads[0], g.outputs[0]}, OpAttrs::make(ActivationAttrs{act}));
  const size_t n = a.no_bias ? 2 : 3;
  if (with_sum && g.needs_grad[n]) in_grads[n] = dz;
  const OpAttrs layer_attrs = OpAttrs::make(a);
  const GradValue dzs[] = {dz};
  const GradArgs sub{layer_attrs, g.inputs.first(n), {}, dzs, g.needs_grad.first(n), g.input_types.first(n)};
  op_def(layer).grad(b, sub, in_grads.first(n));
}

void grad_conv_act(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  const auto& a = g.attrs.as<ConvActAttrs>();
  grad_layer_act(b, g, in_grads, OpId::kConvolution, static_cast<const ConvolutionAttrs&>(a), a.act_type, a.with_sum);
}

void grad_fc_act(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  const auto& a = g.attrs.as<FcActAttrs>();
  grad_layer_act(b, g, in_grads, OpId::kFullyConnected, static_cast<const FullyConnectedAttrs&>(a), a.act_type, false);
}

}  // namespace

void register_fused_layer_ops(OpRegistry& r) {
  OpDef& conv = r.define(OpId::kConvAct, "act(Convolution(data, weight[, bias]) + sum), sum optional (fused).");
  conv.num_inputs = -1;  // 2 to 4, per no_bias and with_sum
  conv.input_names = {"data", "weight", "bias", "sum"};
  conv.infer = infer_conv_act;
  conv.parse_attrs = parse_attrs_as<ConvActAttrs>;
  conv.grad = grad_conv_act;
  conv.grad_uses_outputs = true;

  OpDef& fc = r.define(OpId::kFcAct, "act(FullyConnected(data, weight[, bias])) (fused).");
  fc.num_inputs = -1;  // 2 or 3, per no_bias
  fc.input_names = {"data", "weight", "bias"};
  fc.infer = infer_fc_act;
  fc.parse_attrs = parse_attrs_as<FcActAttrs>;
  fc.grad = grad_fc_act;
  fc.grad_uses_outputs = true;
}

}  // namespace kiln
