// CUDA kernels of the nn family (float32): Activation, LeakyReLU (not prelu),
// softmax/log_softmax and their backward ops, the fused softmax
// cross-entropy, Dropout, add_n. Elementwise work goes through elemwise.cu's
// launchers; softmax and cross-entropy through nn.cu.
#include <bit>

#include "backends/cuda/deferred_check.h"
#include "backends/cuda/device_runtime.h"
#include "backends/cuda/kernel_util.h"
#include "ir/ops/nn.h"

namespace kiln {

// indices.cc: softmax with use_length (reads the lengths as the index ops do).
void softmax_with_length(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out);

namespace {

using cuda::BinaryOp;
using cuda::UnaryOp;

void elementwise2(const KernelContext& ctx, BinaryOp op, const TensorView& a, const TensorView& b,
                  const TensorView& y, float p0) {
  KILN_CUDA_LAUNCH(cuda::launch_binary(op, a.ptr<float>(), b.ptr<float>(), y.ptr<float>(), y.size(), {}, 0, 0.0f, p0,
                                       cuda::stream_of(ctx)),
                   ctx);
}

void activation(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  cuda::require_f32(in, out);
  UnaryOp op = cuda::activation_op(ctx.attrs.as<ActivationAttrs>().act_type);
  KILN_CUDA_LAUNCH(cuda::launch_unary(op, in[0].ptr<float>(), out[0].ptr<float>(), out[0].size(), 0, 0,
                                      cuda::stream_of(ctx)),
                   ctx);
}

// (out_grad, output) -> in_grad
void activation_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  cuda::require_f32(in, out);
  elementwise2(ctx, cuda::activation_grad_op(ctx.attrs.as<ActivationAttrs>().act_type), in[0], in[1], out[0], 0.0f);
}

void require_not_prelu(const LeakyReLUAttrs& a) {
  KILN_CHECK(a.act_type != LeakyType::kPrelu && a.act_type != LeakyType::kRrelu, NotSupported,
             "LeakyReLU act_type {} has no CUDA kernel yet", print_attr(a.act_type));
}

void leaky_relu(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<LeakyReLUAttrs>();
  require_not_prelu(a);
  cuda::require_f32(in.first(1), out);
  UnaryOp op = a.act_type == LeakyType::kLeaky      ? UnaryOp::kLeaky
               : a.act_type == LeakyType::kElu      ? UnaryOp::kElu
               : a.act_type == LeakyType::kSelu     ? UnaryOp::kSelu
               : a.act_type == LeakyType::kGeluTanh ? UnaryOp::kGeluTanh
                                                    : UnaryOp::kGelu;
  KILN_CUDA_LAUNCH(cuda::launch_unary(op, in[0].ptr<float>(), out[0].ptr<float>(), out[0].size(),
                                      static_cast<float>(a.slope), 0, cuda::stream_of(ctx)),
                   ctx);
}

// (out_grad, data) -> in_grad
void leaky_relu_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<LeakyReLUAttrs>();
  require_not_prelu(a);
  cuda::require_f32(in.first(2), out.first(1));
  BinaryOp op = a.act_type == LeakyType::kLeaky      ? BinaryOp::kLeakyGrad
                : a.act_type == LeakyType::kElu      ? BinaryOp::kEluGrad
                : a.act_type == LeakyType::kSelu     ? BinaryOp::kSeluGrad
                : a.act_type == LeakyType::kGeluTanh ? BinaryOp::kGeluTanhGrad
                                                     : BinaryOp::kGeluGrad;
  elementwise2(ctx, op, in[0], in[1], out[0], static_cast<float>(a.slope));
}

float inverse_temperature(const SoftmaxAttrs& a) { return a.temperature ? static_cast<float>(1.0 / *a.temperature) : 1.0f; }

template <bool kLog>
void softmax(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (in.size() == 2) return softmax_with_length(ctx, in, out);  // use_length (softmax only)
  cuda::require_f32(in, out);
  const auto& a = ctx.attrs.as<SoftmaxAttrs>();
  AxisSplit d = split_at_axis(in[0].shape, normalize_axis(a.axis, in[0].shape.ndim(), "softmax"));
  KILN_CUDA_LAUNCH(cuda::launch_softmax(in[0].ptr<float>(), out[0].ptr<float>(), d.outer, d.n, d.inner,
                                        inverse_temperature(a), kLog, cuda::stream_of(ctx)),
                   ctx);
}

