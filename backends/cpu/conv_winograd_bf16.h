// Winograd F(2x2, 3x3) for channel-last bfloat16 convolutions on CPUs with
// AVX512-BF16 but no AMX (AMD Zen 4 and the like).
//
//   cpu::WinogradConv s{...};   // as for conv_winograd.h
//   if (cpu::winograd_bf16_applies(s))
//     cpu::winograd_conv_bf16(ctx.run, s, /*channels_last=*/true, x, w, bias, sum, relu,
//                             /*cache_weights=*/true, y);
//
// Why it exists: on such CPUs oneDNN's bf16 direct convolutions run ResNet's
// 3x3 layers at 83-99% of the machine's bf16 dot-product peak, so only fewer
// multiply-adds make them faster. F(2x2) needs 16 per 2x2 output tile and
// input/output channel pair instead of 36 (2.25x fewer; 1.7x on 7x7 images,
// whose tiles overhang). F(4x4) is not offered in bf16: its transforms scale
// values by up to 8 and 1/24, which bf16's 8-bit mantissa does not survive.
//
// Arrays are channel-last -- x [batch][height][width][in_channels], weights
// [out_channels][3][3][in_channels] (OHWI), y and sum [batch][out_height]
// [out_width][out_channels] -- or channel-first (NCHW, weights OIHW), all
// bfloat16, bias [out_channels]. With s.transposed_weight the weights are
// those of the forward convolution whose data gradient this is: [in_channels]
// [3][3][out_channels] (or [in_channels][out_channels][3][3]) used
// transposed and rotated by 180 degrees. Channel-first arrays are transposed
// to channel-last a few images at a time in per-thread buffers (and the
// output back): the inference graphs' convolutions are channel-last already,
// training's are channel-first.

// Numerics: the input and weight transforms are computed in float32 from the
// bf16 values and rounded once to bf16 (the products' operands), the
// products are summed in float32 (vdpbf16ps), and the output transform,
// bias, residual and ReLU are float32 until the one final rounding. The
// extra error over a direct bf16 convolution is the rounding of the
// transformed operands: a few bf16 ulps of the output's magnitude
// (tests/frontend/conv_winograd_bf16_test.cc states the bound). A non-finite
// input reaches every output of the tiles whose input window holds it (up to
// 16 outputs, where the direct convolution has 9), as NaN where a transform
// subtracts an infinity from itself -- as in the float32 Winograd.
//
// Work is cut into blocks of a few dozen tiles that stay in the core's L2:
// each block's transformed inputs V [16][tiles][C] are multiplied, 64 output
// channels at a time, with the transformed weights U by a register-blocked
// kernel (6 tiles x 64 channels of float32 sums), and the 16 products of
// each tile go through the output transform while in cache. Blocks are
// shared among the threads. Inference (cache_weights) takes U from the weight
// cache (backends/cpu/weight_cache.h) while w's bytes are unchanged.
//
// Thread safety: calls may run concurrently.
#pragma once

#include "backends/cpu/conv_winograd.h"
#include "ir/dtype.h"

namespace kiln::cpu {

// Whether winograd_conv_bf16 runs `s` and pays: the CPU has AVX512-BF16 and
// no AMX (whose tile products make oneDNN's direct kernels faster than these
// transforms can follow), the Winograd mode (winograd_mode) is not off, both
// channel counts are multiples of 64, and F(2x2) saves at least 1.5x the
// multiply-adds after padding to whole tiles.
bool winograd_bf16_applies(const WinogradConv& s);

// The CPU half of winograd_bf16_applies: AVX512-BF16 without AMX-BF16.
bool winograd_bf16_cpu();

// y = relu?(conv(x, w) + bias + sum) as above, in the layout `channels_last`
// says. bias and sum may be null; sum may be y itself. Requires
// winograd_bf16_applies(s) (checked: the CPU part is a hard requirement, the
// instructions would fault without it).
void winograd_conv_bf16(const engine::RunContext& run, const WinogradConv& s, bool channels_last, const BFloat16* x,
                        const BFloat16* w, const BFloat16* bias, const BFloat16* sum, bool relu, bool cache_weights,
                        BFloat16* y);

// dw = the gradient of conv(x, w) with respect to w for the output gradient
// dy, in the layout `channels_last` says (dw shaped like w): Gᵀ [Σ over tiles
// (Bᵀ x B)ᵀ . (A dy Aᵀ)] G, the forward's algorithm transposed, the products
// in bf16 summed in float32 by oneDNN's batched matmul over chunks of images,
// rounded once to bf16. Requires winograd_bf16_applies(s) and
// !s.transposed_weight.
void winograd_weight_grad_bf16(const engine::RunContext& run, const WinogradConv& s, bool channels_last,
                               const BFloat16* x, const BFloat16* dy, BFloat16* dw);

}  // namespace kiln::cpu
