// ThreadedEngine: one worker thread per (device, lane), created on first use.
//
// Push: the op's variables are locked in address order (so concurrent pushes
// are serializable and cannot deadlock), each use is appended to its
// variable's FIFO or granted at once, and the op goes to its lane when every
// use is granted. Completion releases each variable in turn, granting the
// next waiters; ops whose last grant arrives are queued on their lanes.
//
// Errors: an op is skipped when a variable it reads (including one it also
// writes) is poisoned; a pure write to a poisoned variable runs, and clears
// the poison when it succeeds (so `x = fill()` recovers x, `x += 1` does not).
//
// Hot path (push makes no syscalls): a worker polls briefly when its queue
// runs dry and only then sleeps on a condition variable, advertising it with
// `sleeping_`; pushers take the mutex to wake it only when that flag is set.
// wait_for_var and wait_all poll the same way before sleeping. The pair
// (queue size, sleeping flag) is a Dekker handshake in sequentially consistent
// order: either the pusher sees the flag or the worker sees the new op.
#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <pthread.h>

#include "ir/error.h"
#include "runtime/device_backend.h"
#include "runtime/engine_impl.h"
#include "runtime/engine_var.h"

namespace kiln::engine::detail {

class ThreadedEngine;

namespace {

// The engine whose worker the current thread is (null on other threads).
thread_local ThreadedEngine* tl_worker_engine = nullptr;

// How long an idle worker polls its queue, or a waiting thread its condition,
// before sleeping: tiny ops finish well within it, and a sleep/wake pair
// costs several microseconds of syscalls and scheduling. After the first
// kPauseTime the poller yields between polls: on a machine with more runnable
// threads than cores that hands the core to the thread it is waiting for
// instead of burning the time slice; on an idle machine yield returns at once.
constexpr auto kSpinTime = std::chrono::microseconds(20);
constexpr auto kPauseTime = std::chrono::microseconds(2);

// Polls `done` for up to kSpinTime; true when it came true.
template <typename F>
bool spin_until(F&& done) {
  if (done()) return true;
  auto start = std::chrono::steady_clock::now();
  bool yielding = false;
  for (int i = 1;; ++i) {
    if (done()) return true;
    if (yielding) {
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
    if (yielding || i % 32 == 0) {
      auto spent = std::chrono::steady_clock::now() - start;
      if (spent > kSpinTime) return false;
      yielding = spent > kPauseTime;
    }
  }
}

}  // namespace

// Completion of a wait_for_var marker, shared by the waiting thread and the
// thread that runs the marker; whichever lets go last deletes it, so the
// notifier may still touch it after the waiter has returned.
struct WaitSignal {
  enum : int { kWaiting, kSleeping, kDone };
  std::atomic<int> state{kWaiting};
  std::atomic<int> refs{2};
  std::exception_ptr error;  // written before state becomes kDone
  std::mutex mutex;
  std::condition_variable cv;

  void release() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

// A (device, lane) queue of ready ops and the thread that runs them. Among
// ready ops, higher priority first, FIFO among equals.
//
// What a pusher and the worker both touch for every op (the lock, the size,
// the sleeping flag and, while at most kInlineBuckets priorities are queued,
// the buckets) shares one cache line, so handing an op over moves one line
// between their cores.
class Worker {
 public:
  Worker(ThreadedEngine* engine, Device device, Lane lane) : engine_(engine), device_(device), lane_(lane) {}

  void start();
  void stop_and_join();
  void enqueue(Op* op);

 private:
  struct Bucket {
    int32_t priority;
    Op* head;
    Op* tail;
  };
  static constexpr uint32_t kInlineBuckets = 2;

  void main();
  Op* pop();
  bool spin_for_work();
  Bucket* buckets() { return heap_buckets_.empty() ? inline_buckets_ : heap_buckets_.data(); }

