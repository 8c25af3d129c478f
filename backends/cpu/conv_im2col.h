// 2-D convolutions through unfolded inputs (im2col). With few input channels
// (first layers on grey or RGB images): the forward as im2col + a matrix
// product, the weight gradient as im2col + dot products. With small outputs
// and any channel count: the weight gradient as im2col + matrix products
// (gemm_backward_weight, at the end).
//
//   cpu::Im2colConv s = ...;  // from the op's attributes
//   if (cpu::im2col_applies(s)) cpu::im2col_forward(ctx.run, s, x, w, bias, y);
//
// oneDNN runs such layers with a special-case kernel at a few GFLOP/s (LeNet's
// 1 -> 20 channel 3x3 layer: 3.9 ms in nhwc, 5.2 ms blocked, for batch 256).
// Here a chunk of images is unfolded into col [C kh kw][images x OH x OW]
// (each row one kernel tap of one input channel, zeros where the window leaves
// the image), and Y = W . col ([K][C kh kw] . [C kh kw][P], P = images x OH x
// OW) is one oneDNN matmul: 1.4 ms for that layer. The unfolded input is
// C kh kw / (stride²) times the input's size, so each thread's chunks are
// sized to keep col in its L2 cache between unfolding and the product (512
// KiB; LeNet training with 256 KiB..1 MiB chunks ran at the same speed, 2 MiB
// 3% and 8 MiB 15% slower). With more input channels oneDNN's own kernels
// (nhwc where blocked layouts would pad the channels) were faster than this
// path for the forward and both gradients (backends/cpu/conv_convolution.cc).
// Used by Convolution and its weight gradient (backends/cpu/conv_convolution.cc)
// where im2col_applies says so.
//
// Thread safety: calls may run concurrently; the mode is a process-wide atomic.
#pragma once

#include <cstdint>

#include "ir/dtype.h"
#include "runtime/engine.h"

namespace kiln::cpu {

// One ungrouped 2-D convolution: x [batch, channels, height, width] ->
// y [batch, out_channels, out_height, out_width] with a kh x kw window,
// strides, dilations (1: none) and the top/left padding (the bottom/right
// padding is whatever the output size implies).
struct Im2colConv {
  int64_t batch = 0, channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, out_height = 0, out_width = 0;
  int64_t kernel_h = 0, kernel_w = 0, stride_h = 1, stride_w = 1, dilate_h = 1, dilate_w = 1;
  int64_t pad_top = 0, pad_left = 0;
};

// Whether the current mode sends `s` here: on (the default), layers with at
// most 4 input channels; off (KILN_IM2COL=0 or im2col_set_mode(false)), none.
bool im2col_applies(const Im2colConv& s);

// The mode; initially from KILN_IM2COL ("0" turns it off). Returns the previous mode.
bool im2col_mode();
bool im2col_set_mode(bool on);

// y = conv(x, w) + bias (bias [out_channels] or null); w [K][C][kh][kw].
void im2col_forward(const engine::RunContext& run, const Im2colConv& s, const float* x, const float* w,
                    const float* bias, float* y);
// dw = the gradient of conv(x, w) with respect to w for the output gradient dy:
// per image, the unfolded input and one dot product per (output channel, tap)
// over the whole output plane. oneDNN vectorizes its kernel over input
// channels and ran this case at a fifth of its forward speed (LeNet's 1 -> 20
// channel 3x3 layer: 14 ms against 3 ms); these dots take 1.75 ms.
void im2col_backward_weight(const engine::RunContext& run, const Im2colConv& s, const float* x, const float* dy,
                            float* dw);

// The weight gradient as matrix products, for any number of channels:
// chunks of images are unfolded (col [C kh kw][images x OH x OW], about 16
// MiB each), the chunk's output gradient is gathered into one matrix a
// [K][images x OH x OW], and dw [K][C kh kw] += a . col^T is one oneDNN
// matmul accumulating in float32 (then rounded once to dw's dtype: float32,
// bfloat16 or float16). oneDNN 2.6's direct weight-gradient kernels slow down
// when each image has few output positions: on an AMD EPYC with AVX512-BF16
// (2 threads, batch 256, best of 3 on a busy machine) ResNet-18's 512-channel
// 4x4 layer took 260 ms in bfloat16 against 94 ms here, its 7x7 -> 4x4
// strided 3x3 and 1x1 layers 90 and 15 ms against 43 and 8 (float32: 54 ms
// against 52, 128 against 143, 36 against 24). With more positions oneDNN's
// kernels were as fast or faster (the 28x28 and 14x14 layers, strided or
// not, up to 2x in bfloat16), so they keep those.
//
// Applies (auto mode) to outputs of at most kGemmWeightMaxPositions
// positions per image; KILN_CONV_WEIGHT_GEMM=1 sends every ungrouped 2-D
// layer here, =0 none (gemm_weight_set_mode: -1 auto, 0, 1; returns the
// previous mode).
inline constexpr int64_t kGemmWeightMaxPositions = 16;
bool gemm_weight_applies(const Im2colConv& s);
int gemm_weight_set_mode(int mode);
// x [batch][C][H][W] and dy [batch][K][OH][OW] of dtype t -> dw [K][C][kh][kw].
void gemm_backward_weight(const engine::RunContext& run, const Im2colConv& s, DType t, const void* x, const void* dy,
                          void* dw);

}  // namespace kiln::cpu
