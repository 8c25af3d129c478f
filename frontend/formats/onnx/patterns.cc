#include "frontend/formats/onnx/patterns.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>

namespace kiln::onnx {
namespace {

class Patterns {
 public:
  Patterns(const pb::GraphProto& g, const ArrayMap& initializers) : g_(g), initializers_(initializers) {
    for (int i = 0; i < g.node_size(); ++i) {
      for (const std::string& out : g.node(i).output()) producer_[out] = i;
      for (const std::string& in : g.node(i).input()) ++readers_[in];
    }
    for (const pb::ValueInfoProto& v : g.output()) ++readers_[v.name()];
  }

  // The node producing `name` if it has `op_type` in the default domain.
  const pb::NodeProto* made_by(const std::string& name, std::string_view op_type) const {
    auto it = producer_.find(name);
    if (it == producer_.end()) return nullptr;
    const pb::NodeProto& n = g_.node(it->second);
    bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    return default_domain && n.op_type() == op_type ? &n : nullptr;
  }
  int readers(const std::string& name) const {
    auto it = readers_.find(name);
    return it == readers_.end() ? 0 : it->second;
  }
  // A scalar constant's value: an initializer of one element, or a Constant node's.
  std::optional<double> scalar(const std::string& name) const {
    if (auto it = initializers_.find(name); it != initializers_.end()) {
      if (it->second.size() != 1) return std::nullopt;
      return it->second.astype(DType::kFloat64).to_vector<double>()[0];
    }
    const pb::NodeProto* c = made_by(name, "Constant");
    if (c == nullptr) return std::nullopt;
    for (const pb::AttributeProto& a : c->attribute()) {
      if (a.name() == "value_float") return a.f();
      if (a.name() == "value" && a.has_t()) {
        try {
          NDArray v = decode_tensor(a.t(), "Constant", "");
          if (v.size() == 1) return v.astype(DType::kFloat64).to_vector<double>()[0];
        } catch (const Error&) {
        }
      }
    }
    return std::nullopt;
  }
  bool is_scalar(const std::string& name, double want) const {
    std::optional<double> v = scalar(name);
    return v && std::abs(*v - want) <= 1e-6 * std::abs(want);
  }
  // The other operand of a binary node whose operand `known` is a scalar `want`.
  std::optional<std::string> other_if_scalar(const pb::NodeProto& n, double want) const {
    if (n.input_size() != 2) return std::nullopt;
    if (is_scalar(n.input(1), want)) return n.input(0);
    if (is_scalar(n.input(0), want)) return n.input(1);
    return std::nullopt;
  }

  // The nodes of a GELU ending at `last` (a Mul), or empty.
  std::vector<int> gelu_at(const pb::NodeProto& last, std::string* x) const {
    std::optional<std::string> prod = other_if_scalar(last, 0.5);
    if (!prod || readers(*prod) != 1) return {};
    const pb::NodeProto* mul = made_by(*prod, "Mul");
    if (mul == nullptr || mul->input_size() != 2) return {};
    for (int side = 0; side < 2; ++side) {
      const std::string& cand_x = mul->input(side);
      const std::string& cand_add = mul->input(1 - side);
      const pb::NodeProto* add = made_by(cand_add, "Add");
      if (add == nullptr || readers(cand_add) != 1) continue;
      std::optional<std::string> erf_out = other_if_scalar(*add, 1.0);
      if (!erf_out || readers(*erf_out) != 1) continue;
      const pb::NodeProto* erf = made_by(*erf_out, "Erf");
      if (erf == nullptr || erf->input_size() != 1 || readers(erf->input(0)) != 1) continue;
      const pb::NodeProto* div = made_by(erf->input(0), "Div");
      if (div == nullptr || div->input_size() != 2 || div->input(0) != cand_x || !is_scalar(div->input(1), std::sqrt(2.0)))
        continue;
      *x = cand_x;
      return {index(*div), index(*erf), index(*add), index(*mul)};
    }
    return {};
  }

  int index(const pb::NodeProto& n) const { return producer_.at(n.output(0)); }

 private:
  const pb::GraphProto& g_;
  const ArrayMap& initializers_;
  std::map<std::string, int, std::less<>> producer_;
  std::map<std::string, int, std::less<>> readers_;
};

}  // namespace

std::vector<pb::NodeProto> fuse_patterns(const pb::GraphProto& g, const ArrayMap& initializers) {
  Patterns p(g, initializers);
  std::set<int> dropped;
  std::map<int, pb::NodeProto> replaced;
  for (int i = 0; i < g.node_size(); ++i) {
    const pb::NodeProto& n = g.node(i);
    if (n.op_type() != "Mul" || !(n.domain().empty() || n.domain() == "ai.onnx")) continue;
    std::string x;
    std::vector<int> parts = p.gelu_at(n, &x);
    if (parts.empty()) continue;
    pb::NodeProto gelu;
    gelu.set_op_type("Gelu");
    gelu.set_name(n.name());
    gelu.add_input(x);
    gelu.add_output(n.output(0));
    replaced[i] = gelu;
    dropped.insert(parts.begin(), parts.end());
  }
  std::vector<pb::NodeProto> out;
  for (int i = 0; i < g.node_size(); ++i) {
    if (dropped.contains(i)) continue;
    auto it = replaced.find(i);
    out.push_back(it != replaced.end() ? it->second : g.node(i));
  }
  return out;
}

}  // namespace kiln::onnx
