#include "frontend/train/trainer.h"

#include <algorithm>

#include "frontend/autograd_tape.h"
#include "frontend/train/clip_global_norm.h"

namespace kiln {

Trainer::Trainer(nn::ParameterDict params, std::shared_ptr<optim::Optimizer> optimizer, std::string kvstore)
    : params_(std::move(params)), optimizer_(std::move(optimizer)), kvstore_type_(std::move(kvstore)) {
  KILN_CHECK(optimizer_ != nullptr, ValueError, "Trainer: no optimizer given");
  if (kvstore_type_ != "auto" && kvstore_type_ != "none") kv::KVStore::create(kvstore_type_);  // reject bad names now
}

// ---- data parallelism: the KVStore and fresh gradients

void Trainer::init_kvstore() {
  if (kvstore_ready_) return;
  kvstore_ready_ = true;
  size_t max_devices = 0;
  bool all_gpus = true, any = false;
  for (const auto& [name, p] : params_) {
    if (p.grad_req() == GradReq::kNull || !p.is_initialized()) continue;
    std::vector<Device> devices = p.list_devices();
    max_devices = std::max(max_devices, devices.size());
    for (Device d : devices) all_gpus = all_gpus && d.kind == DeviceKind::kCUDA;
    any = true;
  }
  std::string type = kvstore_type_;
  if (type == "auto") {
    // GPUs only (two or more in this process, or one per process under
    // mpirun) take "nccl" when NCCL can run here; other sets of several
    // devices take "device" (a CPU+GPU mix included), processes launched
    // by mpirun "dist_sync".
    // (Asked only then: the question opens libnccl.)
    auto nccl = [&] { return any && all_gpus && kv::nccl_unavailable().empty(); };
    if (kv::launched_under_mpi()) {
      type = kv::dist_available() && nccl() ? "nccl" : "dist_sync";
    } else {
      type = max_devices < 2 ? "none" : nccl() ? "nccl" : "device";
    }
  }
  if (type != "none") kvstore_ = kv::KVStore::create(type);
  if (kvstore_ && kvstore_->num_workers() > 1) {
    // Every process starts from rank 0's values.
    for (const auto& [name, p] : params_) {
      if (p.grad_req() == GradReq::kNull || !p.is_initialized()) continue;
      std::vector<NDArray> data = p.list_data();
      kvstore_->broadcast(name, data[0], data);
    }
  }
}

std::vector<std::vector<size_t>> Trainer::take_fresh(bool ignore_stale_grad) {
  std::vector<std::vector<size_t>> fresh;
  std::vector<std::string> stale;
  for (const auto& [name, p] : params_) {
    fresh.emplace_back();
    if (p.grad_req() == GradReq::kNull) continue;
    KILN_CHECK(p.is_initialized(), ValueError,
               "Trainer: parameter '{}' is not initialized; call initialize() and run a forward pass first", name);
    std::vector<NDArray> data = p.list_data();
    for (size_t d = 0; d < data.size(); ++d) {
      const auto& leaf = data[d].ag_node();
      if (leaf && leaf->fresh_grad) fresh.back().push_back(d);
    }
    if (fresh.back().empty()) stale.push_back(name);
  }
  if (!stale.empty() && !ignore_stale_grad) {
    std::string names;
    for (const std::string& n : stale) names += (names.empty() ? "'" : ", '") + n + "'";
    throw ValueError(fmt::format(
        "Trainer::step: {} parameter(s) received no gradient from backward since the last step: {}. They did not take "
        "part in the recorded forward pass (an unused layer or branch?). Set their grad_req to null, or pass "
        "ignore_stale_grad = true to skip them",
        stale.size(), names));
  }
  for (const auto& [name, p] : params_) {  // consumed
    if (p.grad_req() == GradReq::kNull) continue;
    for (const NDArray& a : p.list_data()) {
      if (a.ag_node()) a.ag_node()->fresh_grad = false;
    }
  }
  return fresh;
}

void Trainer::reduce_grads(bool ignore_stale_grad, bool to_every_copy) {
  init_kvstore();
  fresh_ = take_fresh(ignore_stale_grad);
  have_fresh_ = true;
  primary_.resize(params_.size(), 0);
  if (!kvstore_) return;
  // Keys are pushed last parameter first: backward writes the later layers'
  // gradients first, and dist_sync runs its allreduces in push order (the
  // same on every process), so this order lets them start during backward.
  // The priorities (the parameter's position) also favour later layers among
  // ready reductions.
  // All pushes go in one batch (the nccl store packs them into buckets),
  // then the pulls.
  std::vector<kv::KVStore::PushItem> pushes;  // priority: the parameter's position + 1
  int index = static_cast<int>(params_.size());
  for (auto it = params_.end(); it != params_.begin(); --index) {
    const auto& [name, p] = *--it;
    const std::vector<size_t>& fresh = fresh_[static_cast<size_t>(index - 1)];
    if (p.grad_req() == GradReq::kNull || fresh.empty()) continue;
    std::vector<NDArray> grads = p.list_grad();
    if (grads.size() < 2 && kvstore_->num_workers() == 1) continue;
    if (!kvstore_->has_key(name)) kvstore_->init(name, grads[fresh[0]]);
    std::vector<NDArray> values;
    for (size_t d : fresh) values.push_back(grads[d]);
    pushes.push_back({name, std::move(values), index});
  }
  kvstore_->push_batch(pushes);
  for (size_t i = 0; i < pushes.size(); ++i) {
    index = pushes[i].priority;
    const nn::Parameter& p = (params_.begin() + (index - 1))->second;
    const std::string& name = pushes[i].key;
    std::vector<NDArray> grads = p.list_grad();
    // The primary copy: the one on the key's home device (no copy needed), else the first.
    size_t& primary = primary_[static_cast<size_t>(index - 1)];
    primary = 0;
    for (size_t d = 0; d < grads.size(); ++d) {
      if (grads[d].device() == kvstore_->home(name)) primary = d;
    }
    kvstore_->pull(name, to_every_copy ? grads : std::vector<NDArray>{grads[primary]}, index);
  }
}

void Trainer::allreduce_grads(bool ignore_stale_grad) { reduce_grads(ignore_stale_grad, true); }

void Trainer::update(int64_t batch_size, bool ignore_stale_grad) {
  KILN_CHECK(batch_size >= 1, ValueError, "Trainer::step: batch_size must be >= 1, got {}", batch_size);
  if (!have_fresh_) fresh_ = take_fresh(ignore_stale_grad);
  have_fresh_ = false;
  primary_.resize(params_.size(), 0);
  double rescale = 1.0 / (static_cast<double>(batch_size) * loss_scale_);
  if (max_grad_norm_ > 0) clip_grads(rescale);
  optimizer_->begin_step();
  int64_t index = 0;
  for (const auto& [name, p] : params_) {
    const std::vector<size_t>& fresh = fresh_[static_cast<size_t>(index)];
    size_t primary = primary_[static_cast<size_t>(index)];
    ++index;
    if (p.grad_req() == GradReq::kNull || fresh.empty()) continue;
    std::vector<NDArray> data = p.list_data(), grads = p.list_grad();
    // One optimizer state per parameter copy.
    auto key = [&](size_t d) { return index * kMaxDevicesPerKind * kNumDeviceKinds + static_cast<int64_t>(d); };
    if (kvstore_ != nullptr && (data.size() > 1 || kvstore_->num_workers() > 1)) {
      // Aggregated: the primary copy holds the sum. Update it once and copy the
      // new values to the other copies (measured faster than updating every
      // copy: bench dp_update).
      optimizer_->update(key(primary), data[primary], grads[primary], rescale);
      for (size_t d = 0; d < data.size(); ++d) {
        if (d != primary) data[primary].copy_to(data[d], static_cast<int>(index), "trainer_copy");
      }
      continue;
    }
    // Not aggregated: each fresh copy follows its own gradient.
    for (size_t d : fresh) optimizer_->update(key(d), data[d], grads[d], rescale);
  }
}

void Trainer::set_max_grad_norm(double max_norm) {
  KILN_CHECK(max_norm >= 0, ValueError, "Trainer: max_grad_norm must be >= 0 (0: no clipping), got {}", max_norm);
  max_grad_norm_ = max_norm;
}

// The gradients update() reads, as update() picks them.
void Trainer::clip_grads(double rescale) {
  std::vector<NDArray> grads;
  std::vector<std::string> names;
  int64_t index = 0;
  for (const auto& [name, p] : params_) {
    const std::vector<size_t>& fresh = fresh_[static_cast<size_t>(index)];
    size_t primary = primary_[static_cast<size_t>(index)];
    ++index;
    if (p.grad_req() == GradReq::kNull || fresh.empty()) continue;
    std::vector<NDArray> all = p.list_grad();
    if (kvstore_ != nullptr && (all.size() > 1 || kvstore_->num_workers() > 1)) {
      grads.push_back(all[primary]);
      names.push_back(name);
    } else {
      KILN_CHECK(all.size() == 1, NotSupported,
                 "Trainer: gradient clipping with parameter '{}' on {} devices and no aggregation (kvstore 'none') "
                 "would need one norm per copy; use an aggregating kvstore",
                 name, all.size());
      grads.push_back(all[0]);
      names.push_back(name);
    }
  }
  // clip_global_norm sees the summed gradients: scale the bound rather than the arrays.
  try {
    last_grad_norm_ = clip_global_norm(grads, max_grad_norm_ / rescale, true, names) * rescale;
  } catch (Error& e) {
    e.add_context("Trainer::step (gradients summed, before the 1/batch_size rescaling)");
    throw;
  }
}

void Trainer::step(int64_t batch_size, bool ignore_stale_grad) {
  reduce_grads(ignore_stale_grad, false);
  update(batch_size, ignore_stale_grad);
}

}  // namespace kiln
