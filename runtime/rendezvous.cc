#include "runtime/rendezvous.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/error.h"

namespace kiln {

Rendezvous::Rendezvous(int parties, std::string what, double timeout_s)
    : parties_(parties),
      what_(std::move(what)),
      timeout_s_(timeout_s),
      parts_(static_cast<size_t>(std::max(parties, 0))),
      devices_(static_cast<size_t>(std::max(parties, 0))),
      arrived_(static_cast<size_t>(std::max(parties, 0)), false) {
  KILN_CHECK(parties >= 1, ValueError, "{}: expected at least 1 party, got {}", what_, parties);
  KILN_CHECK(timeout_s > 0, ValueError, "{}: timeout must be > 0 s, got {}", what_, timeout_s);
}

void Rendezvous::all_sum(int slot, Device device, std::span<const float> part, std::span<float> total) {
  KILN_ASSERT(part.size() == total.size());
  std::unique_lock<std::mutex> lock(mutex_);
  arrive(lock, slot, device, part, [&] {
    total_.assign(part.size(), 0.0);
    for (const auto& p : parts_)
      for (size_t i = 0; i < p.size(); ++i) total_[i] += p[i];
  });
  for (size_t i = 0; i < total.size(); ++i) total[i] = static_cast<float>(total_[i]);
}

void Rendezvous::meet(int slot, Device device, const std::function<void()>& act) {
  std::unique_lock<std::mutex> lock(mutex_);
  arrive(lock, slot, device, {}, [&] {
    try {
      act();
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  if (error_) std::rethrow_exception(error_);
}

void Rendezvous::arrive(std::unique_lock<std::mutex>& lock, int slot, Device device, std::span<const float> part,
                        const std::function<void()>& on_last) {
  const size_t size = part.size();
  if (!broken_.empty()) throw Error(broken_);
  KILN_CHECK(slot >= 0 && slot < parties_, ValueError, "{}: slot {} from {} is outside [0, {})", what_, slot, device,
             parties_);
  auto s = static_cast<size_t>(slot);
  KILN_CHECK(!arrived_[s], ValueError, "{}: slot {} contributed twice in one round ({} then {})", what_, slot,
             devices_[s], device);
  for (size_t k = 0; k < parts_.size(); ++k) {
    KILN_CHECK(!arrived_[k] || parts_[k].size() == size, ShapeError, "{}: {} contributes {} values, {} contributed {}",
               what_, device, size, devices_[k], parts_[k].size());
  }
  parts_[s].assign(part.begin(), part.end());
  devices_[s] = device;
  arrived_[s] = true;
  if (++num_arrived_ == parties_) {
    error_ = nullptr;
    on_last();
    num_arrived_ = 0;
    arrived_.assign(arrived_.size(), false);
    ++round_;
    cv_.notify_all();
    return;
  }
  uint64_t round = round_;
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(timeout_s_));
  bool met = cv_.wait_until(lock, deadline, [&] { return round_ != round || !broken_.empty(); });
  if (!broken_.empty()) throw Error(broken_);
  if (!met) {
    std::vector<std::string> came;
    for (size_t k = 0; k < parts_.size(); ++k)
      if (arrived_[k]) came.push_back(fmt::format("{}", devices_[k]));
    broken_ = fmt::format(
        "{}: {} waited {} s for the other devices; {} of {} arrived ({}). Every step must pass one shard per device "
        "through the layer (forward and backward), with no wait on a shard's result in between",
        what_, device, timeout_s_, num_arrived_, parties_, fmt::join(came, ", "));
    cv_.notify_all();
    throw Error(broken_);
  }
}

}  // namespace kiln
