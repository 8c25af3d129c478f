// Launchers of Kiln's own CUDA kernels (the .cu files), with plain arguments
// so that the .cu files include no Kiln header (but ir/ops/elemwise_math.h,
// which includes only <math.h>) and nvcc compiles little.
// Registration, attribute parsing and shape logic live in the .cc files
// (g++); each launcher queues its kernel on `s` and returns the launch
// status (cudaGetLastError), which the caller checks with KILN_CUDA_CHECK.
//
// dtype codes are kiln::DType's values (ir/dtype.h); only the dtypes named
// per launcher are handled (others: the .cc side throws NotSupported first).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kiln::cuda {

// The float dtype codes (kiln::DType::kFloat32, kFloat16, kBfloat16).
inline constexpr int kDtypeFloat32 = 0;
inline constexpr int kDtypeFloat16 = 2;
inline constexpr int kDtypeBfloat16 = 12;

inline constexpr int kMaxDims = 8;

// An iteration over an n-d output in row-major order, reading an input
// through per-axis strides (0 on broadcast axes) from a base offset.
// Elements, not bytes.
struct StridedIndex {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t in_stride[kMaxDims] = {};
  int64_t in_offset = 0;
  int64_t out_stride[kMaxDims] = {};  // of the output (for writes into a view)
  int64_t out_offset = 0;
};

// Two inputs broadcast against the output (ndim 0: both dense and of the
// output's shape).
struct BroadcastIndex {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t a_stride[kMaxDims] = {};
  int64_t b_stride[kMaxDims] = {};
};

// ---- elementwise (elemwise.cu): `dtype` float32, float16 or bfloat16 (every
// float array of a call has it), values computed in float32 and rounded once
// when stored; other codes return cudaErrorInvalidValue.
enum class UnaryOp : int {
  kExp, kLog, kSqrt, kSquare, kTanh, kSigmoid, kRelu, kAbs, kNegative, kClip, kSoftrelu, kSoftsign,
  kLeaky, kElu, kSelu, kGelu, kGeluTanh, kErf,
  kSin, kCos, kTan, kArcsin, kArccos, kArctan, kSinh, kCosh, kArcsinh, kArccosh, kArctanh,
  kRound, kRint, kCeil, kFloor, kSign,
};
enum class BinaryOp : int {
  kAdd, kSub, kMul, kDiv, kPower, kMaximum, kMinimum, kEqual, kNotEqual, kGreater, kGreaterEqual, kLesser,
  kLesserEqual, kMod, kFmod,
  // backward forms, (dy, v) -> dx
  kReluGrad, kSigmoidGrad, kTanhGrad, kSoftreluGrad, kSoftsignGrad,  // v = forward output
  kLeakyGrad, kEluGrad, kSeluGrad, kGeluGrad, kGeluTanhGrad,       // v = forward input
};
// y = op(x) with parameters p0, p1 (clip bounds, slope).
cudaError_t launch_unary(UnaryOp op, int dtype, const void* x, void* y, int64_t n, float p0, float p1,
                         cudaStream_t s);
// y = op(a, b) elementwise over n outputs; `scalar_side` 1: b is the
// scalar `scalar` (b unused), 2: a is the scalar; p0 a parameter of the
// backward forms (slope).
cudaError_t launch_binary(BinaryOp op, int dtype, const void* a, const void* b, void* y, int64_t n,
                          const BroadcastIndex& index, int scalar_side, float scalar, float p0, cudaStream_t s);
// out = cond != 0 ? x : y over n elements of one shape, any dtypes: the values
// (x, y, out) of `elem_size` bytes (1, 2, 4 or 8) copied as bits; cond of
// `cond_size` bytes, tested as bits, without the sign bit when
// `cond_floating` (-0.0 is false, NaN true: as the CPU kernel).
cudaError_t launch_where(const void* cond, int cond_size, bool cond_floating, const void* x, const void* y, void* out,
                         int elem_size, int64_t n, cudaStream_t s);
// y[i] = (partial ? partial[i] : 0) + sum_k inputs[k][i], at most 8 inputs of
// `dtype`, summed in float32; y of y_dtype (`dtype`, or float32 for a partial
// sum of a longer list: pass it as `partial` to the next call; y may be partial).
cudaError_t launch_add_n(const void* const* inputs, int count, int dtype, const float* partial, void* y, int y_dtype,
                         int64_t n, cudaStream_t s);

