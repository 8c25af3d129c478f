// The nccl KVStore (frontend/kvstore.h): per-GPU sums, then one NCCL
// allreduce per bucket of keys (backends/cuda/nccl_comm.h). Compiled in
// every build; without the CUDA backend or NCCL's header the store reports
// itself unavailable.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "frontend/kvstore.h"
#include "runtime/device_backend.h"

#if KILN_HAVE_NCCL
#include "backends/cuda/nccl_comm.h"
#endif

namespace kiln::kv {

#if !KILN_HAVE_NCCL

std::string nccl_unavailable() {
#if KILN_HAVE_CUDA
  return "this build has no NCCL (nccl.h was not found when it was configured)";
#else
  return "this build has no CUDA backend";
#endif
}

std::string nccl_description() { return "no (" + nccl_unavailable() + ")"; }

std::unique_ptr<KVStore> detail::create_nccl() {
  throw NotSupported(fmt::format("KVStore 'nccl' cannot be used: {}; use 'device' or 'local'", nccl_unavailable()));
}

#else

std::string nccl_unavailable() {
  std::string why = cuda::nccl_unavailable();
  if (!why.empty()) return why;
  if (device_count(DeviceKind::kCUDA) == 0) return "this machine has no GPU (no CUDA device is visible)";
  return {};
}

std::string nccl_description() { return cuda::nccl_description(); }

namespace {

constexpr std::string_view kStore = "KVStore(nccl)";

// "'a', 'b', 'c' and 5 more"
std::string key_list(const std::vector<const Key*>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < 4; ++i) s += fmt::format("{}'{}'", i == 0 ? "" : ", ", *keys[i]);
  if (keys.size() > 4) s += fmt::format(" and {} more", keys.size() - 4);
  return s;
}

class NcclStore final : public KVStore {
 public:
  NcclStore() : bucket_bytes_(detail::nccl_bucket_bytes()) {
    const char* env = std::getenv("KILN_DIST_TIMEOUT_S");
    timeout_s_ = env != nullptr ? std::atof(env) : 300.0;
    if (launched_process_group().size > 1) {
      KILN_CHECK(dist_available(), NotSupported,
                 "KVStore 'nccl': started by an MPI launcher with {} processes, but this build has no MPI to "
                 "bootstrap NCCL's ranks (install libopenmpi-dev and reconfigure)",
                 launched_process_group().size);
      group_ = detail::mpi_process_group();
    }
    chain_ = engine::get().new_var();
  }
  ~NcclStore() override { engine::get().delete_var(chain_); }

  std::string_view type() const override { return "nccl"; }
  int rank() const override { return group_.rank; }
  int num_workers() const override { return group_.size; }

 protected:
  std::string unreachable(Device device) const override {
    if (device.is_cpu()) {
      return " (the nccl store sums GPU memory with NCCL; arrays on CPU devices take the 'device' or 'local' "
             "store)";
    }
    if (device.kind != DeviceKind::kCUDA) return " (NCCL serves CUDA GPUs only)";
    if (comm_ != nullptr && device.id != comm_->devices()[0]) {
      return fmt::format(" (this process is NCCL rank {} of {} on {}: one GPU per process)", group_.rank, group_.size,
                         Device::cuda(comm_->devices()[0]));
    }
    return {};
  }

  void reduce(const Key& key, Entry& entry, const std::vector<NDArray>& values, int priority) override {
    reduce_batch({PushItem{key, values, priority}}, {&entry});
  }

  void reduce_batch(const std::vector<PushItem>& items, const std::vector<Entry*>& entries) override;

  void sync_from_root(const Key& key, Entry& entry, int priority) override {
    if (group_.size == 1) return;
    ensure_comm(entry.stored.device(), key);
    check_failure({&key});
    Segment seg{.key = &key,
                .entry = &entry,
                .bytes = entry.stored.nbytes(),
                .per_device = {entry.stored},
                .dsts = {{entry.stored}}};
    launch(comm_, cuda::NcclBucket::Op::kBroadcast, entry.stored.dtype(), {seg}, priority);
  }

 private:
  struct Segment {
    const Key* key = nullptr;
    Entry* entry = nullptr;
    size_t bytes = 0;
    std::vector<NDArray> per_device;          // the value to reduce on each GPU of the bucket
    std::vector<std::vector<NDArray> > dsts;  // per GPU: where the sum goes
  };

