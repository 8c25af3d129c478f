// OpDefs of the optimizer family (formulas: ir/ops/optimizer.h; CPU kernels:
// backends/cpu/optimizer.cc).
#include "ir/ops/optimizer.h"

#include "ir/op.h"

namespace kiln {
namespace {

// Every input has the weight's shape and a float dtype; the output is the new weight.
void infer_update(const OpAttrs&, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const TensorType& w = in[0];
  KILN_CHECK(w.dtype == DType::kFloat32 || w.dtype == DType::kFloat64, TypeError,
             "weight must be float32 or float64, got {}", w.dtype);
  for (size_t i = 1; i < in.size(); ++i) {
    const char* what = i == 1 ? "grad" : "state";
    KILN_CHECK(in[i].shape == w.shape, ShapeError, "input {} ({}) has shape {} but weight has {}", i, what, in[i].shape,
               w.shape);
    KILN_CHECK(in[i].dtype == w.dtype, TypeError, "input {} ({}) is {} but weight is {}", i, what, in[i].dtype,
               w.dtype);
  }
  out.push_back(w);
}

template <typename A>
void define_update(OpRegistry& r, OpId id, std::string_view doc, std::vector<std::string_view> inputs) {
  OpDef& d = r.define(id, doc);
  d.num_inputs = static_cast<int>(inputs.size());
  d.input_names = std::move(inputs);
  d.infer = infer_update;
  d.parse_attrs = parse_attrs_as<A>;
  for (int i = 2; i < d.num_inputs; ++i) d.mutate_inputs.push_back(i);
  d.inplace = {{0, 0}};
  d.differentiable = false;
}

}  // namespace

void register_optimizer_ops(OpRegistry& r) {
  define_update<SgdAttrs>(r, OpId::kSgdUpdate, "SGD step: (1 - lr*wd) * weight - lr * clip(rescale_grad * grad).",
                          {"weight", "grad"});
  define_update<SgdMomAttrs>(r, OpId::kSgdMomUpdate, "SGD with momentum; updates mom in place.",
                             {"weight", "grad", "mom"});
  define_update<NagMomAttrs>(r, OpId::kNagMomUpdate, "Nesterov momentum SGD (MXNet's form); updates mom in place.",
                             {"weight", "grad", "mom"});
  define_update<AdamAttrs>(r, OpId::kAdamUpdate, "Adam step without bias correction; updates mean and var in place.",
                           {"weight", "grad", "mean", "var"});
  define_update<AdamWAttrs>(r, OpId::kAdamwUpdate,
                            "Adam step with decoupled weight decay, no bias correction; updates mean and var in place.",
                            {"weight", "grad", "mean", "var"});
}

}  // namespace kiln
