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
  bool active_writer = false;
  bool deleted = false;               // delete_var called; freed once idle
  int32_t active_readers = 0;  // granted read uses (NaiveEngine: running ops using it)
  // Write uses queued or active (ThreadedEngine). Changed under `lock`; read
  // without it by wait_for_var, which polls it before queueing a marker (a
  // release store when the last write finishes, so the poller that sees 0
  // sees the writes).
  std::atomic<int32_t> writes_pending{0};
  // The write sequence number (runtime/engine_writes.h): set by new_var and
  // by every push that writes the variable.
  std::atomic<uint64_t> last_write{0};
  detail::VarUse* head = nullptr;     // waiting uses, oldest first
  detail::VarUse* tail = nullptr;
  std::exception_ptr error;           // poison: the error of the last write
  Var* pool_next = nullptr;
  OnIdle on_idle;                     // from delete_var; run when the record is freed

  bool idle() const { return active_readers == 0 && !active_writer && head == nullptr; }
  // Called before the record goes back to the pool.
  void reset() {
    active_readers = 0;
    active_writer = false;
    deleted = false;
    head = tail = nullptr;
    writes_pending.store(0, std::memory_order_relaxed);
    error = nullptr;
    on_idle.reset();
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
    if (n <= 2) {  // the common eager op: one output, at most one input
      uses = inline_uses;
      uint32_t k = 0;
      for (Var* v : writes)
        if (v) uses[k++] = VarUse{v, this, nullptr, true, false};
      for (Var* v : reads)
        if (v) uses[k++] = VarUse{v, this, nullptr, false, true};
      if (k == 2) {
        if (uses[0].var == uses[1].var) {
          uses[0].write |= uses[1].write;
          uses[0].reads |= uses[1].reads;
          k = 1;
        } else if (uses[1].var < uses[0].var) {
          std::swap(uses[0], uses[1]);
        }
      }
      num_uses = k;
      return;
    }
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
    uint32_t m = k > 0 ? 1 : 0;
    for (uint32_t i = 1; i < k; ++i) {
      if (uses[m - 1].var == uses[i].var) {
        uses[m - 1].write |= uses[i].write;
        uses[m - 1].reads |= uses[i].reads;
      } else {
        if (m != i) uses[m] = uses[i];
        ++m;
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

// The next write sequence number (runtime/engine_writes.h); engines stamp
// new variables and the variables each push writes.
uint64_t next_write_seq();
inline void stamp_writes(std::span<Var* const> writes) {
  for (Var* v : writes)
    if (v) v->last_write.store(next_write_seq(), std::memory_order_release);
}

// Frees a deleted variable that has become idle: runs its on_idle, then
// recycles the record.
inline void free_idle_var(Var* v) {
  if (v->on_idle) v->on_idle();
  RecordPool<Var>::free(v);
}

}  // namespace detail
}  // namespace kiln::engine
