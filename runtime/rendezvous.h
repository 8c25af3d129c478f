// Rendezvous: a cross-device sum of small vectors between engine operations
// of different devices, each contributing its part and leaving with the total
// (the meeting point of SyncBatchNorm's statistics, frontend/sync_sum.h).
//
//   auto r = std::make_shared<Rendezvous>(2, "SyncBatchNorm 'bn0' forward sum, step 3", 60.0);
//   // inside an op on cpu(0), pushed with PushOptions::rendezvous:  r->all_sum(0, cpu0, part0, total0);
//   // inside an op on cpu(1), pushed later:                          r->all_sum(1, cpu1, part1, total1);
//
// `all_sum(slot, ...)` blocks the calling thread (an engine worker: one per
// device, so the others keep running) until every slot 0..parties-1 has
// contributed, then writes the sum of the contributions, added in slot order
// in double precision, so every party gets bit-identical results whatever
// order they arrive in. A rendezvous is reusable: once all parties have left
// with a total, the next round starts (a backward run twice with retain_graph).
//
// Timeout: a party that waits more than `timeout_s` seconds throws kiln::Error
// naming `what`, how many parties arrived and their devices, and breaks the
// rendezvous: every later call throws the same error at once, so a missing
// shard gives one clear error on every device instead of a hang.
//
// Errors (thrown by all_sum): a slot out of range or contributing twice in one
// round, parts whose sizes differ between slots.
//
// Thread safety: all_sum may be called from any threads at once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "ir/device.h"

namespace kiln {

class Rendezvous {
 public:
  // `parties` >= 1; `what` names the meeting in errors.
  Rendezvous(int parties, std::string what, double timeout_s);

  void all_sum(int slot, Device device, std::span<const float> part, std::span<float> total);
  // A meeting without data: blocks as all_sum until every slot has arrived;
  // the last to arrive runs `act` (while the others wait), then all leave.
  // When `act` throws, every party of the round rethrows its exception (the
  // rendezvous stays usable). Parties pass what `act` needs through state
  // they share, written before their call (the meeting orders those writes
  // before `act`, and `act` before every party's return).
  void meet(int slot, Device device, const std::function<void()>& act);

  int parties() const { return parties_; }
  const std::string& what() const { return what_; }

 private:
  // Arrival of `slot` with `part` (empty for meet); the last arrival runs
  // `on_last` under the lock. Returns with the lock held, the round finished.
  void arrive(std::unique_lock<std::mutex>& lock, int slot, Device device, std::span<const float> part,
              const std::function<void()>& on_last);

  const int parties_;
  const std::string what_;
  const double timeout_s_;
  std::mutex mutex_;
  std::condition_variable cv_;
  // Guarded by mutex_.
  std::vector<std::vector<float>> parts_;  // by slot, this round
  std::vector<Device> devices_;
  std::vector<bool> arrived_;
  int num_arrived_ = 0;
  uint64_t round_ = 0;
  std::vector<double> total_;  // of the last finished round
  std::exception_ptr error_;   // of the last finished round's act (meet)
  std::string broken_;         // non-empty: the timeout error
};

}  // namespace kiln
