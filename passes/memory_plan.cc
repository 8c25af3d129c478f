#include "passes/memory_plan.h"

#include <algorithm>
#include <map>

#include "ir/error.h"
#include "ir/ops/fused.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// Free space of the arena: disjoint blocks keyed by offset, merged when adjacent.
class FreeList {
 public:
  // Blocks never merge across `barrier`, and the arena grows above it.
  explicit FreeList(int64_t barrier = 0) : barrier_(barrier) {}

  // Best fit among the free blocks; else grows the arena (from a free block
  // that ends at the top, if there is one).
  int64_t allocate(int64_t size, int64_t& arena) {
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (it->second >= size && (best == blocks_.end() || it->second < best->second)) best = it;
    if (best != blocks_.end()) {
      int64_t at = best->first, left = best->second - size;
      blocks_.erase(best);
      if (left > 0) blocks_.emplace(at + size, left);
      return at;
    }
    if (!blocks_.empty()) {
      auto last = std::prev(blocks_.end());
      if (last->first + last->second == arena && last->first >= barrier_) {
        int64_t at = last->first;
        blocks_.erase(last);
        arena = at + size;
        return at;
      }
    }
    int64_t at = arena;
    arena += size;
    return at;
  }

  void release(int64_t at, int64_t size) {
    if (size == 0) return;
    auto next = blocks_.lower_bound(at);
    if (next != blocks_.end() && next->first == at + size && next->first != barrier_) {
      size += next->second;
      next = blocks_.erase(next);
    }
    if (next != blocks_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == at && at != barrier_) {
        prev->second += size;
        return;
      }
    }
    blocks_.emplace(at, size);
  }

 private:
  int64_t barrier_;
  std::map<int64_t, int64_t> blocks_;
};

std::string bytes_text(int64_t b) {
  if (b >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= (int64_t{1} << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1 << 10));
  return fmt::format("{} B", b);
}

}  // namespace

std::string MemoryPlan::summary() const {
  double pct = naive_bytes > 0 ? 100.0 * static_cast<double>(arena_bytes) / static_cast<double>(naive_bytes) : 100;
  return fmt::format("arena {}, naive {} ({:.0f}%), {} in-place", bytes_text(arena_bytes), bytes_text(naive_bytes), pct,
                     inplace_reuses);
}

std::vector<std::pair<int, int>> inplace_pairs(const ir::Node& node) {
  if (!node.is_op()) return {};
  if (node.op != OpId::kFusedElemwise) return op_def(node.op).inplace;
  const FusedProgram& p = node.attrs.as<FusedElemwiseAttrs>().program.program();
  std::vector<std::pair<int, int>> pairs;
  for (size_t o = 0; o < p.outputs.size(); ++o)
    for (size_t j = 0; j < p.inputs.size(); ++j)
      if (p.inputs[j] == FusedInputKind::kFull) pairs.emplace_back(static_cast<int>(o), static_cast<int>(j));
  return pairs;
}

int64_t aligned_bytes(const TensorType& type) {
  int64_t raw = type.shape.size() * static_cast<int64_t>(dtype_size(type.dtype));
  return (raw + MemoryPlan::kAlignment - 1) / MemoryPlan::kAlignment * MemoryPlan::kAlignment;
}

