// KVStore: sums arrays of the same key across devices (and processes), the
// communication half of data-parallel training (MXNet's KVStore).
//
//   auto kv = kv::KVStore::create("device");
//   kv->init("0.weight", w);                       // shape and dtype of the key
//   kv->pushpull("0.weight", {g0, g1}, {g0, g1});  // g0 = g1 = g0 + g1 (queued)
//   kv->push("0.weight", {g0, g1});                // stored value = g0 + g1
//   kv->pull("0.weight", {w0, w1});                // w0 = w1 = stored value
//   kv->broadcast("b", b0, {b0, b1});              // init + pull
//
// Types:
//   local   the sum is computed on cpu(0): one kernel adds the values, the
//           result is copied back to each out.
//   device  the sum is computed on the values' devices: each key gets a home
//           device at its first push (the one with the fewest bytes of keys so
//           far, so keys spread over the devices), and values are added in a
//           binary tree whose pairs sum on the first one's device.
// CPU devices share host memory, so a sum kernel reads the values of other
// CPU devices in place; a value on another device (a GPU, or the CPU when the
// sum runs on a GPU) is first staged on the summing device by a copy on the
// copy lane, and a GPU sums with its add_n kernel. So local and device serve
// any mix of CPU and CUDA devices ([cuda(0), cpu(0)] included).
//   dist_sync  several processes (launched with `mpirun -np N`), each with
//           its devices: the device type's sum inside each process, then an
//           MPI allreduce of the per-process sums. The allreduces run in the
//           order keys are pushed (which must be the same on every process:
//           the Trainer pushes its parameters in order), one at a time.
//           broadcast takes rank 0's value. A collective that waits more
//           than KILN_DIST_TIMEOUT_S seconds (default 300) for the other
//           processes aborts the job with a message naming the key and rank
//           instead of hanging. Needs a build with MPI
//           (dist_available()); otherwise create() throws NotSupported.
//   nccl    GPUs only, through NCCL (backends/cuda/nccl_comm.h): the values of
//           a key are first summed per GPU (several on one GPU: its add_n,
//           float32 only on CUDA today), then one NCCL allreduce over the
//           GPUs that hold values gives the sum on each of them; the key's
//           home (the least loaded of those
//           GPUs, as `device`) keeps it. In one process the GPUs share one
//           communicator per device set (ncclCommInitAll, cached). Under
//           `mpirun -np N` (N > 1, MPI build) each process is one rank with
//           one GPU (the device of its first value), bootstrapped over MPI;
//           collectives then run in push order (the same on every process),
//           broadcast takes rank 0's value, and one that has not finished
//           after KILN_DIST_TIMEOUT_S seconds (default 300) aborts the
//           communicator (ncclCommAbort) and makes the store's next call
//           throw, naming the rank and keys. Bucketing: push_batch packs
//           consecutive keys of one dtype and device set into buckets of at
//           most KILN_NCCL_BUCKET_MB MiB (default 25; plan_buckets below), one
//           allreduce each; a larger key goes alone; push/pushpull of one key
//           is a bucket of one. NCCL runs on its own stream per GPU, after
//           the values' producers (an event on the compute stream) and before
//           any later work of that GPU (the compute stream waits for an event
//           on the NCCL stream). dtypes: float32, float16, bfloat16 and the
//           other types NCCL sums (float64, int8, uint8, int32, int64). A CPU
//           value or out is a DeviceError naming the key, store and device.
//           create() throws NotSupported naming why when this build has no
//           CUDA or NCCL header, libnccl.so.2 cannot be loaded (it is opened
//           at run time; KILN_NCCL_LIBRARY names another file, KILN_NCCL=0
//           turns NCCL off) or the machine has no GPU. Its tests
//           (tests/cuda/cuda_nccl_test.cc) need one GPU (a one-rank
//           communicator); several GPUs in a process and several processes
//           are written to NCCL's documented use but have never run.
//
// Asynchrony: every call only queues engine operations and returns. A key's
// reduction reads the values' engine variables, so it starts as soon as
// those values are written (during backward), independently of other keys.
// Copies run on the destination device's copy lane, sums on its compute lane,
// all at `priority` (higher runs first among ready operations: the Trainer
// gives late layers, whose gradients are ready first, the higher priority).
// `outs` may be the `values` themselves (in-place allreduce).
//
// Errors (thrown by the call, before anything is queued): an unknown key, a
// key initialized twice, a value or out whose shape or dtype differs from the
// key's, or one on a device this store cannot reach; each names the key, the
// store type and the device(s).
//
// Thread safety: none; one thread drives a store (the Trainer's).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "frontend/ndarray.h"