  // Across processes: this process's communicator, made at the first call
  // (every process makes it at the same call: they push the same keys).
  void ensure_comm(Device device, const Key& key) {
    if (comm_ != nullptr) return;
    cuda::NcclId id{};
    if (group_.rank == 0) id = cuda::nccl_make_id();
    detail::mpi_broadcast_bytes(
        id.data(), static_cast<int>(id.size()),
        fmt::format("the NCCL bootstrap (MPI_Bcast of the unique id) of {} at key '{}'", kStore, key));
    try {
      comm_ = cuda::NcclComm::across_processes(device.id, group_.rank, group_.size, id, timeout_s_);
    } catch (Error& e) {
      e.add_context(fmt::format("{} rank {} of {}, key '{}'", kStore, group_.rank, group_.size, key));
      throw;
    }
  }

  void check_failure(const std::vector<const Key*>& keys, const cuda::NcclComm* comm = nullptr) const {
    if (comm == nullptr) comm = comm_.get();
    if (comm == nullptr) return;
    std::string why = comm->failure();
    KILN_CHECK(why.empty(), Error, "{} (rank {} of {}), keys {}: the communicator was aborted earlier: {}", kStore,
               group_.rank, group_.size, key_list(keys), why);
  }

  // Queues one collective over `segs` (one bucket) on the compute lane of
  // the communicator's first GPU.
  void launch(const std::shared_ptr<cuda::NcclComm>& comm, cuda::NcclBucket::Op op, DType dtype,
              std::vector<Segment> segs, int priority);

