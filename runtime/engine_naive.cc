// NaiveEngine (KILN_ENGINE=naive): `push` runs the operation at once in the
// calling thread, with the threaded engine's error semantics. One recursive
// mutex serializes all calls, so several user threads may push at once and
// operations may push (or delete variables) from inside.
#include <array>
#include <atomic>
#include <mutex>

#include "ir/error.h"
#include "runtime/device_backend.h"
#include "runtime/engine_impl.h"
#include "runtime/engine_var.h"

namespace kiln::engine::detail {

class NaiveEngine final : public Engine {
 public:
  NaiveEngine() {
    max_pending_bytes_ = default_max_pending_bytes();
    for (auto& t : cpu_threads_) t.store(default_cpu_threads(), std::memory_order_relaxed);
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
    check_engine_device(options.device);
    detail::stamp_writes(writes);
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    pending_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(options.bytes, std::memory_order_relaxed);
    // Variables in use by a running op are not freed by delete_var
    // (`active_readers` counts the running ops using the variable).
    for (Var* v : reads)
      if (v) ++v->active_readers;
    for (Var* v : writes)
      if (v) ++v->active_readers;

    std::exception_ptr error;
    for (Var* v : reads) {
      if (v && v->error) {
        error = v->error;
        break;
      }
    }
    if (!error) {
      RunContext ctx{options.device, options.lane,
                     cpu_threads_[device_index(options.device)].load(std::memory_order_relaxed), nullptr};
      error = run_op(fn, ctx, options.name, options.bytes);
    }
    if (error && !first_error_) first_error_ = error;
    for (Var* v : writes)
      if (v) v->error = error;

    for (Var* v : reads) unuse(v);
    for (Var* v : writes) unuse(v);
    fn.reset();
    bytes_.fetch_sub(options.bytes, std::memory_order_relaxed);
    pending_.fetch_sub(1, std::memory_order_release);
  }

  void delete_var(Var* var, OnIdle on_idle) override {
    if (!var) return;
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    KILN_ASSERT(!var->deleted);
    var->deleted = true;
    var->on_idle = std::move(on_idle);
    if (var->active_readers == 0) free_idle_var(var);
  }

  void wait_for_var(Var* var) override {
    if (!var) return;
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (var->error) std::rethrow_exception(var->error);
  }

  void wait_all() override {
    std::exception_ptr error;
    {
      std::lock_guard<std::recursive_mutex> lock(mutex_);
      error = std::exchange(first_error_, nullptr);
    }
    if (error) std::rethrow_exception(error);
    drain_device_backends();
  }

  int64_t num_pending() const override { return pending_.load(std::memory_order_acquire); }
  int64_t pending_bytes() const override { return bytes_.load(std::memory_order_acquire); }
  Kind kind() const override { return Kind::kNaive; }

  void set_cpu_threads(Device device, int threads) override {
    check_engine_device(device);
    KILN_CHECK(threads >= 1, ValueError, "set_cpu_threads({}, {}): expected at least 1 thread", device, threads);
    cpu_threads_[device_index(device)].store(threads, std::memory_order_relaxed);
  }
  int cpu_threads(Device device) const override {
    check_engine_device(device);
    return cpu_threads_[device_index(device)].load(std::memory_order_relaxed);
  }

 private:
  static void unuse(Var* v) {
    if (v && --v->active_readers == 0 && v->deleted) free_idle_var(v);
  }

  std::recursive_mutex mutex_;  // guards every Var and first_error_
  std::exception_ptr first_error_;
  std::atomic<int64_t> pending_{0};
  std::atomic<int64_t> bytes_{0};
  std::array<std::atomic<int>, kNumDeviceSlots> cpu_threads_;
};

std::unique_ptr<Engine> make_naive_engine() { return std::make_unique<NaiveEngine>(); }

}  // namespace kiln::engine::detail