namespace kiln::kv {

using Key = std::string;

class KVStore {
 public:
  // "local", "device", "dist_sync" or "nccl"; the last two throw
  // NotSupported naming what is missing (MPI; CUDA, NCCL or a GPU); anything
  // else throws ValueError listing the types.
  static std::unique_ptr<KVStore> create(std::string_view type);
  virtual ~KVStore() = default;

  virtual std::string_view type() const = 0;
  // This process's place among the processes sharing the store (one for the
  // in-process types).
  virtual int rank() const { return 0; }
  virtual int num_workers() const { return 1; }

  // Registers `key` with a copy of `value` (queued). ValueError if present.
  void init(const Key& key, const NDArray& value);
  void init(int64_t key, const NDArray& value) { init(std::to_string(key), value); }
  bool has_key(const Key& key) const { return entries_.contains(key); }

  // Stored value of `key` = sum of `values` (at least one).
  void push(const Key& key, const std::vector<NDArray>& values, int priority = 0);
  // Several pushes in one call, in order: as push() of each item, except
  // that a store may combine their reductions (nccl packs them into
  // buckets). Every item is checked before anything is queued.
  struct PushItem {
    Key key;
    std::vector<NDArray> values;
    int priority = 0;
  };
  void push_batch(const std::vector<PushItem>& items);

  // Every array of `outs` = stored value of `key`.
  void pull(const Key& key, const std::vector<NDArray>& outs, int priority = 0);
  // push then pull.
  void pushpull(const Key& key, const std::vector<NDArray>& values, const std::vector<NDArray>& outs, int priority = 0);
  // init (if the key is new) or overwrite with `value`, then pull.
  void broadcast(const Key& key, const NDArray& value, const std::vector<NDArray>& outs, int priority = 0);

  void push(int64_t key, const std::vector<NDArray>& values, int priority = 0) {
    push(std::to_string(key), values, priority);
  }
  void pull(int64_t key, const std::vector<NDArray>& outs, int priority = 0) {
    pull(std::to_string(key), outs, priority);
  }
  void pushpull(int64_t key, const std::vector<NDArray>& values, const std::vector<NDArray>& outs, int priority = 0) {
    pushpull(std::to_string(key), values, outs, priority);
  }

  // Where the stored value of `key` lives (ValueError for an unknown key).
  Device home(const Key& key) const;

 protected:
  struct Entry {
    NDArray stored;
    bool home_fixed = false;
  };
  // Sums `values` (already validated) into `entry.stored`, moving the stored
  // array to the key's home first if the type decides homes at first push.
  virtual void reduce(const Key& key, Entry& entry, const std::vector<NDArray>& values, int priority) = 0;
  // push_batch's reduction of validated items (entries[i] is items[i]'s);
  // by default reduce() of each in order.
  virtual void reduce_batch(const std::vector<PushItem>& items, const std::vector<Entry*>& entries);
  // After broadcast set the stored value: make every process agree (dist).
  virtual void sync_from_root(const Key& key, Entry& entry, int priority) {}
  const Entry& entry(const Key& key, std::string_view what) const;
  Entry& entry(const Key& key, std::string_view what);
  // Empty when values on `device` can take part (every device for the
  // in-process types), else why they cannot (the end of a DeviceError).
  virtual std::string unreachable(Device device) const { return {}; }
  // ShapeError / TypeError / DeviceError naming the key and the offending array.
  void check_arrays(const Key& key, const Entry& e, const std::vector<NDArray>& arrays, std::string_view what,
                    std::string_view role) const;

