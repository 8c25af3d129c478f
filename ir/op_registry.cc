#include <array>
#include <mutex>
#include <string>
#include <unordered_map>

#include "ir/op.h"

namespace kiln {

// One function per family, each in ir/ops/<family>.cc.
void register_init_ops(OpRegistry& r);
void register_elemwise_ops(OpRegistry& r);
void register_reduce_ops(OpRegistry& r);
void register_linalg_ops(OpRegistry& r);
void register_matrix_ops(OpRegistry& r);
void register_conv_ops(OpRegistry& r);
void register_elemwise_grads(OpRegistry& r);
void register_conv_grads(OpRegistry& r);  // ir/ops/conv_grad.cc: gradients of the backward ops
void register_nn_grads(OpRegistry& r);    // ir/ops/nn_grad.cc
void register_nn_ops(OpRegistry& r);
void register_optimizer_ops(OpRegistry& r);
void register_fused_layer_ops(OpRegistry& r);
void register_fused_ops(OpRegistry& r);
void register_amp_policies(OpRegistry& r);  // ir/ops/amp_policy.cc: after every op is defined
void register_layer_norm_ops(OpRegistry& r);
void register_attention_ops(OpRegistry& r);

namespace {

constexpr std::array<std::string_view, kNumOps> kNames = {
#define KILN_OP(id, name) name,
#include "ir/op_list.def"
#undef KILN_OP
};

struct Registry {
  std::array<OpDef, kNumOps> defs;
  std::array<bool, kNumOps> defined{};
  std::unordered_map<std::string, OpId> by_name;
};


Registry& registry();

}  // namespace

OpDef& OpRegistry::define(OpId id, std::string_view doc) {
  auto& r = registry();
  auto i = static_cast<size_t>(id);
  KILN_ASSERT(!r.defined[i]);
  r.defined[i] = true;
  OpDef& d = r.defs[i];
  d.id = id;
  d.name = kNames[i];
  d.doc = doc;
  return d;
}

OpDef& OpRegistry::defined(OpId id) {
  auto& r = registry();
  KILN_ASSERT(r.defined[static_cast<size_t>(id)]);
  return r.defs[static_cast<size_t>(id)];
}

void OpRegistry::alias(std::string_view alias, OpId id) { registry().by_name.emplace(std::string(alias), id); }

namespace {

Registry& registry_storage() {
  static Registry r;
  return r;
}

Registry& registry() { return registry_storage(); }

const Registry& built_registry() {
  static const bool built = [] {
    auto& r = registry_storage();
    OpRegistry builder;
    register_init_ops(builder);
    register_elemwise_ops(builder);
    register_reduce_ops(builder);
    register_linalg_ops(builder);
    register_matrix_ops(builder);
    register_conv_ops(builder);
    register_nn_ops(builder);
    register_optimizer_ops(builder);
    register_fused_layer_ops(builder);
    register_fused_ops(builder);
    register_layer_norm_ops(builder);
    register_attention_ops(builder);
    register_elemwise_grads(builder);
    register_conv_grads(builder);
    register_nn_grads(builder);
    register_amp_policies(builder);
    // Ops listed but not yet defined keep their name and id; tests/ir/op_registry_test.cc
    // checks that every op has inference and a CPU kernel.
    for (int i = 0; i < kNumOps; ++i) {
      r.defs[i].id = static_cast<OpId>(i);
      r.defs[i].name = kNames[i];
      r.by_name.emplace(std::string(kNames[i]), static_cast<OpId>(i));
    }
    return true;
  }();
  (void)built;
  return registry_storage();
}

}  // namespace

const OpDef& op_def(OpId id) {
  auto i = static_cast<size_t>(id);
  KILN_ASSERT(i < static_cast<size_t>(kNumOps));
  return built_registry().defs[i];
}

const OpDef* find_op(std::string_view name) {
  const auto& r = built_registry();
  auto it = r.by_name.find(std::string(name));
  return it == r.by_name.end() ? nullptr : &r.defs[static_cast<size_t>(it->second)];
}

std::span<const OpDef> all_ops() { return built_registry().defs; }

void infer_types(const OpDef& def, const OpAttrs& attrs, std::span<const TensorType> in,
                 std::vector<TensorType>& out) {
  out.clear();
  if (def.num_inputs >= 0 && static_cast<int>(in.size()) != def.num_inputs) {
    throw ValueError(fmt::format("{}: expected {} input(s), got {}", def.name, def.num_inputs, in.size()));
  }
  try {
    def.infer(attrs, in, out);
  } catch (Error& e) {
    std::string sig = std::string(def.name) + "(";
    for (size_t i = 0; i < in.size(); ++i) {
      if (i) sig += ", ";
      sig += fmt::format("{}{}", dtype_short_name(in[i].dtype), in[i].shape);
    }
    e.add_context(sig + ")");
    throw;
  }
}

}  // namespace kiln
