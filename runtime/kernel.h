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
};

using KernelFn = void (*)(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out);

void register_kernel(OpId op, DeviceKind kind, KernelFn fn);
KernelFn find_kernel(const OpDef& op, Device device);  // throws NotSupported naming op and device
bool has_kernel(OpId op, DeviceKind kind);

// Optional work a kernel does once per node before its first call (the fused
// elementwise kernel compiles its loop): executors call prepare_kernel when
// they are built, so that compilation does not land in a timed call. A
// kernel without a prepare function must not need one.
using KernelPrepareFn = void (*)(const OpAttrs& attrs);
void register_kernel_prepare(OpId op, DeviceKind kind, KernelPrepareFn fn);
void prepare_kernel(OpId op, Device device, const OpAttrs& attrs);  // no-op when none is registered

}  // namespace kiln
