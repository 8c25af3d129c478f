// CUDA kernels of the nn family: Activation, LeakyReLU (not prelu),
// softmax/log_softmax and their backward ops, the fused softmax
// cross-entropy, Dropout, add_n; float32, float16 or bfloat16 data (16-bit
// read and written directly, computed in float32). Elementwise work goes
// through elemwise.cu's launchers; softmax and cross-entropy through nn.cu
// (softmax with use_length: indices.cc and softmax_length.cu).
#include <bit>
#include <optional>

#include "backends/cuda/deferred_check.h"
#include "backends/cuda/device_runtime.h"
#include "backends/cuda/kernel_util.h"
#include "ir/amp.h"
#include "ir/ops/nn.h"

namespace kiln {

// indices.cc: softmax with use_length (reads the lengths as the index ops do).
void softmax_with_length(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out);

namespace {

using cuda::BinaryOp;
using cuda::UnaryOp;

void elementwise2(const KernelContext& ctx, BinaryOp op, int dtype, const TensorView& a, const TensorView& b,
                  const TensorView& y, float p0) {
  KILN_CUDA_LAUNCH(cuda::launch_binary(op, dtype, a.data, b.data, y.data, y.size(), {}, 0, 0.0f, p0,
                                       cuda::stream_of(ctx)),
                   ctx);
}

void activation(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const int dtype = cuda::require_float(in, out);
  UnaryOp op = cuda::activation_op(ctx.attrs.as<ActivationAttrs>().act_type);
  KILN_CUDA_LAUNCH(cuda::launch_unary(op, dtype, in[0].data, out[0].data, out[0].size(), 0, 0, cuda::stream_of(ctx)),
                   ctx);
}

// (out_grad, output) -> in_grad
void activation_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const int dtype = cuda::require_float(in, out);
  elementwise2(ctx, cuda::activation_grad_op(ctx.attrs.as<ActivationAttrs>().act_type), dtype, in[0], in[1], out[0],
               0.0f);
}

void require_not_prelu(const LeakyReLUAttrs& a) {
  KILN_CHECK(a.act_type != LeakyType::kPrelu && a.act_type != LeakyType::kRrelu, NotSupported,
             "LeakyReLU act_type {} has no CUDA kernel yet", print_attr(a.act_type));
}

void leaky_relu(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<LeakyReLUAttrs>();
  require_not_prelu(a);
  const int dtype = cuda::require_float(in.first(1), out);
  UnaryOp op = a.act_type == LeakyType::kLeaky      ? UnaryOp::kLeaky
               : a.act_type == LeakyType::kElu      ? UnaryOp::kElu
               : a.act_type == LeakyType::kSelu     ? UnaryOp::kSelu
               : a.act_type == LeakyType::kGeluTanh ? UnaryOp::kGeluTanh
                                                    : UnaryOp::kGelu;
  KILN_CUDA_LAUNCH(cuda::launch_unary(op, dtype, in[0].data, out[0].data, out[0].size(), static_cast<float>(a.slope), 0,
                                      cuda::stream_of(ctx)),
                   ctx);
}

// (out_grad, data) -> in_grad
void leaky_relu_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<LeakyReLUAttrs>();
  require_not_prelu(a);
  const int dtype = cuda::require_float(in.first(2), out.first(1));
  BinaryOp op = a.act_type == LeakyType::kLeaky      ? BinaryOp::kLeakyGrad
                : a.act_type == LeakyType::kElu      ? BinaryOp::kEluGrad
                : a.act_type == LeakyType::kSelu     ? BinaryOp::kSeluGrad
                : a.act_type == LeakyType::kGeluTanh ? BinaryOp::kGeluTanhGrad
                                                     : BinaryOp::kGeluGrad;
  elementwise2(ctx, op, dtype, in[0], in[1], out[0], static_cast<float>(a.slope));
}

float inverse_temperature(const SoftmaxAttrs& a) { return a.temperature ? static_cast<float>(1.0 / *a.temperature) : 1.0f; }

