#include "passes/simplify_algebra.h"

#include <numeric>
#include <optional>

#include "ir/ops/elemwise.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"
#include "passes/graph_copy.h"
#include "passes/uniform_constant.h"

namespace kiln::passes {
namespace {

// transpose's permutation for an array of `ndim` axes (empty axes: reversed).
std::vector<int64_t> permutation(const OpAttrs& attrs, int ndim) {
  const IntTuple& axes = attrs.as<TransposeAttrs>().axes;
  std::vector<int64_t> p(static_cast<size_t>(ndim));
  for (int i = 0; i < ndim; ++i)
    p[static_cast<size_t>(i)] = axes.empty() ? ndim - 1 - i : (axes[static_cast<size_t>(i)] + ndim) % ndim;
  return p;
}

bool is_identity(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

class Simplifier {
 public:
  explicit Simplifier(const ir::Graph& g) : copy_(g) {}

  // A replacement for source node `id` (whose inputs are already mapped): an
  // existing entry, or a new node; nullopt to copy it unchanged.
  std::optional<ir::Entry> simplify(ir::NodeId id) {
    const ir::Node& n = copy_.source().node(id);
    if (!n.is_op() || n.num_outputs() != 1) return std::nullopt;
    const ir::Graph& dst = copy_.graph();
    std::vector<ir::Entry> in;
    for (const ir::Entry& e : n.inputs) in.push_back(copy_.map(e));
    const TensorType& out = n.types[0];
    auto same = [&](ir::Entry e) -> std::optional<ir::Entry> {
      if (dst.type(e) == out) return e;
      return std::nullopt;
    };
    auto producer = [&](ir::Entry e) -> const ir::Node& { return dst.node(e.node); };
    switch (n.op) {
      case OpId::kMulScalar:
      case OpId::kDivScalar:
      case OpId::kPowerScalar:
        if (n.attrs.as<ScalarAttrs>().scalar == 1) return same(in[0]);
        return std::nullopt;
      case OpId::kPlusScalar:
      case OpId::kMinusScalar:
        if (n.attrs.as<ScalarAttrs>().scalar == 0) return same(in[0]);
        return std::nullopt;
      case OpId::kNegative:
        if (producer(in[0]).is_op() && producer(in[0]).op == OpId::kNegative) return same(producer(in[0]).inputs[0]);
        return std::nullopt;
      case OpId::kReshape: {
        if (auto s = same(in[0])) return s;
        const ir::Node& p = producer(in[0]);
        if (!p.is_op() || p.op != OpId::kReshape) return std::nullopt;
        if (auto s = same(p.inputs[0])) return s;
        ReshapeAttrs r;
        r.shape = out.shape.to_vector();
        return add(n, OpId::kReshape, OpAttrs::make(r), {p.inputs[0]});
      }
      case OpId::kTranspose: {
        int ndim = out.shape.ndim();
        std::vector<int64_t> outer = permutation(n.attrs, ndim);
        if (is_identity(outer)) return same(in[0]);
        const ir::Node& p = producer(in[0]);
        if (!p.is_op() || p.op != OpId::kTranspose) return std::nullopt;
        std::vector<int64_t> inner = permutation(p.attrs, ndim), composed(static_cast<size_t>(ndim));
        for (size_t i = 0; i < composed.size(); ++i) composed[i] = inner[static_cast<size_t>(outer[i])];
        if (is_identity(composed)) return same(p.inputs[0]);
        TransposeAttrs t;
        t.axes = composed;
        return add(n, OpId::kTranspose, OpAttrs::make(t), {p.inputs[0]});
      }
      case OpId::kElemwiseAdd:
      case OpId::kBroadcastAdd:
      case OpId::kElemwiseMul:
      case OpId::kBroadcastMul: {
        double unit = (n.op == OpId::kElemwiseAdd || n.op == OpId::kBroadcastAdd) ? 0 : 1;
        for (int k = 0; k < 2; ++k) {
          auto c = uniform_value(dst, in[static_cast<size_t>(k)]);
          if (c && *c == unit)
            if (auto s = same(in[static_cast<size_t>(1 - k)])) return s;
        }
        return std::nullopt;
      }
      case OpId::kAddN: {
        std::vector<ir::Entry> rest;
        for (ir::Entry e : in) {
          auto c = uniform_value(dst, e);
          if (!(c && *c == 0 && dst.type(e) == out)) rest.push_back(e);
        }
        if (rest.size() == in.size() || rest.empty()) return std::nullopt;
        if (rest.size() == 1) return same(rest[0]);
        AddNAttrs a;
        a.num_args = static_cast<int>(rest.size());
        return add(n, OpId::kAddN, OpAttrs::make(a), rest);
      }
      default:
        return std::nullopt;
    }
  }

  GraphCopy& copy() { return copy_; }

 private:
  // A new node replacing `n`, under its name.
  ir::Entry add(const ir::Node& n, OpId op, OpAttrs attrs, std::vector<ir::Entry> in) {
    return copy_.graph().add_op(op, std::move(attrs), in, n.name)[0];
  }

  GraphCopy copy_;
};

}  // namespace

ir::Graph simplify_algebra(const ir::Graph& g, PassContext& ctx) {
  Simplifier s(g);
  int64_t rewritten = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    auto id = static_cast<ir::NodeId>(i);
    if (auto r = s.simplify(id)) {
      s.copy().map_entry({id, 0}, *r);
      ++rewritten;
    } else {
      s.copy().copy_node(id);
    }
  }
  PassStats& stats = ctx.current();
  stats.rewritten += rewritten;
  if (rewritten == 0) return g;
  stats.changed = true;
  return s.copy().finish();
}

}  // namespace kiln::passes