  // The shared line: guarded by lock_ except the atomics.
  alignas(64) SpinLock lock_;
  std::atomic<bool> sleeping_{false};
  uint32_t num_buckets_ = 0;        // non-empty buckets, by descending priority
  std::atomic<int64_t> size_{0};    // queued ops
  Bucket inline_buckets_[kInlineBuckets];
  // Used instead of inline_buckets_ while more priorities are queued (rare).
  alignas(64) std::vector<Bucket> heap_buckets_;

  ThreadedEngine* const engine_;
  const Device device_;
  const Lane lane_;
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by sleep_mutex_
  std::thread thread_;
};

class ThreadedEngine final : public Engine {
 public:
  ThreadedEngine() {
    max_pending_bytes_ = default_max_pending_bytes();
    for (auto& t : cpu_threads_) t.store(default_cpu_threads(), std::memory_order_relaxed);
    for (auto& w : workers_) w.store(nullptr, std::memory_order_relaxed);
  }

  ~ThreadedEngine() override {
    wait_idle();
    for (auto& slot : workers_) {
      if (Worker* w = slot.load(std::memory_order_acquire)) {
        w->stop_and_join();
        delete w;
      }
    }
  }

  using Engine::delete_var;
  using Engine::push;

  Var* new_var() override {
    Var* v = RecordPool<Var>::alloc();
    v->last_write.store(detail::next_write_seq(), std::memory_order_release);
    return v;
  }

  void push(Fn fn, std::span<Var* const> reads, std::span<Var* const> writes,
            const PushOptions& options) override {
    Worker* worker = worker_for(options.device, options.lane);
    if (tl_worker_engine == nullptr) {
      note_fed(options.device);
      throttle(options.device);
    }
    Op* op = RecordPool<Op>::alloc();
    op->fn = std::move(fn);
    op->priority = options.priority;
    op->device = options.device;
    op->lane = options.lane;
    op->name = options.name;
    op->bytes = options.bytes;
    op->rendezvous = options.rendezvous;
    op->worker = worker;
    op->set_uses(reads, writes);
    detail::stamp_writes(writes);
    submit(op);
  }

  void delete_var(Var* var, OnIdle on_idle) override {
    if (!var) return;
    var->lock.lock();
    bool twice = var->deleted;
    bool free_now = !twice && var->idle();
    if (!twice) {
      var->deleted = true;
      var->on_idle = std::move(on_idle);
    }
    var->lock.unlock();
    KILN_ASSERT(!twice);
    if (free_now) free_idle_var(var);
  }

  void wait_for_var(Var* var) override {
    check_not_worker("wait_for_var");
    if (!var) return;
    // A short write finishes within the spin: no marker op then.
    bool spun_out = !spin_until([&] { return var->writes_pending.load(std::memory_order_acquire) == 0; });
    var->lock.lock();
    if (!var->active_writer && var->head == nullptr) {  // no write pending: the value is final
      std::exception_ptr error = var->error;
      var->lock.unlock();
      if (error) std::rethrow_exception(error);
      return;
    }
    var->lock.unlock();
    // Queue a marker that reads `var`; it runs (inline, in whichever thread
    // grants it) once every earlier write has finished.
    auto* signal = new WaitSignal;
    Op* op = RecordPool<Op>::alloc();
    op->signal = signal;
    op->name = "wait_for_var";
    Var* const vars[1] = {var};
    op->set_uses(std::span<Var* const>(vars, 1), {});
    try {
      submit(op);
    } catch (...) {
      delete signal;
      throw;
    }
    auto done = [&] { return signal->state.load(std::memory_order_acquire) == WaitSignal::kDone; };
    if (spun_out || !spin_until(done)) {
      std::unique_lock<std::mutex> lock(signal->mutex);
      int expected = WaitSignal::kWaiting;
      if (signal->state.compare_exchange_strong(expected, WaitSignal::kSleeping, std::memory_order_acq_rel))
        signal->cv.wait(lock, done);
    }
    std::exception_ptr error = std::move(signal->error);
    signal->release();
    if (error) std::rethrow_exception(error);
  }

