// _kiln_fused_elemwise on CUDA: a kernel generated for the program and
// compiled by NVRTC (fused_nvrtc.h), or, with KILN_CUDA_FUSED=interpret or
// without NVRTC, the interpreter: the program (ir/ops/fused.h) translated per
// call into fused.cu's encoding and run by one kernel (float32, at most
// kFusedMaxInputs inputs, kFusedMaxOutputs outputs and kFusedMaxInstrs
// instructions: NotSupported beyond; the fusion pass's groups are far smaller).
#include "backends/cuda/fused_nvrtc.h"
#include "backends/cuda/kernel_util.h"
#include "ir/ops/fused.h"

namespace kiln {
namespace {

void interpret(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
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
    k.op[j] = static_cast<uint8_t>(p.instrs[j].op);
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

// The generated kernel when NVRTC is on (every dtype of the op), else the
// interpreter (float32; 16-bit through the widening adaptor).
void fused(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (cuda::nvrtc_fused_enabled()) {
    cuda::run_fused_nvrtc(ctx.attrs.as<FusedElemwiseAttrs>().program, in, out, ctx.run.device, ctx.run.stream);
  } else if (out[0].dtype != DType::kFloat32) {
    cuda::widen(ctx, in, out);
  } else {
    cuda::require_f32(in, out);
    interpret(ctx, in, out);
  }
}

}  // namespace

void register_cuda_fused_kernels() {
  register_kernel(OpId::kFusedElemwise, DeviceKind::kCUDA, fused, HalfSupport::kAny);
}

}  // namespace kiln
