#include "passes/amp_cast.h"

#include <map>
#include <utility>

#include "ir/amp.h"
#include "ir/ops/elemwise.h"
#include "passes/graph_copy.h"

namespace kiln::passes {
namespace {

// Whether every value of `from` is exactly representable in `to`.
bool lossless(DType from, DType to) {
  if (from == to) return true;
  if (to == DType::kFloat64) return is_floating(from);
  if (to == DType::kFloat32) return is_16bit_float(from);
  return false;
}

class Caster {
 public:
  explicit Caster(const ir::Graph& g) : copy_(g) {}

  GraphCopy& copy() { return copy_; }
  int64_t added() const { return added_; }

  // `e` (an entry of the new graph) as dtype `to`, named after `user`'s input `i`.
  ir::Entry cast(ir::Entry e, DType to, const ir::Node& user, size_t i) {
    ir::Graph& g = copy_.graph();
    const ir::Node& producer = g.node(e.node);
    if (producer.is_op() && producer.op == OpId::kCast) {
      const ir::Entry source = producer.inputs[0];
      const DType original = g.type(source).dtype;
      if (original == to && lossless(original, g.type(e).dtype)) return source;
    }
    auto key = std::make_pair(std::make_pair(e.node, e.index), to);
    auto it = casts_.find(key);
    if (it != casts_.end()) return it->second;
    ir::Entry c = g.add_op(OpId::kCast, OpAttrs::make(CastAttrs{to}), std::span<const ir::Entry>(&e, 1),
                           fmt::format("{}_amp_cast{}", user.name, i))[0];
    ++added_;
    casts_.emplace(key, c);
    return c;
  }

 private:
  GraphCopy copy_;
  std::map<std::pair<std::pair<ir::NodeId, int>, DType>, ir::Entry> casts_;
  int64_t added_ = 0;
};

}  // namespace

ir::Graph amp_cast(const ir::Graph& g, PassContext& ctx) {
  PassStats& stats = ctx.current();
  if (!ctx.options.amp) return g;
  const DType low = *ctx.options.amp;
  KILN_CHECK(is_16bit_float(low), ValueError, "amp-cast: the dtype must be float16 or bfloat16, got {}", low);
  Caster c(g);
  for (size_t i = 0; i < g.size(); ++i) {
    const auto id = static_cast<ir::NodeId>(i);
    const ir::Node& n = g.node(id);
    if (!n.is_op()) {
      c.copy().copy_node(id);
      continue;
    }
    const OpDef& def = op_def(n.op);
    ir::Graph& dst = c.copy().graph();
    std::vector<ir::Entry> in;
    std::vector<DType> have;
    for (const ir::Entry& e : n.inputs) {
      in.push_back(c.copy().map(e));
      have.push_back(dst.type(in.back()).dtype);
    }
    const std::vector<DType> want = amp_input_dtypes(def, have, low);
    if (want == have) {
      c.copy().copy_node(id);
      continue;
    }
    for (size_t k = 0; k < in.size(); ++k)
      if (want[k] != have[k]) in[k] = c.cast(in[k], want[k], n, k);
    std::vector<ir::Entry> out;
    try {
      out = dst.add_op(n.op, n.attrs, in, n.name);
    } catch (Error& e) {
      e.add_context(fmt::format("amp-cast: node '{}' under the {} policy", n.name, dtype_name(low)));
      throw;
    }
    for (size_t k = 0; k < out.size(); ++k) c.copy().map_entry({id, static_cast<int>(k)}, out[k]);
  }
  stats.added = c.added();
  stats.changed = c.added() > 0;
  return c.copy().finish();
}

}  // namespace kiln::passes
