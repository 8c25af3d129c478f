// The kernel table: one kernel per (op, device kind), filled by backends.
//
//   register_kernel(OpId::kExp, DeviceKind::kCPU, &cpu_exp);
//   KernelFn k = find_kernel(op_def(OpId::kExp), Device::cpu(0));  // throws NotSupported if none
//
// A kernel receives views of its inputs and outputs (already allocated, shapes
// already inferred and checked: kernels never re-validate user input) and the
// engine's RunContext. It runs on an engine worker of the output's device.
#pragma once

#include <span>

#include "ir/attrs.h"
#include "ir/device.h"
#include "ir/dtype.h"
#include "ir/op.h"
#include "ir/shape.h"
#include "runtime/engine.h"

namespace kiln {

// A dense, row-major view of an array's storage.
struct TensorView {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::kFloat32;

  int64_t size() const { return shape.size(); }
  size_t bytes() const { return static_cast<size_t>(shape.size()) * dtype_size(dtype); }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

struct KernelContext {
  engine::RunContext run;
  const OpAttrs& attrs;
  bool is_train = false;  // train mode at the call (Dropout, BatchNorm)
  OpId op = OpId::kNumOps;  // the op being run (what a widening adaptor looks up)
};

using KernelFn = void (*)(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out);

// 16-bit floats (float16, bfloat16). A kernel registered with `kAny` is given
// them as they are: it loads and stores 16-bit values itself (computing in
// float32), or hands the call to the widening adaptor below where it has no
// faster way. A `kFloat32Compute` kernel is never given them: a call with a
// 16-bit float array runs through its backend's widening adaptor instead,
// which converts those arrays to float32 temporaries, runs the kernel, and
// converts outputs and mutated inputs back (one rounding per output, the
// result of an fp32 computation, only slower).
enum class HalfSupport : uint8_t { kFloat32Compute, kAny };

void register_kernel(OpId op, DeviceKind kind, KernelFn fn, HalfSupport half = HalfSupport::kFloat32Compute);
KernelFn find_kernel(const OpDef& op, Device device);  // throws NotSupported naming op and device
// The kernel for a call with these input and output types: the op's own, or
// the widening adaptor (see HalfSupport).
KernelFn find_kernel(const OpDef& op, Device device, std::span<const TensorType> in,
                     std::span<const TensorType> out);
bool has_kernel(OpId op, DeviceKind kind);
HalfSupport half_support(OpId op, DeviceKind kind);

// A backend's widening adaptor (runtime/kernel_widen.h implements the
// algorithm; the backend supplies temporaries).
void register_widening_kernel(DeviceKind kind, KernelFn adaptor);

// Optional work a kernel does once per node before its first call (the fused
// elementwise kernel compiles its loop): executors call prepare_kernel when
// they are built, so that compilation does not land in a timed call. A
// kernel without a prepare function must not need one.
using KernelPrepareFn = void (*)(const OpAttrs& attrs);
void register_kernel_prepare(OpId op, DeviceKind kind, KernelPrepareFn fn);
void prepare_kernel(OpId op, Device device, const OpAttrs& attrs);  // no-op when none is registered

}  // namespace kiln