  void wait_all() override {
    check_not_worker("wait_all");
    wait_idle();
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(error_mutex_);
      error = std::exchange(first_error_, nullptr);
    }
    if (error) std::rethrow_exception(error);
    drain_device_backends();
  }

  int64_t num_pending() const override {
    int64_t n = 0;
    for_each_used_slot([&](const DeviceLoad& load) { n += load.pending(); });
    return n;
  }
  int64_t pending_bytes() const override {
    int64_t n = 0;
    for_each_used_slot([&](const DeviceLoad& load) { n += load.pending_bytes(); });
    return n;
  }
  Kind kind() const override { return Kind::kThreaded; }

  void set_cpu_threads(Device device, int threads) override {
    check_engine_device(device);
    KILN_CHECK(threads >= 1, ValueError, "set_cpu_threads({}, {}): expected at least 1 thread", device, threads);
    cpu_threads_[device_index(device)].store(threads, std::memory_order_relaxed);
  }
  int cpu_threads(Device device) const override {
    check_engine_device(device);
    return cpu_threads_[device_index(device)].load(std::memory_order_relaxed);
  }

  // Runs a ready op on its worker's thread, then completes it.
  void execute(Op* op) {
    // This thread's reference to the error is dropped before completing: a
    // waiter may then rethrow it while another thread drops the last
    // reference, and only completion orders those for ThreadSanitizer (the
    // exception_ptr refcount lives in uninstrumented libstdc++).
    {
      std::exception_ptr error;
      for (const VarUse& u : op->use_span()) {
        if (u.reads && u.var->error) {  // skipped: it would read a poisoned value
          error = u.var->error;
          break;
        }
      }
      if (!error) {
        RunContext ctx{op->device, op->lane,
                       cpu_threads_[device_index(op->device)].load(std::memory_order_relaxed), nullptr};
        error = run_op(op->fn, ctx, op->name, op->bytes);
      }
      if (error) record_error(error);
      for (const VarUse& u : op->use_span())
        if (u.write) u.var->error = error;  // poisons, or clears after a clean write
    }
    op->fn.reset();  // may delete variables or push ops (frees captured arrays)
    complete(op);
  }

 private:
  // Appends every use of `op` to its variable (all locked at once, in address
  // order) and queues the op if all were granted.
  void submit(Op* op) {
    std::span<VarUse> uses = op->use_span();
    op->pending_grants.store(static_cast<int32_t>(uses.size()) + 1, std::memory_order_relaxed);
    for (VarUse& u : uses) u.var->lock.lock();
    for (VarUse& u : uses) {
      if (u.var->deleted) [[unlikely]] {  // a caller bug; caught while the record is not reused
        for (VarUse& w : uses) w.var->lock.unlock();
        std::string_view name = op->name;
        RecordPool<Op>::free(op);
        throw InternalError(fmt::format("internal error: {} uses an engine variable after delete_var", name));
      }
    }
    if (!op->signal) {  // counted before any grant can let the op complete
      DeviceLoad& load = device_load_[device_index(op->device)];
      load.pushed.ops.fetch_add(1, std::memory_order_relaxed);
      if (op->bytes != 0) load.pushed.bytes.fetch_add(op->bytes, std::memory_order_relaxed);
      if (op->rendezvous) open_rendezvous_.fetch_add(1, std::memory_order_seq_cst);
    }
    int32_t granted = 0;
    for (VarUse& u : uses) granted += append(u);
    for (VarUse& u : uses) u.var->lock.unlock();
    // All granted here: no other thread knows the op, so no atomic is needed.
    if (granted == static_cast<int32_t>(uses.size()) ||
        op->pending_grants.fetch_sub(granted + 1, std::memory_order_acq_rel) == granted + 1)
      dispatch(op);
  }

