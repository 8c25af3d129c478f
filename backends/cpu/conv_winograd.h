// Winograd convolution F(m x m, 3 x 3) for float32 NCHW 3x3 stride-1
// convolutions on the CPU (Lavin & Gray, "Fast Algorithms for Convolutional
// Neural Networks", 2015).
//
//   cpu::WinogradConv s{.batch = 256, .in_channels = 64, .height = 28, .width = 28, .out_channels = 64,
//                       .out_height = 28, .out_width = 28, .pad_top = 1, .pad_left = 1};
//   if (cpu::winograd_tile(s) > 0) cpu::winograd_conv(ctx.run, s, x, w, bias, sum, relu, y);
//
// Each m x m block of outputs ("tile") is computed from an (m+2) x (m+2)
// block of inputs as Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A, where the elementwise
// product summed over input channels becomes (m+2)² independent matrix
// products [tiles x C] . [C x K] (oneDNN's batched matmul). Multiply-adds per
// output fall from 9 C K to (m+2)²/m² C K: 2.25x fewer for m = 2, 4x fewer
// for m = 4 (less where the output size is not a multiple of m). The price is
// rounding: F(4x4) multiplies by up to 8 and divides by 24 inside the
// transforms, so its float32 error is about 10x that of the direct
// convolution (tests/frontend/conv_winograd_test.cc states the tolerance).
// A non-finite input reaches every output of the tiles whose input window
// holds it (more outputs than the direct convolution's 9), as NaN where a
// transform subtracts an infinity from itself.
//
// Transforms are vectorized over 8 channels at a time (AVX2). With at least
// as many images as threads, each thread takes a share of the batch and runs
// input transform, matmul and output transform on it alone, in chunks of a
// few MiB (one parallel region per call: no barriers for a descheduled thread
// to stall); smaller batches share each step among the threads. Training
// transforms the weights on every call (they change every step); inference
// (cache_weights) takes them from the weight cache, which checks that the
// weights are unchanged (backends/cpu/weight_cache.h): 512 channels transform
// 9 MiB of weights into 36 MiB. Scratch comes from the device's storage pool.
//
// Used by Convolution, _kiln_conv_act (bias, residual and ReLU applied in the
// output transform) and the data and weight gradients of Convolution
// (backends/cpu/conv_convolution.cc, choose_winograd). The weight gradient is
// the same algorithm transposed (winograd_weight_grad): 2.2-2.8x faster than
// oneDNN's direct backward-weights on ResNet-18's layers, which ran at ~90%
// of the FMA peak doing 2.25-4x the multiply-adds.
//
// Thread safety: calls may run concurrently; the mode below is a process-wide
// atomic.
#pragma once

#include <cstdint>
#include <optional>

#include "ir/ops/nn.h"
#include "runtime/engine.h"

namespace kiln::cpu {

// One 2-D convolution with a 3x3 kernel, stride 1, dilation 1, one group:
// data [batch, in_channels, height, width] -> [batch, out_channels,
// out_height, out_width], padded by pad_top / pad_left zeros before the first
// row / column (and as many as out_height / out_width need after the last).
struct WinogradConv {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, out_height = 0, out_width = 0;
  int64_t pad_top = 0, pad_left = 0;
  // false: weight [out_channels, in_channels, 3, 3] (forward).
  // true: weight [in_channels, out_channels, 3, 3] used transposed and rotated
  // by 180 degrees (the data gradient of a forward convolution, computed as a
  // convolution of the output gradient).
  bool transposed_weight = false;
};

// The tile size m the current mode picks for `s` (2 or 4), or 0 when Winograd
// does not apply or does not pay: too few channels (the transforms cost more
// than the products save), or outputs so small that padding them to whole
// tiles wastes the saving.
int winograd_tile(const WinogradConv& s);

// The mode: 0 off, 2 F(2x2, 3x3) only, 4 F(4x4, 3x3) where it pays (F(2x2)
// elsewhere). Initially from the environment variable KILN_WINOGRAD ("0",
// "2" or "4"; unset: 4); winograd_set_mode changes it for the process (A/B
// benchmarks, tests). Returns the previous mode.
int winograd_mode();
int winograd_set_mode(int mode);

// y = act(conv(x, w) + bias + sum) with tile size `tile` (2 or 4). bias
// [out_channels] and sum (shaped like y; may be y itself) may be null; act is
// none or kRelu. With `cache_weights` (inference) the transformed weights
// come from the weight cache (backends/cpu/weight_cache.h) while w's contents
// are unchanged, instead of being transformed per call.
void winograd_conv(const engine::RunContext& run, const WinogradConv& s, int tile, const float* x, const float* w,
                   const float* bias, const float* sum, std::optional<ActType> act, bool cache_weights, float* y);

// dw [out_channels][in_channels][3][3] = the gradient of conv(x, w) with
// respect to w for the output gradient dy (shaped like y), with tile size
// `tile`: Gᵀ [Σ over tiles (Bᵀ x B)ᵀ . (A dy Aᵀ)] G, the forward's algorithm
// transposed, with as many fewer multiply-adds. s.transposed_weight must be
// false.
void winograd_weight_grad(const engine::RunContext& run, const WinogradConv& s, int tile, const float* x,
                          const float* dy, float* dw);

}  // namespace kiln::cpu
