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
#include <array>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <pthread.h>

#include "ir/error.h"
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
class Worker {
 public:
  Worker(ThreadedEngine* engine, Device device, Lane lane) : engine_(engine), device_(device), lane_(lane) {}

  void start();
  void stop_and_join();
  void enqueue(Op* op);

 private:
  struct Bucket {
    int priority;
    Op* head;
    Op* tail;
  };

  void main();
  Op* pop();
  bool spin_for_work();

  ThreadedEngine* const engine_;
  const Device device_;
  const Lane lane_;
  SpinLock lock_;                // guards buckets_
  std::vector<Bucket> buckets_;  // non-empty, by descending priority
  alignas(64) std::atomic<int64_t> size_{0};
  std::atomic<bool> sleeping_{false};
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

  using Engine::push;

  Var* new_var() override { return RecordPool<Var>::alloc(); }

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
    submit(op);
  }

  void delete_var(Var* var) override {
    if (!var) return;
    var->lock.lock();
    bool twice = var->deleted;
    bool free_now = !twice && var->idle();
    var->deleted = true;
    var->lock.unlock();
    KILN_ASSERT(!twice);
    if (free_now) RecordPool<Var>::free(var);
  }

  void wait_for_var(Var* var) override {
    check_not_worker("wait_for_var");
    if (!var) return;
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
    if (!spin_until(done)) {
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
  }

  int64_t num_pending() const override { return counters_.pending.load(std::memory_order_acquire); }
  int64_t pending_bytes() const override { return counters_.bytes.load(std::memory_order_acquire); }
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
      counters_.pending.fetch_add(1, std::memory_order_relaxed);
      if (op->bytes != 0) counters_.bytes.fetch_add(op->bytes, std::memory_order_relaxed);
      DeviceLoad& load = device_load_[device_index(op->device)];
      load.pending.fetch_add(1, std::memory_order_relaxed);
      if (op->bytes != 0) load.bytes.fetch_add(op->bytes, std::memory_order_relaxed);
      if (op->rendezvous) open_rendezvous_.fetch_add(1, std::memory_order_seq_cst);
    }
    int32_t granted = 0;
    for (VarUse& u : uses) granted += append(u);
    for (VarUse& u : uses) u.var->lock.unlock();
    if (op->pending_grants.fetch_sub(granted + 1, std::memory_order_acq_rel) == granted + 1) dispatch(op);
  }

  // Grants `u` at once when nothing waits before it; else queues it.
  static bool append(VarUse& u) {
    Var* v = u.var;
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
    if (bytes != 0) {
      load.bytes.fetch_sub(bytes, std::memory_order_seq_cst);
      counters_.bytes.fetch_sub(bytes, std::memory_order_seq_cst);
    }
    if (rendezvous) open_rendezvous_.fetch_sub(1, std::memory_order_seq_cst);
    load.pending.fetch_sub(1, std::memory_order_seq_cst);
    counters_.pending.fetch_sub(1, std::memory_order_seq_cst);
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
    if (free_now) RecordPool<Var>::free(v);
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
  // work behind this device's backlog and leave it idle.
  void throttle(Device device) {
    const int self = device_index(device);
    const DeviceLoad& load = device_load_[self];
    auto over = [&] {
        int64_t bytes = load.bytes.load(std::memory_order_seq_cst);
      if (bytes <= max_pending_bytes_ || load.pending.load(std::memory_order_seq_cst) == 0 ||
          open_rendezvous_.load(std::memory_order_seq_cst) != 0)
        return false;
      return bytes > kStarvingSlack * max_pending_bytes_ || !another_device_starves(self);
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
    int64_t now = push_clock_.fetch_add(1, std::memory_order_relaxed) + 1;
    device_load_[index].last_fed.store(now, std::memory_order_relaxed);
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
      int64_t fed = other.last_fed.load(std::memory_order_relaxed);
      if (fed > 0 && now - fed <= kRecentPushes && other.pending.load(std::memory_order_seq_cst) == 0) return true;
    }
    return false;
  }

  void wait_idle() {
    if (spin_until([&] { return counters_.pending.load(std::memory_order_acquire) == 0; })) return;
    std::unique_lock<std::mutex> lock(progress_mutex_);
    progress_waiters_.fetch_add(1, std::memory_order_seq_cst);
    progress_cv_.wait(lock, [&] { return counters_.pending.load(std::memory_order_seq_cst) == 0; });
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

  struct alignas(64) Counters {
    std::atomic<int64_t> pending{0};
    std::atomic<int64_t> bytes{0};
  };
  Counters counters_;
  struct alignas(64) DeviceLoad {
    std::atomic<int64_t> pending{0};
    std::atomic<int64_t> bytes{0};
    std::atomic<int64_t> last_fed{0};  // push_clock_ at the last frontend push to the device
  };
  std::array<DeviceLoad, kNumDeviceSlots> device_load_;
  alignas(64) std::atomic<int> progress_waiters_{0};
  std::atomic<int64_t> open_rendezvous_{0};  // pending ops pushed with PushOptions::rendezvous
  std::atomic<int64_t> push_clock_{0};       // frontend pushes so far
  std::atomic<int> fed_slots_{0};            // 1 + the highest device index the frontend fed
  std::mutex progress_mutex_;
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
  auto it = buckets_.begin();
  while (it != buckets_.end() && it->priority > op->priority) ++it;
  if (it != buckets_.end() && it->priority == op->priority) {
    it->tail->next = op;
    it->tail = op;
  } else {
    buckets_.insert(it, Bucket{op->priority, op, op});
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
  Bucket& b = buckets_.front();
  Op* op = b.head;
  b.head = op->next;
  if (!b.head) buckets_.erase(buckets_.begin());
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
  std::string name = fmt::format("kiln {}{} {}", device_.is_cpu() ? "cpu" : "gpu", device_.id,
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
