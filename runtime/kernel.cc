#include "runtime/kernel.h"

#include <array>
#include <mutex>

#include "ir/amp.h"
#include "runtime/device_backend.h"

namespace kiln {

namespace {

using Table = std::array<std::array<KernelFn, kNumDeviceKinds>, kNumOps>;
using HalfTable = std::array<std::array<HalfSupport, kNumDeviceKinds>, kNumOps>;
using PrepareTable = std::array<std::array<KernelPrepareFn, kNumDeviceKinds>, kNumOps>;

Table& table_storage() {
  static Table t{};
  return t;
}

HalfTable& half_storage() {
  static HalfTable t{};
  return t;
}

std::array<KernelFn, kNumDeviceKinds>& widening_storage() {
  static std::array<KernelFn, kNumDeviceKinds> t{};
  return t;
}

PrepareTable& prepare_storage() {
  static PrepareTable t{};
  return t;
}

const Table& table() {
  static const bool filled = [] {
    register_device_kernels();  // each device backend fills its column
    return true;
  }();
  (void)filled;
  return table_storage();
}

}  // namespace

void register_kernel(OpId op, DeviceKind kind, KernelFn fn, HalfSupport half) {
  table_storage()[static_cast<size_t>(op)][static_cast<size_t>(kind)] = fn;
  half_storage()[static_cast<size_t>(op)][static_cast<size_t>(kind)] = half;
}

void register_widening_kernel(DeviceKind kind, KernelFn adaptor) {
  widening_storage()[static_cast<size_t>(kind)] = adaptor;
}

HalfSupport half_support(OpId op, DeviceKind kind) {
  (void)table();
  return half_storage()[static_cast<size_t>(op)][static_cast<size_t>(kind)];
}

KernelFn find_kernel(const OpDef& op, Device device, std::span<const TensorType> in,
                     std::span<const TensorType> out) {
  KernelFn fn = find_kernel(op, device);
  if (half_support(op.id, device.kind) == HalfSupport::kAny) return fn;
  bool half = false;
  for (const TensorType& t : in) half = half || is_16bit_float(t.dtype);
  for (const TensorType& t : out) half = half || is_16bit_float(t.dtype);
  if (!half) return fn;
  KernelFn adaptor = widening_storage()[static_cast<size_t>(device.kind)];
  KILN_CHECK(adaptor != nullptr, NotSupported, "{}: no float16/bfloat16 kernel for {} in this build", op.name,
             device);
  return adaptor;
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