// ---- any dtype (elemwise.cu): f32, f64, f16, bf16, u8, i8, i32, i64
// Element conversion x (dtype_in) -> y (dtype_out), n elements.
cudaError_t launch_cast(const void* x, int dtype_in, void* y, int dtype_out, int64_t n, cudaStream_t s);
// y[i] += bias[(i / inner) % channels] over n elements, any float dtypes
// (dtype flags as launch_cast's), computed in float: a convolution's bias.
cudaError_t launch_add_channel_bias(void* y, int dtype_y, const void* bias, int dtype_bias, int64_t n,
                                    int64_t channels, int64_t inner, cudaStream_t s);
// y[out_offset + sum_d i_d out_stride_d] = x[in_offset + sum_d i_d in_stride_d]; elem_size 1, 2, 4 or 8.
cudaError_t launch_strided_copy(const void* x, void* y, int elem_size, const StridedIndex& index, cudaStream_t s);
// y[i] = value (kind 0), start + (i / repeat) * step (kind 1).
cudaError_t launch_fill(void* y, int dtype, int64_t n, double value, double step, int64_t repeat, int kind,
                        cudaStream_t s);
// Counter-based random numbers, the CPU backend's stream (backends/cpu/init.cc):
// kind 0 uniform in [a, b), kind 1 normal(a, b).
cudaError_t launch_random(void* y, int dtype, int64_t n, double a, double b, uint64_t seed, uint64_t offset, int kind,
                          cudaStream_t s);

// ---- reductions (reduce.cu): x float32, float16 or bfloat16 (`dtype`), accumulated
// in float32; y of y_dtype (x's, or float32 for arg reductions of 16-bit x)
enum class ReduceOp : int { kSum, kMean, kMax, kMin, kProd, kNormL1, kNormL2, kArgmax, kArgmin };
// The input seen as [outer axes..., reduced axes...]: `outer` iterates the
// output elements, `inner` the `count` elements each one reduces, both as
// shapes with input strides. Arg reductions write the index (as float) of
// the first extremum along the single reduced axis.
struct ReduceIndex {
  int outer_ndim = 0;
  int64_t outer_shape[kMaxDims] = {};
  int64_t outer_stride[kMaxDims] = {};
  int inner_ndim = 0;
  int64_t inner_shape[kMaxDims] = {};
  int64_t inner_stride[kMaxDims] = {};
  int64_t outputs = 1;
  int64_t count = 1;
};
// The device workspace launch_reduce needs (0: none; a Scratch the caller
// keeps until the op's stream is synchronized). Few outputs with long
// reductions (not arg reductions) run in two passes: partial results per
// (output, chunk) in the workspace, then one warp per output combines them.
size_t reduce_workspace_bytes(ReduceOp op, const ReduceIndex& index);
cudaError_t launch_reduce(ReduceOp op, int dtype, const void* x, void* y, int y_dtype, const ReduceIndex& index,
                          void* workspace, cudaStream_t s);

// ---- nn (nn.cu): data float32, float16 or bfloat16 (`dtype`, every data array
// of a call), computed in float32 (sums in double); rows are [outer, n, inner]
// splits along an axis
cudaError_t launch_softmax(int dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                           float inv_temperature, bool log, cudaStream_t s);
// dx from (dy, y): softmax: y * (dy - sum(dy * y)); log_softmax: dy - exp(y) * sum(dy). Times inv_temperature.
cudaError_t launch_softmax_backward(int dtype, const void* dy, const void* y, void* dx, int64_t outer, int64_t n,
                                    int64_t inner, float inv_temperature, bool log, cudaStream_t s);
// loss[r] = logsumexp(x[r]) - x[r, label[r]]; with dy: dx = (softmax(x[r]) - onehot) * dy[r].
// x, dy and out of `dtype`; labels are float32 here; the first label outside [0, classes) claims
// bad_label_row[0] (-1 when all fine: atomicCAS) with its row, and its claimer writes the label's float
// bits to bad_label_row[1].
cudaError_t launch_softmax_cross_entropy(int dtype, const void* x, const float* label, const void* dy, void* out,
                                         int64_t rows, int64_t classes, int* bad_label_row, cudaStream_t s);
// Dropout: mask[i] = uniform(seed, offset + i) < keep ? 1 / keep : 0, stored as `dtype` (elemwise.cu).
cudaError_t launch_dropout_mask(int dtype, void* mask, int64_t n, double keep, uint64_t seed, uint64_t offset,
                                cudaStream_t s);

// ---- optimizers (optimizer.cu), float32, in place
enum class UpdateOp : int { kSgd, kSgdMom, kNagMom, kAdam, kAdamW };
struct UpdateParams {
  float lr = 0, wd = 0, rescale_grad = 1, clip_gradient = -1, momentum = 0, beta1 = 0.9f, beta2 = 0.999f,
        epsilon = 1e-8f, eta = 1;
};
// weight_out may be weight_in (the usual in-place call); states are updated in place.
cudaError_t launch_update(UpdateOp op, const float* weight_in, const float* grad, float* state0, float* state1,
                          float* weight_out, int64_t n, const UpdateParams& p, cudaStream_t s);

}  // namespace kiln::cuda

