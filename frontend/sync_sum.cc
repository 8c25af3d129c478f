#include "frontend/sync_sum.h"

#include <algorithm>
#include <cstring>

#include <fmt/ranges.h>

#include "frontend/autograd.h"
#include "frontend/autograd_tape.h"
#include "frontend/kvstore.h"
#include "runtime/rendezvous.h"

#if KILN_HAVE_NCCL
#include "backends/cuda/nccl_comm.h"
#endif

namespace kiln {

#if KILN_HAVE_NCCL
struct SyncSum::Nccl {
  std::vector<Device> devices;
  std::shared_ptr<cuda::NcclComm> comm;
  // What the parties of a round hand the meeting, by slot (written by each
  // party before it arrives; read by the last arrival's act).
  struct Round {
    std::vector<std::vector<NDArray>> in, out;
  };
  Round forward, backward;
};
#else
struct SyncSum::Nccl {
  struct Round {};
  Round forward, backward;
};
#endif

namespace {

// The NCCL path of a slot's op: hand the parts to the meeting, whose last
// arrival launches one grouped allreduce of every slot's parts.
void nccl_sum(const std::shared_ptr<Rendezvous>& r, const std::shared_ptr<SyncSum::Nccl>& nccl,
              SyncSum::Nccl::Round* round, int slot, Device device, const std::vector<NDArray>& in,
              const std::vector<NDArray>& outs) {
#if KILN_HAVE_NCCL
  round->in[static_cast<size_t>(slot)] = in;
  round->out[static_cast<size_t>(slot)] = outs;
  r->meet(slot, device, [&] {
    cuda::NcclBucket b{.dtype = DType::kFloat32, .what = r->what()};
    const size_t n_dev = nccl->devices.size();
    for (const NDArray& p : in) b.bytes.push_back(p.nbytes());
    b.srcs.resize(n_dev);
    b.dsts.resize(n_dev);
    for (size_t i = 0; i < n_dev; ++i) {
      for (size_t k = 0; k < in.size(); ++k) {
        b.srcs[i].push_back(round->in[i][k].data());
        b.dsts[i].push_back({round->out[i][k].data()});
      }
    }
    nccl->comm->run(b);
  });
#else
  KILN_ASSERT(false);
#endif
}

// Pushes the rendezvous op of `slot` and returns its outputs (not recorded).
std::vector<NDArray> push_sum(const std::shared_ptr<Rendezvous>& r, const std::shared_ptr<SyncSum::Nccl>& nccl,
                              SyncSum::Nccl::Round* round, int slot, std::span<const NDArray> parts) {
  const std::string& what = r->what();
  KILN_CHECK(!parts.empty(), ValueError, "{}: slot {} gave no arrays", what, slot);
  KILN_CHECK(engine::get().kind() != engine::Kind::kNaive, NotSupported,
             "{}: a cross-device sum needs the threaded engine; KILN_ENGINE=naive runs each op in the calling "
             "thread, where slot 0 would wait for slots not yet issued",
             what);
  Device device = parts[0].device();
  for (const NDArray& p : parts) {
    KILN_CHECK(!p.is_none(), ValueError, "{}: slot {} gave an empty (none) array", what, slot);
    KILN_CHECK(!p.is_symbolic(), NotSupported,
               "{}: cannot be traced (hybridize): the sum meets calls made for other devices", what);
    KILN_CHECK(p.dtype() == DType::kFloat32, TypeError, "{}: expected float32 arrays, slot {} gave {}", what, slot,
               dtype_short_name(p.dtype()));
    KILN_CHECK(p.device() == device, DeviceError, "{}: slot {} gave arrays on {} and {}; expected one device", what,
               slot, device, p.device());
  }
  KILN_CHECK(device.is_cpu() || device.kind == DeviceKind::kCUDA, NotSupported,
             "{}: a cross-device sum on {} is not supported (CPU devices and CUDA GPUs are)", what, device);
#if KILN_HAVE_NCCL
  if (nccl != nullptr) {
    KILN_CHECK(device == nccl->devices[static_cast<size_t>(slot)], DeviceError,
               "{}: slot {} gave arrays on {}, but the sum runs through NCCL over {} and expects {} there", what, slot,
               device, fmt::join(nccl->devices, ", "), nccl->devices[static_cast<size_t>(slot)]);
  }
#endif
  // Without NCCL a GPU's parts meet the others in host memory: staged by
  // copies, summed on the GPU's compute lane (its worker waits at the
  // meeting, as a CPU device's does), copied back.
  const bool staged = nccl == nullptr && !device.is_cpu();
  const Device host = Device::cpu(0);
  std::vector<NDArray> in, outs;
  std::vector<engine::Var*> reads, writes;
  for (const NDArray& p : parts) {
    in.push_back(staged ? p.copy_to(host) : p);
    if (std::find(reads.begin(), reads.end(), in.back().var()) == reads.end()) reads.push_back(in.back().var());
    outs.push_back(NDArray::empty(p.shape(), {DType::kFloat32, staged ? host : device}));
    writes.push_back(outs.back().var());
  }
  if (nccl != nullptr) {
    auto run = [r, nccl, round, slot, in, outs](engine::RunContext ctx) {
      nccl_sum(r, nccl, round, slot, ctx.device, in, outs);
    };
    engine::get().push(std::move(run), reads, writes,
                       {.device = device, .lane = engine::Lane::kCompute, .name = "sync_sum_nccl", .rendezvous = true});
    return outs;
  }
  engine::get().push(
      [r, slot, in, outs](engine::RunContext ctx) {
        size_t n = 0;
        for (const NDArray& p : in) n += static_cast<size_t>(p.size());
        std::vector<float> part(n), total(n);
        size_t at = 0;
        for (const NDArray& p : in) {
          std::memcpy(part.data() + at, p.data(), p.nbytes());
          at += static_cast<size_t>(p.size());
        }
        r->all_sum(slot, ctx.device, part, total);
        at = 0;
        for (const NDArray& o : outs) {
          std::memcpy(o.data(), total.data() + at, o.nbytes());
          at += static_cast<size_t>(o.size());
        }
      },
      reads, writes, {.device = device, .lane = engine::Lane::kCompute, .name = "sync_sum", .rendezvous = true});
  if (!staged) return outs;
  std::vector<NDArray> back;
  for (const NDArray& o : outs) back.push_back(o.copy_to(device));
  return back;
}

}  // namespace

SyncSum::SyncSum(int parties, std::string what, double timeout_s, std::vector<Device> devices)
    : forward_(std::make_shared<Rendezvous>(parties, what + " (forward)", timeout_s)),
      backward_(std::make_shared<Rendezvous>(parties, what + " (backward)", timeout_s)) {
#if KILN_HAVE_NCCL
  bool gpus = static_cast<int>(devices.size()) == parties;
  for (size_t i = 0; i < devices.size() && gpus; ++i) {
    gpus = devices[i].kind == DeviceKind::kCUDA && std::count(devices.begin(), devices.end(), devices[i]) == 1;
  }
  if (gpus && kv::nccl_unavailable().empty()) {
    nccl_ = std::make_shared<Nccl>();
    std::vector<int> ids;
    for (Device d : devices) ids.push_back(d.id);
    nccl_->comm = cuda::NcclComm::in_process(ids);
    nccl_->devices = std::move(devices);
    for (Nccl::Round* r : {&nccl_->forward, &nccl_->backward}) {
      r->in.resize(static_cast<size_t>(parties));
      r->out.resize(static_cast<size_t>(parties));
    }
  }
#endif
}

int SyncSum::parties() const { return forward_->parties(); }

std::vector<NDArray> SyncSum::operator()(int slot, std::span<const NDArray> parts) const {
  std::vector<NDArray> outs = push_sum(forward_, nccl_, nccl_ ? &nccl_->forward : nullptr, slot, parts);
  bool needs_grad =
      autograd::is_recording() && std::any_of(parts.begin(), parts.end(), [](const NDArray& p) { return p.requires_grad(); });
  if (!needs_grad) return outs;

  auto node = std::make_shared<autograd::detail::Node>();
  node->custom = true;
  node->is_train = autograd::is_training();
  for (const NDArray& p : parts) {
    node->inputs.push_back(p.requires_grad() ? autograd::detail::Edge{p.ag_node(), p.ag_index()}
                                             : autograd::detail::Edge{});
    node->input_types.push_back({p.shape(), p.dtype()});
    node->output_types.push_back({p.shape(), p.dtype()});
  }
  node->custom_backward = [backward = backward_, nccl = nccl_, slot](std::span<const NDArray> out_grads,
                                                                     const autograd::detail::CustomBackwardArgs&) {
    return push_sum(backward, nccl, nccl ? &nccl->backward : nullptr, slot, out_grads);
  };
  for (size_t i = 0; i < outs.size(); ++i) outs[i].set_ag_entry(node, static_cast<int>(i));
  return outs;
}

}  // namespace kiln