MemoryPlan make_memory_plan(const ir::Graph& g, const PlanOptions& options) {
  const size_t n = g.size();
  MemoryPlan plan;
  KILN_CHECK(options.reserved_bytes >= 0 && options.reserved_bytes % MemoryPlan::kAlignment == 0, ValueError,
             "plan-memory: reserved region of {} bytes is not a multiple of {}", options.reserved_bytes,
             MemoryPlan::kAlignment);
  plan.offset.resize(n);
  plan.bytes.resize(n);
  // last_use[node][k]: the last node reading the entry (its writer if none);
  // external entries are marked by offset -1 from the start.
  std::vector<std::vector<ir::NodeId>> last_use(n);
  for (size_t i = 0; i < n; ++i) {
    const ir::Node& node = g.node(static_cast<ir::NodeId>(i));
    bool external = !node.is_op();
    plan.offset[i].assign(static_cast<size_t>(node.num_outputs()), external ? -1 : 0);
    plan.bytes[i].assign(static_cast<size_t>(node.num_outputs()), 0);
    last_use[i].assign(static_cast<size_t>(node.num_outputs()), static_cast<ir::NodeId>(i));
    if (!node.is_op()) continue;
    for (const ir::Entry& e : node.inputs)
      last_use[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)] = static_cast<ir::NodeId>(i);
  }
  for (const ir::Entry& e : g.outputs()) plan.offset[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)] = -1;
  for (const auto& placed : options.placed_inputs) {
    const ir::NodeId id = placed.first;  // not a structured binding: the lambda below captures it (clang 14)
    const int64_t at = placed.second;
    KILN_CHECK(id >= 0 && static_cast<size_t>(id) < n && g.node(id).kind == ir::NodeKind::kInput, ValueError,
               "plan-memory: placed node {} is not an input node", id);
    const ir::Node& node = g.node(id);
    int64_t size = aligned_bytes(node.types[0]);
    KILN_CHECK(at >= 0 && at % MemoryPlan::kAlignment == 0 && at + size <= options.reserved_bytes, ValueError,
               "plan-memory: input '{}' ({} bytes) placed at byte {}, outside the reserved {} bytes or unaligned",
               node.name, size, at, options.reserved_bytes);
    bool is_output = std::any_of(g.outputs().begin(), g.outputs().end(), [&](const ir::Entry& e) { return e.node == id; });
    KILN_CHECK(!is_output, ValueError, "plan-memory: placed input '{}' is a graph output", node.name);
    plan.offset[static_cast<size_t>(id)][0] = at;
    plan.bytes[static_cast<size_t>(id)][0] = size;
  }
  plan.arena_bytes = options.reserved_bytes;

  FreeList free(options.reserved_bytes);
  // Entries whose block was handed to an in-place output: not freed again.
  std::vector<std::vector<bool>> handed_over(n);
  for (size_t i = 0; i < n; ++i) handed_over[i].assign(plan.offset[i].size(), false);

  for (size_t i = 0; i < n; ++i) {
    const ir::Node& node = g.node(static_cast<ir::NodeId>(i));
    if (!node.is_op()) continue;
    const std::vector<std::pair<int, int>> inplace = inplace_pairs(node);
    for (int k = 0; k < node.num_outputs(); ++k) {
      auto ku = static_cast<size_t>(k);
      if (plan.offset[i][ku] < 0) continue;  // a graph output
      int64_t size = aligned_bytes(node.types[ku]);
      plan.naive_bytes += size;
      bool placed = false;
      for (auto [out, in] : inplace) {
        if (out != k || in >= static_cast<int>(node.inputs.size())) continue;
        ir::Entry src = node.inputs[static_cast<size_t>(in)];
        auto sn = static_cast<size_t>(src.node), si = static_cast<size_t>(src.index);
        // Only the same number of equally wide elements: a kernel may then
        // write element k after reading it, and not before.
        const TensorType& st = g.type(src);
        if (plan.offset[sn][si] < 0 || handed_over[sn][si] || last_use[sn][si] != static_cast<ir::NodeId>(i) ||
            st.shape.size() != node.types[ku].shape.size() || dtype_size(st.dtype) != dtype_size(node.types[ku].dtype))
          continue;
        plan.offset[i][ku] = plan.offset[sn][si];
        plan.bytes[i][ku] = plan.bytes[sn][si];
        handed_over[sn][si] = true;
        ++plan.inplace_reuses;
        placed = true;
        break;
      }
      if (!placed) {
        plan.offset[i][ku] = free.allocate(size, plan.arena_bytes);
        plan.bytes[i][ku] = size;
      }
    }
    // Inputs read for the last time here, then outputs nobody reads.
    for (const ir::Entry& e : node.inputs) {
      auto sn = static_cast<size_t>(e.node), si = static_cast<size_t>(e.index);
      if (plan.offset[sn][si] < 0 || handed_over[sn][si] || last_use[sn][si] != static_cast<ir::NodeId>(i)) continue;
      free.release(plan.offset[sn][si], plan.bytes[sn][si]);
      handed_over[sn][si] = true;  // released: a repeated input must not release twice
    }
    for (size_t k = 0; k < plan.offset[i].size(); ++k) {
      if (plan.offset[i][k] < 0 || last_use[i][k] != static_cast<ir::NodeId>(i)) continue;
      free.release(plan.offset[i][k], plan.bytes[i][k]);
      handed_over[i][k] = true;
    }
  }
  return plan;
}

ir::Graph plan_memory(const ir::Graph& g, PassContext& ctx) {
  MemoryPlan plan = make_memory_plan(g);
  PassStats& stats = ctx.current();
  stats.arena_bytes = plan.arena_bytes;
  stats.naive_bytes = plan.naive_bytes;
  stats.inplace_reuses = plan.inplace_reuses;
  ctx.memory_plan = std::move(plan);
  return g;
}

}  // namespace kiln::passes
