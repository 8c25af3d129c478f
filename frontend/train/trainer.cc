#include "frontend/train/trainer.h"

#include "frontend/nd_elemwise.h"

namespace kiln {

Trainer::Trainer(nn::ParameterDict params, std::shared_ptr<optim::Optimizer> optimizer)
    : params_(std::move(params)), optimizer_(std::move(optimizer)) {
  KILN_CHECK(optimizer_ != nullptr, ValueError, "Trainer: no optimizer given");
}

void Trainer::allreduce_grads() {
  for (const auto& [name, p] : params_) {
    if (p.grad_req() == GradReq::kNull) continue;
    KILN_CHECK(p.is_initialized(), ValueError,
               "Trainer: parameter '{}' is not initialized; call initialize() and run a forward pass first", name);
    std::vector<NDArray> grads = p.list_grad();
    if (grads.size() < 2) continue;
    Device home = grads[0].device();
    NDArray sum = grads[0].copy();
    for (size_t i = 1; i < grads.size(); ++i) sum += grads[i].copy_to(home);
    for (NDArray& g : grads) g.assign(sum);
  }
}

void Trainer::update(int64_t batch_size) {
  KILN_CHECK(batch_size >= 1, ValueError, "Trainer::step: batch_size must be >= 1, got {}", batch_size);
  optimizer_->begin_step();
  double rescale = 1.0 / static_cast<double>(batch_size);
  int64_t index = 0;
  for (const auto& [name, p] : params_) {
    ++index;
    if (p.grad_req() == GradReq::kNull) continue;
    std::vector<NDArray> data = p.list_data(), grads = p.list_grad();
    for (size_t d = 0; d < data.size(); ++d) {
      // One optimizer state per parameter copy.
      optimizer_->update(index * kMaxDevicesPerKind * kNumDeviceKinds + static_cast<int64_t>(d), data[d], grads[d],
                         rescale);
    }
  }
}

void Trainer::step(int64_t batch_size) {
  allreduce_grads();
  update(batch_size);
}

}  // namespace kiln
