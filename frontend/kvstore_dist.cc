// The dist_sync KVStore: per-process device reduction, then MPI allreduce.
// Compiled with KILN_HAVE_MPI (set for this file only, by CMakeLists.txt,
// when MPI was found); without it the store reports itself unavailable.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "frontend/kvstore.h"

#ifdef KILN_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace kiln::kv {

ProcessGroup launched_process_group() {
  // Open MPI, then MPICH / PMI launchers.
  for (auto [rank, size] :
       {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    const char* r = std::getenv(rank);
    const char* n = std::getenv(size);
    if (r != nullptr && n != nullptr) return {std::atoi(r), std::max(1, std::atoi(n))};
  }
  return {};
}

bool launched_under_mpi() { return launched_process_group().size > 1; }

#ifndef KILN_HAVE_MPI

bool dist_available() { return false; }

std::unique_ptr<KVStore> detail::create_dist_sync() {
  throw NotSupported(
      "KVStore 'dist_sync' needs MPI, which this build does not have (install libopenmpi-dev and reconfigure)");
}

ProcessGroup detail::mpi_process_group() {
  throw NotSupported(
      "this build has no MPI: processes cannot be bootstrapped (install libopenmpi-dev and reconfigure)");
}

void detail::mpi_broadcast_bytes(void*, int, const std::string& what) { mpi_process_group(); }

#else

bool dist_available() { return true; }

namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(fmt::format("KVStore(dist_sync): {} failed: {}", what, std::string(text, static_cast<size_t>(len))));
}

MPI_Datatype mpi_type(DType t, const Key& key) {
  switch (t) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kUint8:
      return MPI_UINT8_T;
    case DType::kInt8:
      return MPI_INT8_T;
    default:
      throw TypeError(
          fmt::format("KVStore(dist_sync) key '{}': dtype {} cannot be reduced across processes yet "
                      "(float32, float64, int8, uint8, int32, int64 can)",
                      key, t));
  }
}

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  try {
    engine::wait_all();  // allreduces still queued must finish first
  } catch (...) {
  }
  MPI_Finalize();
}

// Initializes MPI once per process (serialized calls: the engine runs them
// one at a time, from whichever worker thread), finalized at exit.
void ensure_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_SERIALIZED) {
    throw NotSupported(
        "KVStore(dist_sync): this MPI library does not allow calls from several threads "
        "(MPI_THREAD_SERIALIZED)");
  }
  std::atexit(finalize_mpi);
}

// Aborts the job when a collective waits longer than KILN_DIST_TIMEOUT_S
// seconds (default 300; 0 turns it off) for the other processes, saying which
// key and which collective this process is stuck in, instead of hanging.
class Watchdog {
 public:
  static Watchdog& get() {
    static Watchdog* w = new Watchdog;  // never destroyed: its thread runs until exit
    return *w;
  }
  void begin(std::string what) {
    std::lock_guard lock(mu_);
    what_ = std::move(what);
    ++count_;
    since_ = std::chrono::steady_clock::now();
    active_ = true;
  }
  void end() {
    std::lock_guard lock(mu_);
    active_ = false;
  }

 private:
  Watchdog() {
    const char* env = std::getenv("KILN_DIST_TIMEOUT_S");
    timeout_s_ = env != nullptr ? std::atof(env) : 300.0;
    if (timeout_s_ > 0) std::thread([this] { watch(); }).detach();
  }
  void watch() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::lock_guard lock(mu_);
      if (!active_) continue;
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
      if (waited < timeout_s_) continue;
      int rank = 0, size = 1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      std::fprintf(stderr,
                   "KVStore: rank %d of %d has waited %.0f s in %s (collective #%lld of this process) "
                   "for the other processes: one of them has died, is stuck, or pushed different keys or a different "
                   "number of steps. Aborting the job (KILN_DIST_TIMEOUT_S sets the limit).\n",
                   rank, size, waited, what_.c_str(), static_cast<long long>(count_));
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
  }

  std::mutex mu_;
  std::string what_;
  int64_t count_ = 0;
  std::chrono::steady_clock::time_point since_;
  bool active_ = false;
  double timeout_s_ = 300;
};

class DistSyncStore final : public KVStore {
 public:
  DistSyncStore() {
    ensure_mpi();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    chain_ = engine::get().new_var();
  }
  ~DistSyncStore() override { engine::get().delete_var(chain_); }

  std::string_view type() const override { return "dist_sync"; }
  int rank() const override { return rank_; }
  int num_workers() const override { return size_; }

 protected:
  // MPI moves host memory: values on a GPU take the nccl store.
  std::string unreachable(Device device) const override {
    if (device.is_cpu()) return {};
    return " (dist_sync allreduces host memory over MPI and serves CPU devices; GPU arrays across processes take "
           "the 'nccl' store)";
  }

  void reduce(const Key& key, Entry& entry, const std::vector<NDArray>& values, int priority) override {
    detail::reduce_device_tree(entry.stored, entry.home_fixed, load_, values, priority);
    if (size_ == 1) return;
    MPI_Datatype type = mpi_type(entry.stored.dtype(), key);
    collective(entry.stored, priority, "mpi_allreduce",
               fmt::format("the allreduce of key '{}' of KVStore(dist_sync)", key), [type](void* data, int count) {
                 check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, count, type, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
               });
  }

  void sync_from_root(const Key& key, Entry& entry, int priority) override {
    if (size_ == 1) return;
    MPI_Datatype type = mpi_type(entry.stored.dtype(), key);
    collective(
        entry.stored, priority, "mpi_bcast", fmt::format("the broadcast of key '{}' of KVStore(dist_sync)", key),
        [type](void* data, int count) { check_mpi(MPI_Bcast(data, count, type, 0, MPI_COMM_WORLD), "MPI_Bcast"); });
  }

 private:
  // Queues `fn(data, count)` on `a` on its device's copy lane. Every
  // collective also writes `chain_`, so they run one at a time in the order
  // they were pushed, whatever their priorities and readiness: the same
  // order on every process, which MPI requires.
  template <typename F>
  void collective(const NDArray& a, int priority, std::string_view name, std::string what, F fn) {
    KILN_CHECK(a.size() <= INT32_MAX, ValueError, "KVStore(dist_sync): arrays over 2^31 elements are not supported");
    engine::get().push(
        [a, fn, what = std::move(what)](engine::RunContext) {
          Watchdog::get().begin(what);
          try {
            fn(a.data(), static_cast<int>(a.size()));
          } catch (...) {
            Watchdog::get().end();
            throw;
          }
          Watchdog::get().end();
        },
        {a.var()}, {a.var(), chain_},
        {.device = a.device(), .lane = engine::Lane::kCopy, .priority = priority, .name = name});
  }

  int rank_ = 0, size_ = 1;
  engine::Var* chain_ = nullptr;
  std::unordered_map<Device, int64_t> load_;
};

}  // namespace

std::unique_ptr<KVStore> detail::create_dist_sync() { return std::make_unique<DistSyncStore>(); }

ProcessGroup detail::mpi_process_group() {
  ensure_mpi();
  ProcessGroup g;
  MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g.size);
  return g;
}

void detail::mpi_broadcast_bytes(void* data, int bytes, const std::string& what) {
  ensure_mpi();
  Watchdog::get().begin(what);
  int rc = MPI_Bcast(data, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
  Watchdog::get().end();
  check_mpi(rc, "MPI_Bcast");
}

#endif

}  // namespace kiln::kv