template <bool kLog>
void softmax(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (in.size() == 2) return softmax_with_length(ctx, in, out);  // use_length (softmax only)
  const int dtype = cuda::require_float(in, out);
  const auto& a = ctx.attrs.as<SoftmaxAttrs>();
  AxisSplit d = split_at_axis(in[0].shape, normalize_axis(a.axis, in[0].shape.ndim(), "softmax"));
  KILN_CUDA_LAUNCH(cuda::launch_softmax(dtype, in[0].data, out[0].data, d.outer, d.n, d.inner, inverse_temperature(a),
                                        kLog, cuda::stream_of(ctx)),
                   ctx);
}

// (out_grad, output) -> in_grad
template <bool kLog>
void softmax_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const int dtype = cuda::require_float(in, out);
  const auto& a = ctx.attrs.as<SoftmaxAttrs>();
  AxisSplit d = split_at_axis(in[1].shape, normalize_axis(a.axis, in[1].shape.ndim(), "softmax"));
  KILN_CUDA_LAUNCH(cuda::launch_softmax_backward(dtype, in[0].data, in[1].data, out[0].data, d.outer, d.n, d.inner,
                                                 inverse_temperature(a), kLog, cuda::stream_of(ctx)),
                   ctx);
}

// Shared by the forward (dy null) and backward cross-entropy.
void cross_entropy(const KernelContext& ctx, const TensorView& x, const TensorView& label, const TensorView* dy,
                   const TensorView& out) {
  const bool floating = x.dtype == DType::kFloat32 || is_16bit_float(x.dtype);
  KILN_CHECK(floating && out.dtype == x.dtype && (!dy || dy->dtype == x.dtype), NotSupported,
             "the CUDA kernel handles float32, float16 or bfloat16 data of one dtype (got data {}, output {}{}{})",
             x.dtype, out.dtype, dy ? ", out_grad " : "", dy ? dtype_name(dy->dtype) : "");
  const Device device = ctx.run.device;
  cudaStream_t s = cuda::stream_of(ctx);
  const int64_t rows = x.shape[0], classes = x.shape[1];
  // Labels as float32 (any numeric dtype: converted on the device first).
  cuda::Scratch converted(device, label.dtype == DType::kFloat32 ? 0 : static_cast<size_t>(rows) * sizeof(float));
  const float* labels = label.ptr<float>();
  if (label.dtype != DType::kFloat32) {
    KILN_CUDA_LAUNCH(cuda::launch_cast(label.data, static_cast<int>(label.dtype), converted.block.ptr,
                                       static_cast<int>(DType::kFloat32), rows, s),
                     ctx);
    labels = static_cast<const float*>(converted.block.ptr);
  }
  // Bad labels are reported through a deferred check (deferred_check.h): no read-back per step.
  int* flag = cuda::deferred_check_begin(device.id, s);
  KILN_CUDA_LAUNCH(cuda::launch_softmax_cross_entropy(static_cast<int>(x.dtype), x.data, labels,
                                                      dy ? dy->data : nullptr, out.data, rows, classes, flag, s),
                   ctx);
  const char* op = dy ? "_backward_kiln_softmax_cross_entropy" : "_kiln_softmax_cross_entropy";
  cuda::deferred_check_end(device.id, flag, s, op, [classes](int row, int payload) {
    return fmt::format("label {} at position {} is out of range for {} classes (expected 0 to {})",
                       std::bit_cast<float>(payload), row, classes, classes - 1);
  });
}

void cross_entropy_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  cross_entropy(ctx, in[0], in[1], nullptr, out[0]);
}

// (out_grad [N], data [N, C], label) -> in_grad [N, C]
void cross_entropy_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in,
                                   std::span<const TensorView> out) {
  cross_entropy(ctx, in[1], in[2], &in[0], out[0]);
}

