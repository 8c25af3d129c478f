// NCCL for the CUDA backend: the library, communicators over GPUs, and
// collectives ordered against the compute streams by events.
//
//   if (cuda::nccl_unavailable().empty()) {
//     std::shared_ptr<cuda::NcclComm> c = cuda::NcclComm::in_process({0, 1});  // cached per device set
//     cuda::NcclBucket b{.dtype = DType::kFloat32, .bytes = {n0, n1}, .srcs = ..., .dsts = ...,
//                        .what = "keys 'a', 'b' of KVStore(nccl)"};
//     c->run(b);  // inside an engine op on a CUDA lane
//   }
//
// The library: libnccl.so.2 (or the file KILN_NCCL_LIBRARY names) is opened
// with dlopen at first use, so a Kiln built with NCCL's header runs on a
// machine without libnccl (collectives then report why they cannot run);
// KILN_NCCL=0 turns NCCL off.
//
// Communicators:
//  - in_process(devices): one rank per GPU of `devices`, made with
//    ncclCommInitAll once per device set and kept until exit;
//  - across_processes(...): this process's rank, one GPU per process
//    (ncclCommInitRankConfig, non-blocking, so its bootstrap can time out);
//    made once per process and kept until exit.
//
// Streams and ordering (run): each GPU of the communicator gets its own
// NCCL stream (non-blocking, not the compute lane's). run() records an event
// on each GPU's compute stream and makes the NCCL stream wait for it (so the
// collective follows the producers of its inputs, which the engine queued
// before), packs the inputs into one buffer per GPU when there are several,
// launches one collective per GPU inside ncclGroupStart/End, unpacks the
// result into the destinations, records an event on the NCCL stream and makes
// the compute stream wait for it (so every later kernel, copy and reuse of
// freed memory on that GPU follows the collective). With synchronous lanes
// (KILN_CUDA_LANES=sync) run() also waits for the NCCL streams.
//
// Timeout: a collective still unfinished KILN_DIST_TIMEOUT_S seconds (default
// 300, 0 off) after its launch makes a watchdog thread abort the
// communicator (ncclCommAbort, which ends the waiting kernels) and print what
// was stuck; from then on run() and failure() report that error, naming the
// rank, the collective's `what` and the communicator.
//
// Errors: a failed NCCL call throws kiln::Error naming the call, NCCL's error
// string and last-error text, the rank(s), the device and `what`.
//
// Thread safety: every function may be called from any thread; run() calls
// on one communicator are serialized (NCCL communicators are not
// thread-safe), so the collectives of one communicator are issued in the
// order run() is entered.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ir/device.h"
#include "ir/dtype.h"

namespace kiln::cuda {

// Empty when NCCL can be used in this process; else why not ("KILN_NCCL=0",
// "libnccl.so.2 could not be loaded: ...").
std::string nccl_unavailable();
// "2.28.9 (libnccl.so.2)" for the loaded library, or "no (why)".
std::string nccl_description();
// Whether NCCL can sum arrays of `dtype`.
bool nccl_supports(DType dtype);

// The bootstrap id of a communicator across processes (ncclUniqueId's bytes).
using NcclId = std::array<char, 128>;
// Makes a new id (rank 0 does, then sends it to the others). Throws Error.
NcclId nccl_make_id();

// One collective over the GPUs of a communicator: `bytes.size()` segments,
// each present on every GPU (index i of srcs/dsts: devices()[i]).
struct NcclBucket {
  enum class Op { kAllReduce, kBroadcast };  // sum / rank 0's value
  Op op = Op::kAllReduce;
  DType dtype = DType::kFloat32;
  std::vector<size_t> bytes;                          // per segment
  std::vector<std::vector<const void*>> srcs;         // [gpu][segment]
  std::vector<std::vector<std::vector<void*>>> dsts;  // [gpu][segment]: where the result goes (any number)
  std::string what;                                   // "the allreduce of keys 'a', 'b' of KVStore(nccl)"
};

class NcclComm {
 public:
  // The communicator of `devices` (CUDA ids, distinct): made on first use.
  // Throws NotSupported when NCCL is unavailable, Error when NCCL fails.
  static std::shared_ptr<NcclComm> in_process(const std::vector<int>& devices);
  // Rank `rank` of `nranks` processes, on GPU `device`, from rank 0's `id`;
  // waits at most `timeout_s` for the other ranks (then aborts and throws).
  // Made once per process: later calls return the first communicator (and
  // throw ValueError when their arguments differ).
  static std::shared_ptr<NcclComm> across_processes(int device, int rank, int nranks, const NcclId& id,
                                                    double timeout_s);

  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // This process's GPUs, in rank order.
  const std::vector<int>& devices() const { return devices_; }
  int first_rank() const { return first_rank_; }
  int nranks() const { return nranks_; }
  // "ranks 0-1 of 2 on cuda(0), cuda(1)" / "rank 1 of 2 on cuda(0)".
  std::string describe() const;

  // Launches `b` (see the header comment). Call inside an engine op on a
  // CUDA lane. Throws Error (NCCL or CUDA failure, or the communicator was
  // aborted), ValueError for a malformed bucket, TypeError for a dtype NCCL
  // cannot sum.
  void run(const NcclBucket& b);
  // Empty, or the error that aborted this communicator.
  std::string failure() const;

  struct Impl;  // NCCL's handles, streams, events (nccl_comm.cc)

 private:
  NcclComm(std::vector<int> devices, int first_rank, int nranks);
  // Records `message` as the failure and aborts the communicator;
  // `caller_runs`: called from inside run() (which holds its lock).
  void abort_after_timeout(const std::string& message, bool caller_runs);

  std::vector<int> devices_;
  int first_rank_ = 0;
  int nranks_ = 1;
  std::unique_ptr<Impl> impl_;
  friend class NcclWatchdog;
};

}  // namespace kiln::cuda