  size_t bucket_bytes_;
  double timeout_s_ = 300;
  ProcessGroup group_;
  std::shared_ptr<cuda::NcclComm> comm_;  // across processes only
  engine::Var* chain_ = nullptr;          // written by every collective: they run in push order
  std::unordered_map<Device, int64_t> load_;
};

void NcclStore::reduce_batch(const std::vector<PushItem>& items, const std::vector<Entry*>& entries) {
  // Checks first: nothing is queued when one item is refused.
  for (const PushItem& item : items) {
    DType t = item.values[0].dtype();
    KILN_CHECK(cuda::nccl_supports(t), TypeError,
               "{} push of key '{}': NCCL cannot sum {} arrays (value 0 is on {}); float32, float16, bfloat16, "
               "float64, int8, uint8, int32, int64 can",
               kStore, item.key, dtype_name(t), item.values[0].device());
    if (group_.size > 1) {
      Device first = item.values[0].device();
      for (const NDArray& v : item.values) {
        KILN_CHECK(v.device() == first, DeviceError,
                   "{} push of key '{}': values on {} and {}; with several processes each process is one NCCL rank "
                   "on one GPU",
                   kStore, item.key, first, v.device());
      }
    }
  }
  if (items.empty()) return;
  if (group_.size > 1) ensure_comm(items[0].values[0].device(), items[0].key);

  // Per item: one value per GPU (several on one GPU are summed there first).
  std::vector<Segment> segs;
  std::vector<std::vector<int> > devices;  // per item, sorted CUDA ids
  std::vector<detail::BucketItem> plan_items;
  std::map<std::pair<DType, std::vector<int> >, int> groups;
  for (size_t i = 0; i < items.size(); ++i) {
    const PushItem& item = items[i];
    Entry& e = *entries[i];
    detail::fix_home(e.stored, e.home_fixed, load_, item.values);
    std::vector<int> ids;
    for (const NDArray& v : item.values) ids.push_back(v.device().id);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    Segment seg{.key = &item.key, .entry = &e, .bytes = e.stored.nbytes()};
    for (int id : ids) {
      std::vector<NDArray> here;
      for (const NDArray& v : item.values) {
        if (v.device().id == id) here.push_back(v);
      }
      if (here.size() == 1) {
        seg.per_device.push_back(here[0]);
      } else {
        NDArray sum = NDArray::empty(e.stored.shape(), {e.stored.dtype(), Device::cuda(id)});
        detail::sum_async(here, sum, item.priority);
        seg.per_device.push_back(sum);
      }
      seg.dsts.emplace_back();
      if (e.stored.device() == Device::cuda(id)) seg.dsts.back().push_back(e.stored);
    }
    const int group = groups.try_emplace({e.stored.dtype(), ids}, static_cast<int>(groups.size())).first->second;
    plan_items.push_back({seg.bytes, group});
    devices.push_back(std::move(ids));
    segs.push_back(std::move(seg));
  }

  for (const detail::BucketRange& r : detail::plan_buckets(plan_items, bucket_bytes_)) {
    std::shared_ptr<cuda::NcclComm> comm = group_.size > 1 ? comm_ : cuda::NcclComm::in_process(devices[r.begin]);
    std::vector<const Key*> keys;
    int priority = items[r.begin].priority;
    for (size_t i = r.begin; i < r.end; ++i) {
      keys.push_back(&items[i].key);
      priority = std::max(priority, items[i].priority);
    }
    check_failure(keys, comm.get());
    std::vector<Segment> bucket(std::make_move_iterator(segs.begin() + static_cast<ptrdiff_t>(r.begin)),
                                std::make_move_iterator(segs.begin() + static_cast<ptrdiff_t>(r.end)));
    // A home outside this push's GPUs (fixed by an earlier push on others)
    // receives the sum by a copy from the first GPU's result.
    std::vector<std::pair<NDArray, NDArray> > copies;  // (result, stored)
    for (Segment& seg : bucket) {
      bool home_in = false;
      for (const auto& d : seg.dsts) home_in = home_in || !d.empty();
      if (home_in) continue;
      NDArray result =
          NDArray::empty(seg.entry->stored.shape(), {seg.entry->stored.dtype(), seg.per_device[0].device()});
      seg.dsts[0].push_back(result);
      copies.emplace_back(result, seg.entry->stored);
    }
    launch(comm, cuda::NcclBucket::Op::kAllReduce, items[r.begin].values[0].dtype(), std::move(bucket), priority);
    for (auto& [result, stored] : copies) result.copy_to(stored, priority, "kv_copy");
  }
}

void NcclStore::launch(const std::shared_ptr<cuda::NcclComm>& comm, cuda::NcclBucket::Op op, DType dtype,
                       std::vector<Segment> segs, int priority) {
  const size_t n_dev = comm->devices().size();
  std::vector<engine::Var*> reads, writes{chain_};
  std::vector<const Key*> keys;
  size_t bytes = 0;
  for (const Segment& s : segs) {
    KILN_ASSERT(s.per_device.size() == n_dev && s.dsts.size() == n_dev);
    keys.push_back(s.key);
    bytes += s.bytes;
    for (const NDArray& v : s.per_device) reads.push_back(v.var());
    for (const auto& d : s.dsts)
      for (const NDArray& a : d) writes.push_back(a.var());
  }
  std::string what = fmt::format("the {} of key{} {} ({} bytes) of {}, rank {} of {}",
                                 op == cuda::NcclBucket::Op::kAllReduce ? "allreduce" : "broadcast",
                                 keys.size() == 1 ? "" : "s", key_list(keys), bytes, kStore, group_.rank, group_.size);
  // The arrays travel with the op (their storage stays alive until it ran);
  // pointers are read when it runs.
  struct Arrays {
    std::vector<std::vector<NDArray> > srcs;                // [segment][gpu]
    std::vector<std::vector<std::vector<NDArray> > > dsts;  // [segment][gpu]
  } arrays;
  std::vector<size_t> seg_bytes;
  for (Segment& s : segs) {
    arrays.srcs.push_back(std::move(s.per_device));
    arrays.dsts.push_back(std::move(s.dsts));
    seg_bytes.push_back(s.bytes);
  }
  engine::get().push(
      [comm, op, dtype, seg_bytes = std::move(seg_bytes), arrays = std::move(arrays),
       what = std::move(what)](engine::RunContext) {
        cuda::NcclBucket b{.op = op, .dtype = dtype, .bytes = seg_bytes, .what = what};
        const size_t n_dev = comm->devices().size(), n_seg = seg_bytes.size();
        b.srcs.assign(n_dev, std::vector<const void*>(n_seg));
        b.dsts.assign(n_dev, std::vector<std::vector<void*> >(n_seg));
        for (size_t k = 0; k < n_seg; ++k) {
          for (size_t i = 0; i < n_dev; ++i) {
            b.srcs[i][k] = arrays.srcs[k][i].data();
            for (const NDArray& a : arrays.dsts[k][i]) b.dsts[i][k].push_back(a.data());
          }
        }
        comm->run(b);
      },
      reads, writes,
      {.device = Device::cuda(comm->devices()[0]),
       .lane = engine::Lane::kCompute,
       .priority = priority,
       .name = op == cuda::NcclBucket::Op::kAllReduce ? "nccl_allreduce" : "nccl_broadcast"});
}

}  // namespace

std::unique_ptr<KVStore> detail::create_nccl() {
  std::string why = nccl_unavailable();
  KILN_CHECK(why.empty(), NotSupported, "KVStore 'nccl' cannot be used: {}; use 'device' or 'local'", why);
  return std::make_unique<NcclStore>();
}

#endif  // KILN_HAVE_NCCL

}  // namespace kiln::kv
