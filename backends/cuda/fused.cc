// _kiln_fused_elemwise on CUDA: the program (ir/ops/fused.h) is translated
// once per call into fused.cu's interpreter encoding and run by one kernel.
// float32, at most kFusedMaxInputs inputs, kFusedMaxOutputs outputs and
// kFusedMaxInstrs instructions (NotSupported beyond; the fusion pass's
// groups are far smaller).
#include "backends/cuda/kernel_util.h"
#include "ir/ops/fused.h"

namespace kiln {
namespace {

using cuda::BinaryOp;
using cuda::UnaryOp;

// (op_kind, op) of an opcode: 1 unary, 2 binary, 3 where.
std::pair<int8_t, int8_t> encode(FusedOpcode op) {
  using O = FusedOpcode;
  auto u = [](UnaryOp x) { return std::pair<int8_t, int8_t>{1, static_cast<int8_t>(x)}; };
  auto b = [](BinaryOp x) { return std::pair<int8_t, int8_t>{2, static_cast<int8_t>(x)}; };
  switch (op) {
    case O::kAdd: return b(BinaryOp::kAdd);
    case O::kSub: return b(BinaryOp::kSub);
    case O::kMul: return b(BinaryOp::kMul);
    case O::kDiv: return b(BinaryOp::kDiv);
    case O::kPow: return b(BinaryOp::kPower);
    case O::kMax: return b(BinaryOp::kMaximum);
    case O::kMin: return b(BinaryOp::kMinimum);
    case O::kEq: return b(BinaryOp::kEqual);
    case O::kNe: return b(BinaryOp::kNotEqual);
    case O::kGt: return b(BinaryOp::kGreater);
    case O::kGe: return b(BinaryOp::kGreaterEqual);
    case O::kLt: return b(BinaryOp::kLesser);
    case O::kLe: return b(BinaryOp::kLesserEqual);
    case O::kWhere: return {3, 0};
    case O::kNeg: return u(UnaryOp::kNegative);
    case O::kAbs: return u(UnaryOp::kAbs);
    case O::kSquare: return u(UnaryOp::kSquare);
    case O::kSqrt: return u(UnaryOp::kSqrt);
    case O::kExp: return u(UnaryOp::kExp);
    case O::kLog: return u(UnaryOp::kLog);
    case O::kTanh: return u(UnaryOp::kTanh);
    case O::kSigmoid: return u(UnaryOp::kSigmoid);
    case O::kRelu: return u(UnaryOp::kRelu);
    case O::kSoftrelu: return u(UnaryOp::kSoftrelu);
    case O::kSoftsign: return u(UnaryOp::kSoftsign);
  }
  throw InternalError("internal error: _kiln_fused_elemwise: unknown opcode");
}

void fused(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  cuda::require_f32(in, out);
  const FusedProgram& p = ctx.attrs.as<FusedElemwiseAttrs>().program.program();
  KILN_CHECK(p.inputs.size() <= cuda::kFusedMaxInputs && p.outputs.size() <= cuda::kFusedMaxOutputs &&
                 p.instrs.size() <= cuda::kFusedMaxInstrs,
             NotSupported, "the CUDA interpreter takes at most {} inputs, {} outputs and {} instructions (got {}, {}, {})",
             cuda::kFusedMaxInputs, cuda::kFusedMaxOutputs, cuda::kFusedMaxInstrs, p.inputs.size(), p.outputs.size(),
             p.instrs.size());
  const Shape& shape = out[0].shape;
  cuda::FusedKernelProgram k;
  cuda::FusedPointers ptrs;
  k.num_inputs = static_cast<int>(p.inputs.size());
  k.num_instrs = static_cast<int>(p.instrs.size());
  k.num_outputs = static_cast<int>(p.outputs.size());
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    ptrs.in[i] = in[i].ptr<float>();
    switch (p.inputs[i]) {
      case FusedInputKind::kFull: k.input_kind[i] = 0; break;
      case FusedInputKind::kScalar: k.input_kind[i] = 1; break;
      case FusedInputKind::kChannel:
      case FusedInputKind::kRow: {
        int axis = fused_broadcast_axis(in[i].shape, shape);
        KILN_CHECK(axis >= 0, InternalError, "internal error: _kiln_fused_elemwise: input {} ({}) does not broadcast to {}",
                   i, in[i].shape, shape);
        k.input_kind[i] = 2;
        k.input_len[i] = shape[axis];
        k.input_inner[i] = fused_inner_size(shape, axis);
        break;
      }
    }
  }
  for (size_t j = 0; j < p.instrs.size(); ++j) {
    auto [kind, op] = encode(p.instrs[j].op);
    k.op_kind[j] = kind;
    k.op[j] = op;
    for (int q = 0; q < 3; ++q) {
      const FusedOperand& a = p.instrs[j].args[static_cast<size_t>(q)];
      k.arg_value[j][q] = a.is_value() ? a.value : -1;
      k.arg_literal[j][q] = a.literal;
    }
  }
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    k.outputs[o] = p.outputs[o];
    ptrs.out[o] = out[o].ptr<float>();
  }
  KILN_CUDA_LAUNCH(cuda::launch_fused(k, ptrs, shape.size(), cuda::stream_of(ctx)), ctx);
}

}  // namespace

void register_cuda_fused_kernels() { register_kernel(OpId::kFusedElemwise, DeviceKind::kCUDA, fused); }

}  // namespace kiln
