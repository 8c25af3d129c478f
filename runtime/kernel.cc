#include "runtime/kernel.h"

#include <array>
#include <mutex>

namespace kiln {

void register_cpu_kernels();   // backends/cpu/register.cc
void register_cuda_kernels();  // backends/cuda, or a no-op without CUDA

namespace {

using Table = std::array<std::array<KernelFn, kNumDeviceKinds>, kNumOps>;
using PrepareTable = std::array<std::array<KernelPrepareFn, kNumDeviceKinds>, kNumOps>;

Table& table_storage() {
  static Table t{};
  return t;
}

PrepareTable& prepare_storage() {
  static PrepareTable t{};
  return t;
}

const Table& table() {
  static const bool filled = [] {
    register_cpu_kernels();
    register_cuda_kernels();
    return true;
  }();
  (void)filled;
  return table_storage();
}

}  // namespace

void register_kernel(OpId op, DeviceKind kind, KernelFn fn) {
  table_storage()[static_cast<size_t>(op)][static_cast<size_t>(kind)] = fn;
}

KernelFn find_kernel(const OpDef& op, Device device) {
  KernelFn fn = table()[static_cast<size_t>(op.id)][static_cast<size_t>(device.kind)];
  KILN_CHECK(fn != nullptr, NotSupported, "{}: no kernel for {} in this build", op.name, device);
  return fn;
}

bool has_kernel(OpId op, DeviceKind kind) {
  return table()[static_cast<size_t>(op)][static_cast<size_t>(kind)] != nullptr;
}

void register_kernel_prepare(OpId op, DeviceKind kind, KernelPrepareFn fn) {
  prepare_storage()[static_cast<size_t>(op)][static_cast<size_t>(kind)] = fn;
}

void prepare_kernel(OpId op, Device device, const OpAttrs& attrs) {
  (void)table();  // fills both tables
  KernelPrepareFn fn = prepare_storage()[static_cast<size_t>(op)][static_cast<size_t>(device.kind)];
  if (fn != nullptr) fn(attrs);
}

}  // namespace kiln
