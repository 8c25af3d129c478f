// channels-last: runs 16-bit convolutions and the pooling and pointwise ops
// between them on channel-last data (NHWC: ir/ops/conv_layout.h), with
// transposes only where a region of such ops meets the rest of the graph.
//
//   ir::Graph out = passes::run_pipeline(g, "channels-last,eliminate-dead-code", ctx);
//
// oneDNN's 16-bit convolutions (AVX512-BF16, AMX) and cuDNN's tensor-core
// ones run on channel-last activations; given channel-first arrays they
// reorder the input and the output on every call, which cost a quarter of
// the convolutions' time in a bfloat16 ResNet-18. This pass moves whole
// regions instead:
//  - a Convolution or _kiln_conv_act with 4-D float16/bfloat16 data in the
//    channel-first layout gets layout NHWC: its data (and the residual of a
//    fused sum) read the channel-last form of their value, its weight a
//    [F, kh, kw, C / groups] transpose of the weight;
//  - a Pooling whose data has a channel-last form (max or average with the
//    "valid" convention, or global, without dilation: what channel-last
//    pooling computes without rescaling) becomes channel-last too;
//  - a pointwise op (arithmetic, comparisons, unary math, activations, casts,
//    add_n, where, fused elementwise groups) whose inputs all have
//    channel-last forms of its output's shape runs on those.
// A value's channel-first form is made (one transpose) only where some other
// op or a graph output reads it; a channel-first value gets its channel-last
// form (one transpose) the first time a converted op reads it. Results are
// the same values up to the convolutions' summation order, which the layout
// may change. float32 graphs are left alone (Kiln's float32 kernels are
// channel-first: Winograd, im2col). PassStats::rewritten counts the ops moved
// to channel-last, `added` the transposes.
#pragma once

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

ir::Graph channels_last(const ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