// Dropout -> (out, mask); the mask has length-1 axes that broadcast.
void dropout(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const int dtype = cuda::require_float(in, out);
  const auto& a = ctx.attrs.as<DropoutAttrs>();
  const bool active = (a.mode == DropoutMode::kAlways || ctx.is_train) && a.p > 0;
  cudaStream_t s = cuda::stream_of(ctx);
  if (!active) {
    KILN_CUDA_LAUNCH(cuda::launch_fill(out[1].data, dtype, out[1].size(), 1.0, 0, 1, 0, s), ctx);
    if (out[0].data != in[0].data && in[0].bytes() > 0)
      KILN_CUDA_CHECK(cudaMemcpyAsync(out[0].data, in[0].data, in[0].bytes(), cudaMemcpyDeviceToDevice, s),
                      ctx.run.device);
    return;
  }
  KILN_CUDA_LAUNCH(cuda::launch_dropout_mask(dtype, out[1].data, out[1].size(), 1.0 - a.p,
                                             static_cast<uint64_t>(a.seed), static_cast<uint64_t>(a.offset), s),
                   ctx);
  auto ix = cuda::make_broadcast_index(in[0].shape, out[1].shape, out[0].shape);
  KILN_CUDA_LAUNCH(cuda::launch_binary(BinaryOp::kMul, dtype, in[0].data, out[1].data, out[0].data, out[0].size(), ix,
                                       0, 0.0f, 0.0f, s),
                   ctx);
}

// Up to 8 inputs per launch, summed in float32; a longer list of 16-bit
// inputs keeps its partial sums in a float32 temporary, so the output is
// rounded once.
void add_n(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const int dtype = cuda::require_float(in, out);
  cudaStream_t s = cuda::stream_of(ctx);
  const int64_t n = out[0].size();
  std::optional<cuda::Scratch> wide;
  if (in.size() > 8 && dtype != cuda::kDtypeFloat32)
    wide.emplace(ctx.run.device, static_cast<size_t>(n) * sizeof(float));
  const float* partial = nullptr;
  const void* ptrs[8];
  size_t done = 0;
  while (done < in.size()) {
    const int count = static_cast<int>(std::min<size_t>(8, in.size() - done));
    for (int k = 0; k < count; ++k) ptrs[k] = in[done + static_cast<size_t>(k)].data;
    const bool last = done + static_cast<size_t>(count) == in.size();
    void* y = last || !wide ? out[0].data : wide->get();
    const int y_dtype = last || !wide ? dtype : cuda::kDtypeFloat32;
    KILN_CUDA_LAUNCH(cuda::launch_add_n(ptrs, count, dtype, partial, y, y_dtype, n, s), ctx);
    partial = static_cast<const float*>(y);
    done += static_cast<size_t>(count);
  }
}

}  // namespace

void register_cuda_nn_kernels() {
  constexpr DeviceKind k = DeviceKind::kCUDA;
  constexpr auto kAny = HalfSupport::kAny;  // float16/bfloat16 read and written directly
  register_kernel(OpId::kActivation, k, activation, kAny);
  register_kernel(OpId::kActivationBackward, k, activation_backward, kAny);
  register_kernel(OpId::kLeakyReLU, k, leaky_relu, kAny);
  register_kernel(OpId::kLeakyReLUBackward, k, leaky_relu_backward, kAny);
  register_kernel(OpId::kSoftmax, k, softmax<false>, kAny);
  register_kernel(OpId::kLogSoftmax, k, softmax<true>, kAny);
  register_kernel(OpId::kSoftmaxBackward, k, softmax_backward<false>, kAny);
  register_kernel(OpId::kLogSoftmaxBackward, k, softmax_backward<true>, kAny);
  register_kernel(OpId::kSoftmaxCrossEntropy, k, cross_entropy_kernel, kAny);
  register_kernel(OpId::kSoftmaxCrossEntropyBackward, k, cross_entropy_backward_kernel, kAny);
  register_kernel(OpId::kDropout, k, dropout, kAny);
  register_kernel(OpId::kAddN, k, add_n, kAny);
}

}  // namespace kiln