// (out_grad, output) -> in_grad
template <bool kLog>
void softmax_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  cuda::require_f32(in, out);
  const auto& a = ctx.attrs.as<SoftmaxAttrs>();
  AxisSplit d = split_at_axis(in[1].shape, normalize_axis(a.axis, in[1].shape.ndim(), "softmax"));
  KILN_CUDA_LAUNCH(cuda::launch_softmax_backward(in[0].ptr<float>(), in[1].ptr<float>(), out[0].ptr<float>(), d.outer,
                                                 d.n, d.inner, inverse_temperature(a), kLog, cuda::stream_of(ctx)),
                   ctx);
}

// Shared by the forward (dy null) and backward cross-entropy.
void cross_entropy(const KernelContext& ctx, const TensorView& x, const TensorView& label, const TensorView* dy,
                   const TensorView& out) {
  KILN_CHECK(x.dtype == DType::kFloat32 && out.dtype == DType::kFloat32 && (!dy || dy->dtype == DType::kFloat32),
             NotSupported, "the CUDA kernel handles float32 data only so far (got {})", x.dtype);
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
  KILN_CUDA_LAUNCH(cuda::launch_softmax_cross_entropy(x.ptr<float>(), labels, dy ? dy->ptr<float>() : nullptr,
                                                      out.ptr<float>(), rows, classes, flag, s),
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
  cuda::require_f32(in, out);
  const auto& a = ctx.attrs.as<DropoutAttrs>();
  const bool active = (a.mode == DropoutMode::kAlways || ctx.is_train) && a.p > 0;
  cudaStream_t s = cuda::stream_of(ctx);
  if (!active) {
    KILN_CUDA_LAUNCH(cuda::launch_fill(out[1].data, static_cast<int>(DType::kFloat32), out[1].size(), 1.0, 0, 1, 0, s),
                     ctx);
    if (out[0].data != in[0].data && in[0].bytes() > 0)
      KILN_CUDA_CHECK(cudaMemcpyAsync(out[0].data, in[0].data, in[0].bytes(), cudaMemcpyDeviceToDevice, s),
                      ctx.run.device);
    return;
  }
  KILN_CUDA_LAUNCH(cuda::launch_dropout_mask(out[1].ptr<float>(), out[1].size(), 1.0 - a.p,
                                             static_cast<uint64_t>(a.seed), static_cast<uint64_t>(a.offset), s),
                   ctx);
  auto ix = cuda::make_broadcast_index(in[0].shape, out[1].shape, out[0].shape);
  KILN_CUDA_LAUNCH(cuda::launch_binary(BinaryOp::kMul, in[0].ptr<float>(), out[1].ptr<float>(), out[0].ptr<float>(),
                                       out[0].size(), ix, 0, 0.0f, 0.0f, s),
                   ctx);
}

void add_n(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  cuda::require_f32(in, out);
  const float* ptrs[8];
  size_t done = 0;
  while (done < in.size()) {
    int count = static_cast<int>(std::min<size_t>(8, in.size() - done));
    for (int k = 0; k < count; ++k) ptrs[k] = in[done + static_cast<size_t>(k)].ptr<float>();
    KILN_CUDA_LAUNCH(cuda::launch_add_n(ptrs, count, out[0].ptr<float>(), out[0].size(), done > 0,
                                        cuda::stream_of(ctx)),
                     ctx);
    done += static_cast<size_t>(count);
  }
}

}  // namespace

void register_cuda_nn_kernels() {
  constexpr DeviceKind k = DeviceKind::kCUDA;
  register_kernel(OpId::kActivation, k, activation);
  register_kernel(OpId::kActivationBackward, k, activation_backward);
  register_kernel(OpId::kLeakyReLU, k, leaky_relu);
  register_kernel(OpId::kLeakyReLUBackward, k, leaky_relu_backward);
  register_kernel(OpId::kSoftmax, k, softmax<false>);
  register_kernel(OpId::kLogSoftmax, k, softmax<true>);
  register_kernel(OpId::kSoftmaxBackward, k, softmax_backward<false>);
  register_kernel(OpId::kLogSoftmaxBackward, k, softmax_backward<true>);
  register_kernel(OpId::kSoftmaxCrossEntropy, k, cross_entropy_kernel);
  register_kernel(OpId::kSoftmaxCrossEntropyBackward, k, cross_entropy_backward_kernel);
  register_kernel(OpId::kDropout, k, dropout);
  register_kernel(OpId::kAddN, k, add_n);
}

}  // namespace kiln