 private:
  std::map<Key, Entry> entries_;
};

// A process's place among the processes of a job.
struct ProcessGroup {
  int rank = 0;
  int size = 1;
};

namespace detail {
// Queued building block: out = sum(inputs), all on out's device, on its
// compute lane ("kv_sum" in a trace). Copies are NDArray::copy_to(dst, ...),
// named "kv_copy" for aggregation; the Trainer's broadcast of updated weights
// passes "trainer_copy", so a trace tells the two apart.
void sum_async(const std::vector<NDArray>& inputs, const NDArray& out, int priority);
// The device type's reduction: fixes the home of `stored` at the first call
// (the least loaded device of the values, by bytes in `load`), then sums
// `values` into it by a binary tree.
void reduce_device_tree(NDArray& stored, bool& home_fixed, std::unordered_map<Device, int64_t>& load,
                        const std::vector<NDArray>& values, int priority);
// The dist_sync store (frontend/kvstore_dist.cc).
std::unique_ptr<KVStore> create_dist_sync();
// The nccl store (frontend/kvstore_nccl.cc).
std::unique_ptr<KVStore> create_nccl();
// Fixes the home of `stored` at the first call: the least loaded device of
// `values` by bytes in `load` (the first on ties), moving `stored` there.
void fix_home(NDArray& stored, bool& home_fixed, std::unordered_map<Device, int64_t>& load,
              const std::vector<NDArray>& values);
// MPI for the stores that bootstrap over it (frontend/kvstore_dist.cc):
// this process's rank and size in MPI_COMM_WORLD (starting MPI), and a
// broadcast of `bytes` from rank 0, aborting the job after
// KILN_DIST_TIMEOUT_S as dist_sync's collectives do. NotSupported without MPI.
ProcessGroup mpi_process_group();
void mpi_broadcast_bytes(void* data, int bytes, const std::string& what);

// The nccl store's bucketing, a pure function. Items in push order, each
// with its size and a group (items of one group, i.e. the same dtype and
// devices, may share a bucket). A bucket holds consecutive items of one
// group whose sizes add up to at most `limit` bytes; an item larger than
// `limit` is a bucket of its own; a change of group closes the bucket.
// Returns the buckets as [begin, end) index ranges, in order, covering every
// item (none for no items). ValueError for limit 0.
struct BucketItem {
  size_t bytes = 0;
  int group = 0;
};
struct BucketRange {
  size_t begin = 0, end = 0;
  friend bool operator==(const BucketRange&, const BucketRange&) = default;
};
std::vector<BucketRange> plan_buckets(const std::vector<BucketItem>& items, size_t limit);
// The nccl store's bucket size: KILN_NCCL_BUCKET_MB MiB (default 25).
size_t nccl_bucket_bytes();
}  // namespace detail

// Empty when create("nccl") can succeed here (a CUDA build with NCCL's
// header, libnccl loadable, a GPU); else why not.
std::string nccl_unavailable();
// For `kiln info`: "2.28.9 (libnccl.so.2)", or "no (why)".
std::string nccl_description();

// True when this build has MPI (the dist_sync store).
bool dist_available();
// True when this process was started by an MPI launcher with more than one
// process (mpirun -np N, N > 1): Trainer's "auto" then picks dist_sync.
bool launched_under_mpi();
// This process's rank and the number of processes as the launcher's
// environment tells them (without starting MPI); {0, 1} when not launched so.
ProcessGroup launched_process_group();

}  // namespace kiln::kv