  // Grants `u` at once when nothing waits before it; else queues it.
  static bool append(VarUse& u) {
    Var* v = u.var;
    if (u.write)
      v->writes_pending.store(v->writes_pending.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (v->head == nullptr) {
      if (u.write && !v->active_writer && v->active_readers == 0) {
        v->active_writer = true;
        return true;
      }
      if (!u.write && !v->active_writer) {
        ++v->active_readers;
        return true;
      }
    }
    u.next = nullptr;
    if (v->tail) {
      v->tail->next = &u;
    } else {
      v->head = &u;
    }
    v->tail = &u;
    return false;
  }

  // Releases every use of `op`, frees the record, queues ops that became
  // ready, and lets waiters know.
  void complete(Op* op) {
    bool counted = op->signal == nullptr;
    bool rendezvous = op->rendezvous;
    int64_t bytes = op->bytes;
    DeviceLoad& load = device_load_[device_index(op->device)];
    ReadyList ready;
    for (VarUse& u : op->use_span()) release(u, ready);
    RecordPool<Op>::free(op);
    for (Op* r = ready.head; r;) {
      Op* next = r->next;
      r->next = nullptr;
      dispatch(r);
      r = next;
    }
    if (!counted) return;
    if (bytes != 0) load.done.bytes.fetch_add(bytes, std::memory_order_seq_cst);
    if (rendezvous) open_rendezvous_.fetch_sub(1, std::memory_order_seq_cst);
    load.done.ops.fetch_add(1, std::memory_order_seq_cst);
    if (progress_waiters_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(progress_mutex_);
      progress_cv_.notify_all();
    }
  }

  // Ops made ready by one completion, in the order they were granted.
  struct ReadyList {
    Op* head = nullptr;
    Op* tail = nullptr;
    void add(Op* op) {
      op->next = nullptr;
      (tail ? tail->next : head) = op;
      tail = op;
    }
  };

  static void release(VarUse& u, ReadyList& ready) {
    Var* v = u.var;
    v->lock.lock();
    if (u.write) {
      v->active_writer = false;
      v->writes_pending.store(v->writes_pending.load(std::memory_order_relaxed) - 1, std::memory_order_release);
    } else {
      --v->active_readers;
    }
    if (!v->active_writer && v->active_readers == 0) {
      // Grant the run of readers at the head, or else the writer.
      while (v->head && !v->head->write) {
        ++v->active_readers;
        grant(pop_head(v), ready);
      }
      if (v->active_readers == 0 && v->head) {
        v->active_writer = true;
        grant(pop_head(v), ready);
      }
    }
    bool free_now = v->deleted && v->idle();
    v->lock.unlock();
    if (free_now) free_idle_var(v);
  }

  static VarUse* pop_head(Var* v) {
    VarUse* u = v->head;
    v->head = u->next;
    if (!v->head) v->tail = nullptr;
    u->next = nullptr;
    return u;
  }

  static void grant(VarUse* u, ReadyList& ready) {
    Op* op = u->op;
    if (op->pending_grants.fetch_sub(1, std::memory_order_acq_rel) == 1) ready.add(op);
  }

  void dispatch(Op* op) {
    if (op->signal) {
      finish_wait(op);
    } else {
      op->worker->enqueue(op);
    }
  }

  // A wait_for_var marker holds read access: the variable's error is final.
  void finish_wait(Op* op) {
    WaitSignal* signal = op->signal;
    signal->error = op->uses[0].var->error;
    complete(op);
    if (signal->state.exchange(WaitSignal::kDone, std::memory_order_acq_rel) == WaitSignal::kSleeping) {
      std::lock_guard<std::mutex> lock(signal->mutex);
      signal->cv.notify_one();
    }
    signal->release();
  }

  Worker* worker_for(Device device, Lane lane) {
    check_engine_device(device);
    int index = device_index(device) * kNumLanes + static_cast<int>(lane);
    KILN_ASSERT(index >= 0 && index < static_cast<int>(workers_.size()));
    Worker* w = workers_[index].load(std::memory_order_acquire);
    if (w) return w;
    std::lock_guard<std::mutex> lock(workers_mutex_);
    w = workers_[index].load(std::memory_order_relaxed);
    if (!w) {
      int slot = device_index(device);
      int n = num_used_slots_.load(std::memory_order_relaxed);
      if (std::find(used_slots_.begin(), used_slots_.begin() + n, slot) == used_slots_.begin() + n) {
        used_slots_[n] = slot;
        num_used_slots_.store(n + 1, std::memory_order_release);
      }
      w = new Worker(this, device, lane);
      w->start();
      workers_[index].store(w, std::memory_order_release);
    }
    return w;
  }

  // Back-pressure: blocks while too many output bytes are pending on the
  // device the op goes to (so one device's backlog does not hold back work
  // for another, idle one). Suspended while a rendezvous op is pending: the
  // ops that release it may be the ones this thread is about to push. Also
  // not applied while another device that the frontend fed recently has
  // nothing pending: one thread feeding several devices (a data-parallel
  // loop issuing shard after shard) would otherwise hold the next device's
  // work behind this device's backlog and leave it idle. That exemption
  // ends at kStarvingSlack times the bound, or at the second pending op when
  // a single op is larger.
  void throttle(Device device) {
    const int self = device_index(device);
    DeviceLoad& load = device_load_[self];
    // Fast path without reading the completion line (written by the worker):
    // completions only grow, so pushed bytes minus the completed bytes seen
    // last time bounds the pending bytes from above.
    int64_t pushed = load.pushed.bytes.load(std::memory_order_relaxed);
    if (pushed - load.pushed.done_bytes_seen.load(std::memory_order_relaxed) <= max_pending_bytes_) return;
    load.pushed.done_bytes_seen.store(load.done.bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
    auto over = [&] {
      int64_t bytes = load.pending_bytes();
      if (bytes <= max_pending_bytes_ || load.pending() == 0 ||
          open_rendezvous_.load(std::memory_order_seq_cst) != 0)
        return false;
      // The exemption's limit (kStarvingSlack times the bound) does not hold
      // back the push after a single pending op: one op larger than the
      // limit (a hybridized forward and the per-call block of values it
      // saves for backward) must not keep the frontend from feeding the
      // idle device, or a data-parallel step runs the devices' forwards one
      // after the other. The next push is held again, so the backlog stays
      // bounded by that op plus one.
      if (!another_device_starves(self)) return true;
      return bytes > kStarvingSlack * max_pending_bytes_ && load.pending() > 1;
    };
    if (!over()) return;
    std::unique_lock<std::mutex> lock(progress_mutex_);
    progress_waiters_.fetch_add(1, std::memory_order_seq_cst);
    progress_cv_.wait(lock, [&] { return !over(); });
    progress_waiters_.fetch_sub(1, std::memory_order_relaxed);
  }

  // Records that a frontend push went to `device` (for another_device_starves).
  void note_fed(Device device) {
    int index = device_index(device);
    // A heuristic clock: pushers racing may lose a tick, which only shifts
    // "recently" by a push or two; a plain increment costs no locked op.
    int64_t now = push_clock_.load(std::memory_order_relaxed) + 1;
    push_clock_.store(now, std::memory_order_relaxed);
    device_load_[index].pushed.last_fed.store(now, std::memory_order_relaxed);
    int seen = fed_slots_.load(std::memory_order_relaxed);
    while (index >= seen && !fed_slots_.compare_exchange_weak(seen, index + 1, std::memory_order_relaxed)) {
    }
  }

  // True when a device other than `self` was fed by the frontend within the
  // last kRecentPushes pushes and has nothing pending. "Recently" keeps a
  // program that once used cpu(1) and now runs on cpu(0) alone bounded.
  bool another_device_starves(int self) const {
    static constexpr int64_t kRecentPushes = 1024;
    int64_t now = push_clock_.load(std::memory_order_relaxed);
    int slots = fed_slots_.load(std::memory_order_relaxed);
    for (int i = 0; i < slots; ++i) {
      if (i == self) continue;
      const DeviceLoad& other = device_load_[i];
      int64_t fed = other.pushed.last_fed.load(std::memory_order_relaxed);
      if (fed > 0 && now - fed <= kRecentPushes && other.pending() == 0) return true;
    }
    return false;
  }

  // Calls f(DeviceLoad&) for every device that has a worker (only those get ops).
  template <typename F>
  void for_each_used_slot(F&& f) const {
    int n = num_used_slots_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) f(device_load_[used_slots_[i]]);
  }

  // True when no op was pending at some instant during the call. Pass one
  // finds every device's completion count equal to its push count; pass two
  // finds no push count changed since. Between the two passes there is then
  // an instant when every device had nothing pending (an op that pushes an
  // op onto another device, then completes, cannot slip between two devices'
  // checks).
  bool idle() const {
    int n = num_used_slots_.load(std::memory_order_acquire);
    std::array<int64_t, kNumDeviceSlots> pushed;
    for (int i = 0; i < n; ++i) {
      const DeviceLoad& load = device_load_[used_slots_[i]];
      pushed[i] = load.pushed.ops.load(std::memory_order_seq_cst);
      if (load.done.ops.load(std::memory_order_seq_cst) != pushed[i]) return false;
    }
    if (num_used_slots_.load(std::memory_order_acquire) != n) return false;
    for (int i = 0; i < n; ++i)
      if (device_load_[used_slots_[i]].pushed.ops.load(std::memory_order_seq_cst) != pushed[i]) return false;
    return true;
  }

  void wait_idle() {
    if (spin_until([&] { return idle(); })) return;
    std::unique_lock<std::mutex> lock(progress_mutex_);
    progress_waiters_.fetch_add(1, std::memory_order_seq_cst);
    progress_cv_.wait(lock, [&] { return idle(); });
    progress_waiters_.fetch_sub(1, std::memory_order_relaxed);
  }

  void check_not_worker(const char* what) const {
    KILN_CHECK(tl_worker_engine != this, Error,
               "engine::{} called from inside an engine operation: it would wait for itself", what);
  }

  void record_error(const std::exception_ptr& error) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!first_error_) first_error_ = error;
  }

