// Internal to the engine (runtime/engine*.cc): the records behind
// engine::Var and a pushed operation (recycled by RecordPool and guarded by
// SpinLock, runtime/record_pool.h). Not part of Kiln's API.
//
//   Op* op = RecordPool<Op>::alloc();
//   op->set_uses(reads, writes);     // sorted by address, duplicates merged
//   ...
//   RecordPool<Op>::free(op);        // back to this thread's cache
//
// Dependency tracking (ThreadedEngine): each variable has at most one active
// writer or any number of active readers, plus a FIFO of waiting uses. A use
// is granted when it reaches the head of the FIFO and is compatible with the
// active holders; an op is ready when all its uses are granted. Every field of
// Var except `error` is guarded by `lock`; `error` is written only by the
// holder of write access and read by holders of access (or under `lock` when
// no writer is active), so the grant chain orders every access.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>

#include "runtime/engine.h"
#include "runtime/record_pool.h"

namespace kiln::engine {

namespace detail {

using kiln::cpu_relax;
using kiln::SpinLock;

struct Op;
struct WaitSignal;
class Worker;

// One variable of one operation: its entry in the variable's wait FIFO.
struct VarUse {
  Var* var = nullptr;
  Op* op = nullptr;
  VarUse* next = nullptr;  // next waiting use of `var`
  bool write = false;      // exclusive access
  bool reads = false;      // the op reads the old value (checked for poison)
};

}  // namespace detail

struct Var {
  detail::SpinLock lock;
  int32_t active_readers = 0;  // granted read uses (NaiveEngine: running ops using it)
  bool active_writer = false;
  bool deleted = false;               // delete_var called; freed once idle
  detail::VarUse* head = nullptr;     // waiting uses, oldest first
  detail::VarUse* tail = nullptr;
  std::exception_ptr error;           // poison: the error of the last write
  Var* pool_next = nullptr;

  bool idle() const { return active_readers == 0 && !active_writer && head == nullptr; }
  // Called before the record goes back to the pool.
  void reset() {
    active_readers = 0;
    active_writer = false;
    deleted = false;
    head = tail = nullptr;
    error = nullptr;
  }
};

namespace detail {

// A pushed operation (or an internal wait_for_var marker when `signal` is set).
struct Op {
  static constexpr uint32_t kInlineUses = 6;

  Fn fn;
  std::atomic<int32_t> pending_grants{0};  // uses not yet granted, +1 while pushing
  int32_t priority = 0;
  Device device;
  Lane lane = Lane::kCompute;
  std::string_view name;
  int64_t bytes = 0;
  bool rendezvous = false;
  Worker* worker = nullptr;      // the lane that runs it
  WaitSignal* signal = nullptr;  // set for wait_for_var markers
  Op* next = nullptr;            // lane queue, ready list
  Op* pool_next = nullptr;
  uint32_t num_uses = 0;
  VarUse* uses = inline_uses;
  std::unique_ptr<VarUse[]> heap_uses;
  uint32_t heap_capacity = 0;
  VarUse inline_uses[kInlineUses];

  Op() = default;
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  std::span<VarUse> use_span() { return {uses, num_uses}; }

  // Fills `uses` from the read and write lists: null entries are skipped,
  // duplicates merged (a variable in both lists is a write that also reads),
  // sorted by address so that locking them in order cannot deadlock.
  void set_uses(std::span<Var* const> reads, std::span<Var* const> writes) {
    size_t n = reads.size() + writes.size();
    if (n <= kInlineUses) {
      uses = inline_uses;
    } else {
      if (n > heap_capacity) {
        heap_uses = std::make_unique<VarUse[]>(n);
        heap_capacity = static_cast<uint32_t>(n);
      }
      uses = heap_uses.get();
    }
    uint32_t k = 0;
    for (Var* v : writes)
      if (v) uses[k++] = VarUse{v, this, nullptr, true, false};
    for (Var* v : reads)
      if (v) uses[k++] = VarUse{v, this, nullptr, false, true};
    auto by_var = [](const VarUse& a, const VarUse& b) { return a.var < b.var; };
    if (k <= 16) {
      for (uint32_t i = 1; i < k; ++i) {
        VarUse u = uses[i];
        uint32_t j = i;
        for (; j > 0 && by_var(u, uses[j - 1]); --j) uses[j] = uses[j - 1];
        uses[j] = u;
      }
    } else {
      std::sort(uses, uses + k, by_var);
    }
    uint32_t m = 0;
    for (uint32_t i = 0; i < k; ++i) {
      if (m > 0 && uses[m - 1].var == uses[i].var) {
        uses[m - 1].write |= uses[i].write;
        uses[m - 1].reads |= uses[i].reads;
      } else {
        uses[m++] = uses[i];
      }
    }
    num_uses = m;
  }

  // Called before the record goes back to the pool (keeps heap_uses).
  void reset() {
    fn.reset();
    signal = nullptr;
    worker = nullptr;
    next = nullptr;
    num_uses = 0;
    uses = inline_uses;
  }
};

using kiln::RecordPool;

}  // namespace detail
}  // namespace kiln::engine
