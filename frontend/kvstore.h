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
//   nccl    the CUDA issue (create() throws NotSupported for now).
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
  // "local" or "device"; "nccl" and "dist_sync" throw NotSupported naming the
  // missing backend; anything else throws ValueError listing the types.
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
}  // namespace detail

// True when this build has MPI (the dist_sync store).
bool dist_available();
// True when this process was started by an MPI launcher with more than one
// process (mpirun -np N, N > 1): Trainer's "auto" then picks dist_sync.
bool launched_under_mpi();
// This process's rank and the number of processes as the launcher's
// environment tells them (without starting MPI); {0, 1} when not launched so.
struct ProcessGroup {
  int rank = 0;
  int size = 1;
};
ProcessGroup launched_process_group();

}  // namespace kiln::kv
