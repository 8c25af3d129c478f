#include "backends/cuda/kernel_util.h"

#include "ir/amp.h"

namespace kiln::cuda {

void require_f32(std::span<const TensorView> in, std::span<const TensorView> out) {
  auto check = [](const TensorView& v, const char* what, size_t i) {
    KILN_CHECK(v.dtype == DType::kFloat32, NotSupported,
               "the CUDA kernel handles float32 only so far; {} {} is {} (backends/cuda/README.md)", what, i, v.dtype);
  };
  for (size_t i = 0; i < in.size(); ++i) check(in[i], "input", i);
  for (size_t i = 0; i < out.size(); ++i) check(out[i], "output", i);
}

int require_float(std::span<const TensorView> in, std::span<const TensorView> out) {
  const DType t = !in.empty() ? in[0].dtype : out[0].dtype;
  auto check = [t](const TensorView& v, const char* what, size_t i) {
    KILN_CHECK(v.dtype == t && (t == DType::kFloat32 || is_16bit_float(t)), NotSupported,
               "the CUDA kernel handles float32, float16 or bfloat16 arrays of one dtype; {} {} is {} (first {}) "
               "(backends/cuda/README.md)",
               what, i, v.dtype, t);
  };
  for (size_t i = 0; i < in.size(); ++i) check(in[i], "input", i);
  for (size_t i = 0; i < out.size(); ++i) check(out[i], "output", i);
  return static_cast<int>(t);
}

float attr_as(DType t, double v) {
  const auto f = static_cast<float>(v);
  if (t == DType::kFloat16) return half_to_float(float_to_half(f));
  if (t == DType::kBfloat16) return bf16_to_float(float_to_bf16(f));
  return f;
}

std::array<int64_t, kMaxDims> broadcast_strides(const Shape& in, const Shape& out) {
  std::array<int64_t, kMaxDims> strides{};
  auto dense = in.strides();
  const int shift = out.ndim() - in.ndim();
  for (int d = 0; d < out.ndim(); ++d) {
    int k = d - shift;
    strides[static_cast<size_t>(d)] = (k < 0 || in[k] == 1) ? 0 : dense[static_cast<size_t>(k)];
  }
  return strides;
}

BroadcastIndex make_broadcast_index(const Shape& a, const Shape& b, const Shape& out) {
  BroadcastIndex ix;
  if (a == out && b == out) return ix;
  KILN_ASSERT(out.ndim() <= kMaxDims);
  ix.ndim = out.ndim();
  auto sa = broadcast_strides(a, out), sb = broadcast_strides(b, out);
  for (int d = 0; d < out.ndim(); ++d) {
    ix.shape[d] = out[d];
    ix.a_stride[d] = sa[static_cast<size_t>(d)];
    ix.b_stride[d] = sb[static_cast<size_t>(d)];
  }
  return ix;
}

StridedIndex dense_index(const Shape& shape) {
  StridedIndex ix;
  // One flat axis: the copy is contiguous on both sides.
  ix.ndim = 1;
  ix.shape[0] = shape.size();
  ix.in_stride[0] = 1;
  ix.out_stride[0] = 1;
  return ix;
}

UnaryOp activation_op(ActType t) {
  switch (t) {
    case ActType::kRelu: return UnaryOp::kRelu;
    case ActType::kSigmoid: return UnaryOp::kSigmoid;
    case ActType::kTanh: return UnaryOp::kTanh;
    case ActType::kSoftrelu: return UnaryOp::kSoftrelu;
    case ActType::kSoftsign: return UnaryOp::kSoftsign;
  }
  throw InternalError("internal error: unknown act_type");
}

BinaryOp activation_grad_op(ActType t) {
  switch (t) {
    case ActType::kRelu: return BinaryOp::kReluGrad;
    case ActType::kSigmoid: return BinaryOp::kSigmoidGrad;
    case ActType::kTanh: return BinaryOp::kTanhGrad;
    case ActType::kSoftrelu: return BinaryOp::kSoftreluGrad;
    case ActType::kSoftsign: return BinaryOp::kSoftsignGrad;
  }
  throw InternalError("internal error: unknown act_type");
}

}  // namespace kiln::cuda