  // Per-device counts of ops and output bytes, pushed and completed: each
  // half on its own cache line, written only by the pushing threads or only
  // by the threads completing ops, so the frontend and a worker do not pass a
  // line back and forth per op. Pending = pushed - done.
  struct DeviceLoad {
    struct alignas(64) Pushed {
      std::atomic<int64_t> ops{0};
      std::atomic<int64_t> bytes{0};
      std::atomic<int64_t> last_fed{0};         // push_clock_ at the last frontend push to the device
      std::atomic<int64_t> done_bytes_seen{0};  // a past value of done.bytes (throttle's fast path)
    } pushed;
    struct alignas(64) Done {
      std::atomic<int64_t> ops{0};
      std::atomic<int64_t> bytes{0};
    } done;
    int64_t pending() const {
      int64_t d = done.ops.load(std::memory_order_seq_cst);  // done first: never above pushed
      return pushed.ops.load(std::memory_order_seq_cst) - d;
    }
    int64_t pending_bytes() const {
      int64_t d = done.bytes.load(std::memory_order_seq_cst);
      return pushed.bytes.load(std::memory_order_seq_cst) - d;
    }
  };
  std::array<DeviceLoad, kNumDeviceSlots> device_load_;
  // Slots of devices that have a worker, in order of first use.
  std::array<int, kNumDeviceSlots> used_slots_{};
  std::atomic<int> num_used_slots_{0};
  alignas(64) std::atomic<int> progress_waiters_{0};  // read per completion
  std::atomic<int64_t> open_rendezvous_{0};  // pending ops pushed with PushOptions::rendezvous
  alignas(64) std::atomic<int64_t> push_clock_{0};  // frontend pushes so far (written per push)
  std::atomic<int> fed_slots_{0};            // 1 + the highest device index the frontend fed
  alignas(64) std::mutex progress_mutex_;
  std::condition_variable progress_cv_;

