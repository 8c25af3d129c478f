#include "frontend/sync_sum.h"

#include <algorithm>
#include <cstring>

#include "frontend/autograd.h"
#include "frontend/autograd_tape.h"
#include "runtime/rendezvous.h"

namespace kiln {

namespace {

// Pushes the rendezvous op of `slot` and returns its outputs (not recorded).
std::vector<NDArray> push_sum(const std::shared_ptr<Rendezvous>& r, int slot, std::span<const NDArray> parts) {
  const std::string& what = r->what();
  KILN_CHECK(!parts.empty(), ValueError, "{}: slot {} gave no arrays", what, slot);
  KILN_CHECK(engine::get().kind() != engine::Kind::kNaive, NotSupported,
             "{}: a cross-device sum needs the threaded engine; KILN_ENGINE=naive runs each op in the calling "
             "thread, where slot 0 would wait for slots not yet issued",
             what);
  Device device = parts[0].device();
  std::vector<NDArray> outs;
  std::vector<engine::Var*> reads, writes;
  for (const NDArray& p : parts) {
    KILN_CHECK(!p.is_none(), ValueError, "{}: slot {} gave an empty (none) array", what, slot);
    KILN_CHECK(!p.is_symbolic(), NotSupported,
               "{}: cannot be traced (hybridize): the sum meets calls made for other devices", what);
    KILN_CHECK(p.dtype() == DType::kFloat32, TypeError, "{}: expected float32 arrays, slot {} gave {}", what, slot,
               dtype_short_name(p.dtype()));
    KILN_CHECK(p.device() == device, DeviceError, "{}: slot {} gave arrays on {} and {}; expected one device", what,
               slot, device, p.device());
    if (std::find(reads.begin(), reads.end(), p.var()) == reads.end()) reads.push_back(p.var());
    outs.push_back(NDArray::empty(p.shape(), {DType::kFloat32, device}));
    writes.push_back(outs.back().var());
  }
  KILN_CHECK(device.is_cpu(), NotSupported, "{}: a cross-device sum on {} is not supported yet (CPU devices only)",
             what, device);
  std::vector<NDArray> in(parts.begin(), parts.end());
  engine::get().push(
      [r, slot, in = std::move(in), outs](engine::RunContext ctx) {
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
      reads, writes,
      {.device = device, .lane = engine::Lane::kCompute, .name = "sync_sum", .rendezvous = true});
  return outs;
}

}  // namespace

SyncSum::SyncSum(int parties, std::string what, double timeout_s)
    : forward_(std::make_shared<Rendezvous>(parties, what + " (forward)", timeout_s)),
      backward_(std::make_shared<Rendezvous>(parties, what + " (backward)", timeout_s)) {}

int SyncSum::parties() const { return forward_->parties(); }

std::vector<NDArray> SyncSum::operator()(int slot, std::span<const NDArray> parts) const {
  std::vector<NDArray> outs = push_sum(forward_, slot, parts);
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
  node->custom_backward = [backward = backward_, slot](std::span<const NDArray> out_grads,
                                                       const autograd::detail::CustomBackwardArgs&) {
    return push_sum(backward, slot, out_grads);
  };
  for (size_t i = 0; i < outs.size(); ++i) outs[i].set_ag_entry(node, static_cast<int>(i));
  return outs;
}

}  // namespace kiln