namespace kiln::cuda {

// ---- BatchNorm (batch_norm.cu), data as [outer, channels, inner] in float32,
// float16 or bfloat16 (data_dtype: x, y, dy, dx), computed in float32; gamma,
// beta and the statistics are float32;
// the CPU backend's semantics (backends/cpu/conv_batch_norm.cc): biased batch
// variance, moving = moving * momentum + batch * (1 - momentum) in train mode.
struct BatchNormArgs {
  int64_t outer = 1, channels = 1, inner = 1;
  float eps = 1e-3f, momentum = 0.9f;
  bool fix_gamma = true, train = false;
};
// The device workspace either launcher needs for `a` (a Scratch the caller
// keeps until the op's stream is synchronized; contents need no setup).
size_t batch_norm_workspace_bytes(const BatchNormArgs& a);
// y may be x (in place).
cudaError_t launch_batch_norm_forward(const void* x, const float* gamma, const float* beta, float* moving_mean,
                                      float* moving_var, void* y, float* mean, float* var, int data_dtype,
                                      const BatchNormArgs& a, void* workspace, cudaStream_t s);
// dx may be dy (in place).
cudaError_t launch_batch_norm_backward(const void* dy, const void* x, const float* gamma, const float* mean,
                                       const float* var, void* dx, float* d_gamma, float* d_beta, int data_dtype,
                                       const BatchNormArgs& a, void* workspace, cudaStream_t s);

}  // namespace kiln::cuda

namespace kiln::cuda {

// ---- index ops (indices.cu): indices arrive resolved (int64, in range).
// take:          y[(o*m + j)*inner + i] = x[(o*n + ids[j])*inner + i]   (elem_size 1, 2, 4 or 8)
cudaError_t launch_take(const void* x, void* y, const int64_t* ids, int64_t outer, int64_t n, int64_t m,
                        int64_t inner, int elem_size, cudaStream_t s);
// _backward_take: dx[(o*n + ids[j])*inner + i] += dy[(o*m + j)*inner + i]   (dx zeroed first by the caller)
cudaError_t launch_take_backward(const float* dy, float* dx, const int64_t* ids, int64_t outer, int64_t n, int64_t m,
                                 int64_t inner, cudaStream_t s);
// pick:           y[t] = x[(o*n + ids[t])*inner + c], t = o*inner + c (backward: dx zeroed, dx[...] = dy[t])
cudaError_t launch_pick(const float* x, float* y, const int64_t* ids, int64_t outer, int64_t n, int64_t inner,
                        bool backward, cudaStream_t s);
// one_hot:        y[i*depth + j] = ids[i] == j ? on : off  (ids may be out of [0, depth): all off)
cudaError_t launch_one_hot(void* y, int dtype, const int64_t* ids, int64_t count, int64_t depth, double on, double off,
                           cudaStream_t s);

}  // namespace kiln::cuda

namespace kiln::cuda {

// ---- _kiln_fused_elemwise (fused.cu): an interpreter of the fusion pass's
// programs (ir/ops/fused.h), one thread per output element; values in
// registers; `op` holds FusedOpcode values (ir/ops/elemwise_math.h). The
// fallback and reference of the NVRTC-generated kernels (fused_nvrtc.h).
inline constexpr int kFusedMaxInputs = 8, kFusedMaxOutputs = 8, kFusedMaxInstrs = 48;
struct FusedKernelProgram {
  int num_inputs = 0, num_instrs = 0, num_outputs = 0;
  int8_t input_kind[kFusedMaxInputs] = {};  // 0 full, 1 scalar, 2 channel/row
  int64_t input_len[kFusedMaxInputs] = {};  // channel/row: the varying axis's length
  int64_t input_inner[kFusedMaxInputs] = {};  // channel/row: the product of the axes after it
  uint8_t op[kFusedMaxInstrs] = {};
  int32_t arg_value[kFusedMaxInstrs][3] = {};  // -1: the literal
  float arg_literal[kFusedMaxInstrs][3] = {};
  int32_t outputs[kFusedMaxOutputs] = {};
};
struct FusedPointers {
  const float* in[kFusedMaxInputs] = {};
  float* out[kFusedMaxOutputs] = {};
};
cudaError_t launch_fused(const FusedKernelProgram& program, const FusedPointers& ptrs, int64_t n, cudaStream_t s);

}  // namespace kiln::cuda
