// Attributes of the fused-layer family: Kiln-internal inference ops that passes
// make from chains of ordinary ops (passes/fuse_conv_activation.h), so one
// kernel call does the work of several. They are never exported (CachedOp
// exports the raw traced graph) and never written by users.
//
//   ConvActAttrs c;                          // Convolution's attributes ...
//   c.kernel = Shape{3, 3}; c.num_filter = 64;
//   c.act_type = ActType::kRelu;             // ... plus the activation
//   c.with_sum = true;                       // and a residual input
//   NDArray y = invoke1(OpId::kConvAct, {x, w, b, shortcut}, OpAttrs::make(c));
//   // y == relu(Convolution(x, w, b) + shortcut)
//
// Semantics (inference in ir/ops/fused_layers.cc, CPU kernels on oneDNN post-ops in
// backends/cpu/conv_convolution.cc and backends/cpu/nn_dense.cc):
//   - _kiln_conv_act(data, weight[, bias][, sum]) = act(Convolution(data,
//     weight[, bias]) + sum). bias is absent when no_bias; sum (the shape of
//     the output) is present when with_sum.
//   - _kiln_fc_act(data, weight[, bias]) = act(FullyConnected(data, weight[,
//     bias])).
// act_type is relu, sigmoid, tanh or softrelu (oneDNN has eltwise post-ops
// for these; softsign is rejected with NotSupported). Both ops are float32
// only, like Convolution's kernel and the fused FullyConnected kernel.
// Their gradients are the unfused chain's (an _backward_Activation from the
// output, then Convolution's or FullyConnected's own gradient), so a graph
// fused in predict mode still differentiates if it is recorded.
#pragma once

#include "ir/ops/conv.h"
#include "ir/ops/nn.h"

namespace kiln {

// _kiln_conv_act: every Convolution attribute, the activation and whether a
// residual `sum` input follows the weights and bias.
struct ConvActAttrs : ConvolutionAttrs {
  ActType act_type = ActType::kRelu;
  bool with_sum = false;
  template <typename V>
  void fields(V& v) {
    ConvolutionAttrs::fields(v);
    v("act_type", act_type, kRequired);
    v("with_sum", with_sum);
  }
};

// _kiln_fc_act: every FullyConnected attribute and the activation.
struct FcActAttrs : FullyConnectedAttrs {
  ActType act_type = ActType::kRelu;
  template <typename V>
  void fields(V& v) {
    FullyConnectedAttrs::fields(v);
    v("act_type", act_type, kRequired);
  }
};

// Whether the fused ops (and their oneDNN post-ops) implement `act`.
bool fusable_activation(ActType act);

}  // namespace kiln
