#include "frontend/nd_optimizer.h"

#include "frontend/invoke.h"

namespace kiln::nd {
namespace {

// The handles share storage with the caller's: the kernel writes through them.
void update_in_place(OpId op, std::initializer_list<NDArray> inputs, const OpAttrs& attrs) {
  NDArray weight = *inputs.begin();
  invoke(op, inputs, attrs, {.out = {&weight, 1}});
}

}  // namespace

void sgd_update(const NDArray& weight, const NDArray& grad, const SgdAttrs& options) {
  update_in_place(OpId::kSgdUpdate, {weight, grad}, OpAttrs::make(options));
}

void sgd_mom_update(const NDArray& weight, const NDArray& grad, const NDArray& mom, const SgdMomAttrs& options) {
  update_in_place(OpId::kSgdMomUpdate, {weight, grad, mom}, OpAttrs::make(options));
}

void nag_mom_update(const NDArray& weight, const NDArray& grad, const NDArray& mom, const NagMomAttrs& options) {
  update_in_place(OpId::kNagMomUpdate, {weight, grad, mom}, OpAttrs::make(options));
}

void adam_update(const NDArray& weight, const NDArray& grad, const NDArray& mean, const NDArray& var,
                 const AdamAttrs& options) {
  update_in_place(OpId::kAdamUpdate, {weight, grad, mean, var}, OpAttrs::make(options));
}

void adamw_update(const NDArray& weight, const NDArray& grad, const NDArray& mean, const NDArray& var,
                  const AdamWAttrs& options) {
  update_in_place(OpId::kAdamwUpdate, {weight, grad, mean, var}, OpAttrs::make(options));
}

}  // namespace kiln::nd
