// SyncSum: the sum over devices of arrays that separate calls contribute, one
// call per device (the cross-device step of SyncBatchNorm,
// frontend/nn/sync_batch_norm.h).
//
//   SyncSum sum(2, "bn0 step 3");
//   auto s0 = sum(0, {part_on_cpu0});   // queued on cpu(0); returns at once
//   auto s1 = sum(1, {part_on_cpu1});   // queued on cpu(1)
//   // s0[0] and s1[0] both hold part_on_cpu0 + part_on_cpu1 once both ran
//
// Each call pushes one engine operation on its device's compute lane (with
// PushOptions::rendezvous) that contributes its parts to a Rendezvous
// (runtime/rendezvous.h) and blocks that device's worker until every slot has
// contributed; every device has its own worker, so the other devices' work
// (including calls issued later from the same thread) keeps running. A slot
// whose partners never arrive fails after `timeout_s` with an error naming
// `what` that surfaces when its result is read.
//
// Autograd: while recording, a call whose parts need a gradient is one node
// on the tape; its backward is the same cross-device sum of the output
// gradients (d(sum_j x_j)/dx_i = 1), through a second rendezvous, so every
// device's backward must also run for any to finish.
//
// GPUs: when `devices` (the slots' devices, in slot order) are given, all
// distinct GPUs, and NCCL can run (kv::nccl_unavailable() is empty), the sum
// is one grouped ncclAllReduce over the GPUs (backends/cuda/nccl_comm.h), on
// NCCL's streams, launched by the last slot to arrive at the meeting; a call
// on another device than devices[slot] is then a DeviceError. Otherwise a
// GPU slot's parts are copied to host memory, summed with the others there,
// and the sums copied back (so a mix of CPUs and GPUs works), the meeting
// op running on the GPU's compute lane.
//
// Contract: float32 arrays, all parts of a call on one device (a CPU or a
// CUDA GPU); slot in [0, parties), each slot once per round; the same number
// and shapes of parts from every slot. NotSupported under the naive engine
// (KILN_ENGINE=naive runs an op in the pushing thread, so slot 0 would wait
// for a call not yet made), for symbolic arrays (hybridize) and for other
// kinds of devices.
//
// Thread safety: calls may come from one thread or several.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "frontend/ndarray.h"

namespace kiln {

class Rendezvous;

class SyncSum {
 public:
  SyncSum(int parties, std::string what, double timeout_s = 60, std::vector<Device> devices = {});

  std::vector<NDArray> operator()(int slot, std::span<const NDArray> parts) const;
  std::vector<NDArray> operator()(int slot, std::initializer_list<NDArray> parts) const {
    return (*this)(slot, std::span<const NDArray>(parts.begin(), parts.size()));
  }

  int parties() const;
  // Whether the sum runs through NCCL (see above).
  bool uses_nccl() const { return nccl_ != nullptr; }

  struct Nccl;  // the communicator and what the parties of a round hand it

 private:
  std::shared_ptr<Rendezvous> forward_, backward_;
  std::shared_ptr<Nccl> nccl_;
};

}  // namespace kiln