  std::mutex error_mutex_;
  std::exception_ptr first_error_;

  std::mutex workers_mutex_;
  std::array<std::atomic<Worker*>, kNumDeviceSlots * kNumLanes> workers_;
  std::array<std::atomic<int>, kNumDeviceSlots> cpu_threads_;
};

void Worker::start() {
  thread_ = std::thread([this] { main(); });
}

void Worker::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Worker::enqueue(Op* op) {
  lock_.lock();
  Bucket* b = buckets();
  uint32_t i = 0;
  while (i < num_buckets_ && b[i].priority > op->priority) ++i;
  if (i < num_buckets_ && b[i].priority == op->priority) {
    b[i].tail->next = op;
    b[i].tail = op;
  } else {
    if (num_buckets_ == kInlineBuckets && heap_buckets_.empty()) {  // spill to the heap
      heap_buckets_.assign(inline_buckets_, inline_buckets_ + kInlineBuckets);
      b = heap_buckets_.data();
    }
    if (!heap_buckets_.empty()) {
      heap_buckets_.insert(heap_buckets_.begin() + i, Bucket{op->priority, op, op});
    } else {
      for (uint32_t j = num_buckets_; j > i; --j) b[j] = b[j - 1];
      b[i] = Bucket{op->priority, op, op};
    }
    ++num_buckets_;
  }
  size_.fetch_add(1, std::memory_order_seq_cst);
  lock_.unlock();
  if (sleeping_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    wake_.notify_one();
  }
}

Op* Worker::pop() {
  if (size_.load(std::memory_order_acquire) == 0) return nullptr;
  lock_.lock();
  Bucket* b = buckets();
  Op* op = b[0].head;
  b[0].head = op->next;
  if (!b[0].head) {
    --num_buckets_;
    if (!heap_buckets_.empty()) {
      heap_buckets_.erase(heap_buckets_.begin());
      if (heap_buckets_.size() <= kInlineBuckets) {  // back to the shared line
        std::copy(heap_buckets_.begin(), heap_buckets_.end(), inline_buckets_);
        heap_buckets_.clear();
      }
    } else {
      for (uint32_t j = 0; j < num_buckets_; ++j) b[j] = b[j + 1];
    }
  }
  size_.fetch_sub(1, std::memory_order_relaxed);
  lock_.unlock();
  op->next = nullptr;
  return op;
}

bool Worker::spin_for_work() {
  return spin_until([&] { return size_.load(std::memory_order_relaxed) > 0; });
}

void Worker::main() {
  ThreadedEngine* engine = engine_;
  tl_worker_engine = engine;
#if defined(__linux__)
  // "kiln cpu0 comp" in debuggers and profilers (at most 15 characters).
  std::string name = fmt::format("kiln {}{} {}", device_kind_name(device_.kind), device_.id,
                                 lane_ == Lane::kCopy ? "copy" : "comp");
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
#endif
  for (;;) {
    if (Op* op = pop()) {
      engine->execute(op);
      continue;
    }
    if (spin_for_work()) continue;
    std::unique_lock<std::mutex> lock(sleep_mutex_);
    sleeping_.store(true, std::memory_order_seq_cst);
    while (size_.load(std::memory_order_seq_cst) == 0 && !stop_) wake_.wait(lock);
    sleeping_.store(false, std::memory_order_relaxed);
    if (stop_ && size_.load(std::memory_order_relaxed) == 0) return;
  }
}

std::unique_ptr<Engine> make_threaded_engine() { return std::make_unique<ThreadedEngine>(); }

}  // namespace kiln::engine::detail
