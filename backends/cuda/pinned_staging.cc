#include "backends/cuda/pinned_staging.h"

#include <array>

namespace kiln::cuda {

struct StagingLease::Slot {
  std::mutex mu;
  std::once_flag once;
  std::array<void*, 2> buffers{};
  std::array<cudaEvent_t, 2> events{};
};

namespace {

using Slots = std::array<std::array<StagingLease::Slot*, kNumStreamKinds>, kMaxDevicesPerKind>;

}  // namespace

StagingLease::StagingLease(int device, StreamKind direction) {
  static Slots* slots = [] {
    auto* s = new Slots();  // leaked: pinned memory lives until exit
    return s;
  }();
  static std::mutex slots_mutex;
  {
    std::lock_guard lock(slots_mutex);
    Slot*& s = (*slots)[static_cast<size_t>(device)][static_cast<size_t>(direction)];
    if (s == nullptr) s = new Slot();
    slot_ = s;
  }
  slot_->mu.lock();
  try {
    std::call_once(slot_->once, [&] {
      Device dev = Device::cuda(device);
      for (int k = 0; k < 2; ++k) {
        KILN_CUDA_CHECK(cudaHostAlloc(&slot_->buffers[k], kChunkBytes, cudaHostAllocPortable), dev);
        KILN_CUDA_CHECK(cudaEventCreateWithFlags(&slot_->events[k], cudaEventDisableTiming), dev);
      }
    });
  } catch (...) {
    slot_->mu.unlock();
    throw;
  }
}

StagingLease::~StagingLease() { slot_->mu.unlock(); }

void* StagingLease::buffer(int k) const { return slot_->buffers[static_cast<size_t>(k)]; }
cudaEvent_t StagingLease::event(int k) const { return slot_->events[static_cast<size_t>(k)]; }

}  // namespace kiln::cuda
