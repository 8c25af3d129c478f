// dot, batch_dot and FullyConnected through cuBLAS: float32 (TF32 tensor
// cores when allowed, device_runtime.h), and bfloat16/float16 on tensor cores
// with float32 accumulation (cublasGemmEx). Row-major C = op(A) op(B) is
// computed as column-major C^T = op(B)^T op(A)^T, so no data moves.
// FullyConnected runs as one cuBLASLt call with a bias/ReLU epilogue where
// that covers it (backends/cuda/lt_dense.h); otherwise, and for 16-bit data, it
// multiplies into a float32 temporary, adds the bias and applies the
// activation there, and rounds once into the output.
#include <algorithm>
#include <optional>

#include "backends/cuda/device_runtime.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/lt_dense.h"
#include "ir/amp.h"
#include "ir/ops/fused_layers.h"
#include "ir/ops/linalg.h"
#include "ir/ops/nn.h"

namespace kiln {
namespace {

void check_cublas(cublasStatus_t st, const char* call, Device device) {
  if (st != CUBLAS_STATUS_SUCCESS) cuda::throw_library_error("cuBLAS", st, cublasGetStatusString(st), call, device);
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kFloat16:
      return CUDA_R_16F;
    case DType::kBfloat16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// out[b] = op(A[b]) . op(B[b]), dims as MatmulDims (A [m,k] or [k,m] when ta;
// B [k,n] or [n,k] when tb). A and B in `ab`, C in `c_type`: float32 (Sgemm,
// TF32 when allowed), or 16-bit with C 16-bit or float32 (GemmEx, float32
// accumulation on tensor cores).
void gemm(const KernelContext& ctx, const MatmulDims& d, DType ab, const void* a, const void* b, DType c_type,
          void* c) {
  if (d.m == 0 || d.n == 0 || d.batch == 0) return;
  const Device device = ctx.run.device;
  if (d.k == 0) {
    KILN_CUDA_CHECK(cudaMemsetAsync(c, 0, static_cast<size_t>(d.batch * d.m * d.n) * dtype_size(c_type),
                                    cuda::stream_of(ctx)),
                    device);
    return;
  }
  if (ab != DType::kFloat32 && (d.m % 8 != 0 || d.n % 8 != 0 || d.k % 8 != 0)) {
    // cuBLAS runs 16-bit products whose sizes are not multiples of 8 on slow
    // kernels (on an H200, ResNet-18's 512 -> 10 classifier: 0.7 ms a call,
    // 10-25x its float32 time): those run on float32 copies, rounded once.
    cudaStream_t s = cuda::stream_of(ctx);
    const int64_t na = d.batch * d.m * d.k, nb = d.batch * d.k * d.n, nc = d.batch * d.m * d.n;
    cuda::Scratch wa(device, static_cast<size_t>(na) * sizeof(float)), wb(device, static_cast<size_t>(nb) * sizeof(float));
    const int f32 = static_cast<int>(DType::kFloat32);
    KILN_CUDA_LAUNCH(cuda::launch_cast(a, static_cast<int>(ab), wa.get(), f32, na, s), ctx);
    KILN_CUDA_LAUNCH(cuda::launch_cast(b, static_cast<int>(ab), wb.get(), f32, nb, s), ctx);
    if (c_type == DType::kFloat32) return gemm(ctx, d, DType::kFloat32, wa.get(), wb.get(), DType::kFloat32, c);
    cuda::Scratch wc(device, static_cast<size_t>(nc) * sizeof(float));
    gemm(ctx, d, DType::kFloat32, wa.get(), wb.get(), DType::kFloat32, wc.get());
    KILN_CUDA_LAUNCH(cuda::launch_cast(wc.get(), f32, c, static_cast<int>(c_type), nc, s), ctx);
    return;
  }
  cublasHandle_t h = cuda::cublas_handle(device.id, cuda::stream_of(ctx));
  const float one = 1.0f, zero = 0.0f;
  const auto m = static_cast<int>(d.m), n = static_cast<int>(d.n), k = static_cast<int>(d.k);
  KILN_CHECK(d.m < (1ll << 31) && d.n < (1ll << 31) && d.k < (1ll << 31), NotSupported,
             "matrix product of {}x{}x{} is too large for one cuBLAS call", d.m, d.k, d.n);
  cublasOperation_t op_b = d.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_a = d.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  int ldb = d.tb ? k : n;
  int lda = d.ta ? m : k;
  const auto* fa = static_cast<const float*>(a);
  const auto* fb = static_cast<const float*>(b);
  auto* fc = static_cast<float*>(c);
  const cudaDataType_t t = cuda_type(ab), tc = cuda_type(c_type);
  if (d.batch == 1 && ab == DType::kFloat32) {
    check_cublas(cublasSgemm(h, op_b, op_a, n, m, k, &one, fb, ldb, fa, lda, &zero, fc, n), "cublasSgemm", device);
  } else if (ab == DType::kFloat32) {
    check_cublas(cublasSgemmStridedBatched(h, op_b, op_a, n, m, k, &one, fb, ldb, d.k * d.n, fa, lda, d.m * d.k,
                                           &zero, fc, n, d.m * d.n, static_cast<int>(d.batch)),
                 "cublasSgemmStridedBatched", device);
  } else if (d.batch == 1) {
    check_cublas(cublasGemmEx(h, op_b, op_a, n, m, k, &one, b, t, ldb, a, t, lda, &zero, c, tc, n,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx", device);
  } else {
    check_cublas(cublasGemmStridedBatchedEx(h, op_b, op_a, n, m, k, &one, b, t, ldb, d.k * d.n, a, t, lda, d.m * d.k,
                                            &zero, c, tc, n, d.m * d.n, static_cast<int>(d.batch),
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx", device);
  }
}

template <MatmulDims (*kDims)(const Shape&, const Shape&, const DotAttrs&)>
void product_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  MatmulDims d = kDims(in[0].shape, in[1].shape, ctx.attrs.as<DotAttrs>());
  if (!is_16bit_float(in[0].dtype)) cuda::require_f32(in, out);
  gemm(ctx, d, in[0].dtype, in[0].data, in[1].data, out[0].dtype, out[0].data);
}

// out = data . weight^T (+ bias), then act when given.
void dense(const KernelContext& ctx, const FullyConnectedAttrs& a, std::optional<ActType> act,
           std::span<const TensorView> in, const TensorView& out) {
  const bool half = is_16bit_float(out.dtype);
  if (!half) cuda::require_f32(in, std::span<const TensorView>(&out, 1));
  FullyConnectedDims fc = fully_connected_dims(in[0].shape, in[1].shape, a);
  if (cuda::lt_dense(ctx, fc, in[0], in[1], a.no_bias ? nullptr : &in[2], act, out)) return;
  MatmulDims d;
  d.m = fc.m;
  d.k = fc.k;
  d.n = fc.n;
  d.tb = true;  // weight is [n, k]
  cudaStream_t s = cuda::stream_of(ctx);
  // 16-bit: the product, bias and activation in a float32 temporary.
  std::optional<cuda::Scratch> wide, wide_bias;
  float* y = half ? nullptr : out.ptr<float>();
  if (half) {
    wide.emplace(ctx.run.device, static_cast<size_t>(std::max<int64_t>(1, fc.m * fc.n)) * sizeof(float));
    y = static_cast<float*>(wide->get());
  }
  gemm(ctx, d, in[0].dtype, in[0].data, in[1].data, DType::kFloat32, y);
  if (fc.m == 0 || fc.n == 0) return;
  if (!a.no_bias) {
    const float* bias = in[2].ptr<float>();
    if (half) {
      wide_bias.emplace(ctx.run.device, static_cast<size_t>(fc.n) * sizeof(float));
      KILN_CUDA_LAUNCH(cuda::launch_cast(in[2].data, static_cast<int>(in[2].dtype), wide_bias->get(),
                                         static_cast<int>(DType::kFloat32), fc.n, s),
                       ctx);
      bias = static_cast<const float*>(wide_bias->get());
    }
    Shape mat{fc.m, fc.n};
    auto ix = cuda::make_broadcast_index(mat, Shape{fc.n}, mat);
    KILN_CUDA_LAUNCH(
        cuda::launch_binary(cuda::BinaryOp::kAdd, cuda::kDtypeFloat32, y, bias, y, fc.m * fc.n, ix, 0, 0.0f, 0.0f, s),
        ctx);
  }
  if (act)
    KILN_CUDA_LAUNCH(cuda::launch_unary(cuda::activation_op(*act), cuda::kDtypeFloat32, y, y, fc.m * fc.n, 0, 0, s),
                     ctx);
  if (half) {
    KILN_CUDA_LAUNCH(cuda::launch_cast(y, static_cast<int>(DType::kFloat32), out.data, static_cast<int>(out.dtype),
                                       fc.m * fc.n, s),
                     ctx);
  }
}

void fully_connected_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  dense(ctx, ctx.attrs.as<FullyConnectedAttrs>(), std::nullopt, in, out[0]);
}

void fc_act_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<FcActAttrs>();
  dense(ctx, a, a.act_type, in, out[0]);
}

}  // namespace

void register_cuda_linalg_kernels() {
  constexpr auto kAny = HalfSupport::kAny;
  register_kernel(OpId::kDot, DeviceKind::kCUDA, product_kernel<dot_dims>, kAny);
  register_kernel(OpId::kBatchDot, DeviceKind::kCUDA, product_kernel<batch_dot_dims>, kAny);
  register_kernel(OpId::kFullyConnected, DeviceKind::kCUDA, fully_connected_kernel, kAny);
  register_kernel(OpId::kFcAct, DeviceKind::kCUDA, fc_act_kernel, kAny);
}

}  // namespace kiln
