#include "backends/cuda/deferred_check.h"

#include <fmt/format.h>

#include <array>
#include <deque>
#include <mutex>
#include <vector>

#include "backends/cuda/device_runtime.h"
#include "ir/error.h"

namespace kiln::cuda {

namespace {

struct Pending {
  int slot;
  cudaEvent_t event;
  const char* op;
  DescribeFailure describe;
};

struct Captured {  // a flag a CUDA graph's kernel writes at every replay
  int slot;
  const char* op;
  DescribeFailure describe;
};

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

struct DeviceFlags {
  std::once_flag once;
  std::mutex mu;
  int* host = nullptr;    // kFlagsPerDevice pairs of ints, page-locked and mapped
  int* device = nullptr;  // the same memory as the GPU addresses it
  std::vector<int> free_slots;
  std::vector<cudaEvent_t> free_events;
  std::deque<Pending> pending;  // in launch order
  std::vector<Captured> captured;
};

DeviceFlags& flags_of(int device) {
  static auto* all = new std::array<DeviceFlags, kMaxDevicesPerKind>();  // leaked: engine workers use it until exit
  DeviceFlags& f = (*all)[static_cast<size_t>(device)];
  std::call_once(f.once, [&] {
    const Device dev = Device::cuda(device);
    bind_device(device);
    void* p = nullptr;
    KILN_CUDA_CHECK(cudaHostAlloc(&p, sizeof(int) * 2 * kFlagsPerDevice, cudaHostAllocMapped | cudaHostAllocPortable),
                    dev);
    void* d = nullptr;
    KILN_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0), dev);
    f.device = static_cast<int*>(d);
    for (int i = kFlagsPerDevice - 1; i >= 0; --i) f.free_slots.push_back(i);
    f.host = static_cast<int*>(p);
  });
  return f;
}

// Reads the oldest pending flag (its kernel has finished) and releases it.
// Returns the failure's message, or an empty string.
std::string take_front(DeviceFlags& f, int device) {
  Pending p = std::move(f.pending.front());
  f.pending.pop_front();
  const int* v = f.host + 2 * p.slot;
  std::string failure =
      v[0] >= 0 ? fmt::format("{} on cuda({}): {}", p.op, device, p.describe(v[0], v[1])) : std::string();
  f.free_slots.push_back(p.slot);
  f.free_events.push_back(p.event);
  return failure;
}

[[noreturn]] void fail_deferred(const std::string& message) {
  if (!lanes_async()) throw ValueError(message);  // read right after the op that ran the graph
  throw ValueError(
      fmt::format("{} (found at a later wait: with asynchronous lanes a kernel's input is checked "
                  "after it ran; KILN_CUDA_LANES=sync reports it in the op itself)",
                  message));
}

}  // namespace

int* deferred_check_begin(int device, cudaStream_t s) {
  DeviceFlags& f = flags_of(device);
  std::lock_guard lock(f.mu);
  if (capturing(s)) {  // no query or wait may run inside a capture
    KILN_CHECK(!f.free_slots.empty(), NotSupported,
               "cuda({}): all {} label-check flags are in flight or held by CUDA graphs; cannot capture another",
               device, kFlagsPerDevice);
    int slot = f.free_slots.back();
    f.free_slots.pop_back();
    f.host[2 * slot] = -1;
    f.host[2 * slot + 1] = 0;
    return f.device + 2 * slot;
  }
  std::string failure;
  // Finished kernels first, without waiting; then, when every flag is in
  // flight, wait for the oldest.
  while (!f.pending.empty()) {
    cudaError_t q = cudaEventQuery(f.pending.front().event);
    if (q == cudaErrorNotReady) break;
    if (q != cudaSuccess) {
      (void)cudaGetLastError();  // a kernel error: the next wait reports it with its own message
      break;
    }
    std::string m = take_front(f, device);
    if (failure.empty()) failure = std::move(m);
  }
  if (f.free_slots.empty()) {
    KILN_CUDA_CHECK(cudaEventSynchronize(f.pending.front().event), Device::cuda(device));
    std::string m = take_front(f, device);
    if (failure.empty()) failure = std::move(m);
  }
  if (!failure.empty()) fail_deferred(failure);
  int slot = f.free_slots.back();
  f.free_slots.pop_back();
  f.host[2 * slot] = -1;
  f.host[2 * slot + 1] = 0;
  return f.device + 2 * slot;
}

void deferred_check_end(int device, int* flag, cudaStream_t s, const char* op, DescribeFailure describe) {
  DeviceFlags& f = flags_of(device);
  const Device dev = Device::cuda(device);
  const int slot = static_cast<int>((flag - f.device) / 2);
  if (capturing(s)) {  // either lane mode: the graph keeps the flag
    std::lock_guard lock(f.mu);
    f.captured.push_back(Captured{slot, op, std::move(describe)});
    return;
  }
  if (!lanes_async()) {
    KILN_CUDA_CHECK(cudaStreamSynchronize(s), dev);
    const int* v = f.host + 2 * slot;
    std::string failure = v[0] >= 0 ? describe(v[0], v[1]) : std::string();
    {
      std::lock_guard lock(f.mu);
      f.free_slots.push_back(slot);
    }
    if (!failure.empty()) throw ValueError(failure);
    return;
  }
  std::lock_guard lock(f.mu);
  cudaEvent_t e = nullptr;
  if (f.free_events.empty()) {
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), dev);
  } else {
    e = f.free_events.back();
    f.free_events.pop_back();
  }
  KILN_CUDA_CHECK(cudaEventRecord(e, s), dev);
  f.pending.push_back(Pending{slot, e, op, std::move(describe)});
}

void deferred_check_drain(int device) {
  DeviceFlags& f = flags_of(device);
  std::lock_guard lock(f.mu);
  std::string failure;
  while (!f.pending.empty()) {
    (void)cudaEventSynchronize(f.pending.front().event);  // the stream was synchronized: already complete
    std::string m = take_front(f, device);
    if (failure.empty()) failure = std::move(m);
  }
  for (const Captured& c : f.captured) {
    int* v = f.host + 2 * c.slot;
    if (v[0] >= 0 && failure.empty())
      failure = fmt::format("{} on cuda({}), in a CUDA graph: {}", c.op, device, c.describe(v[0], v[1]));
    v[0] = -1;
    v[1] = 0;
  }
  if (!failure.empty()) fail_deferred(failure);
}

}  // namespace kiln::cuda
