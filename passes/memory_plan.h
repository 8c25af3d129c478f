// Memory planning: where each intermediate value of a graph lives in one
// arena, by liveness over the graph's (topological) node order.
//
//   passes::MemoryPlan plan = passes::make_memory_plan(g);
//   int64_t at = plan.offset[node][output];   // byte offset in the arena, or -1
//   fmt::print("{} of {} bytes\n", plan.arena_bytes, plan.naive_bytes);
//
// Rules:
//   - External entries get offset -1 and no arena space: outputs of input,
//     param, aux and const nodes (owned by the caller) and graph outputs
//     (returned to the caller, so they never alias anything).
//   - Every other entry (an intermediate) is live from the op that writes it
//     to its last reader in node order (to its writer if nothing reads it).
//     Its storage is freed after its last reader runs, and a later entry may
//     reuse any freed block that is large enough (best fit; the rest of the
//     block stays free, adjacent free blocks merge).
//   - An op's outputs never share storage with its own inputs, except through
//     in-place: when inplace_pairs(node) lists (output i, input j), input j is an
//     intermediate whose last reader is this op, output
//     i takes over input j's block (counted in `inplace_reuses`). Both must
//     have the same number of elements of the same width.
//   - Sizes are rounded up to kAlignment bytes, and every offset is a
//     multiple of it.
// Two entries that are live at the same time never overlap, except an
// in-place output and the input it overwrites at the op that pairs them.
//
// Values handed over by the caller (PlanOptions): an input node may be given
// a fixed place in a region [0, reserved_bytes) at the bottom of the arena
// that the caller fills before the run. Such a value is then treated like an
// intermediate: freed after its last reader (its block reused by later
// values, in-place included), except that the planner never places a value
// across the region's end, so the caller may back the region and the rest
// of the arena ([reserved_bytes, arena_bytes)) with separate buffers.
//
// The planner reads only the graph; it does not change it. The pipeline pass
// "plan-memory" stores the plan in PassContext::memory_plan and the byte
// counts in its PassStats.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

class PassContext;

struct MemoryPlan {
  static constexpr int64_t kAlignment = 64;
  // Per node, per output: byte offset in the arena, or -1 for external entries.
  std::vector<std::vector<int64_t>> offset;
  // Per node, per output: bytes reserved (the aligned size), 0 for external entries.
  std::vector<std::vector<int64_t>> bytes;
  int64_t arena_bytes = 0;     // the planned peak: size of the arena
  int64_t naive_bytes = 0;     // one buffer per intermediate, no reuse
  int64_t inplace_reuses = 0;  // outputs written into their input's block

  // "arena 1.2 MiB, naive 3.4 MiB (35%), 2 in-place"
  std::string summary() const;
};

// The (output, input) pairs whose storage `node` may share: OpDef::inplace,
// and for _kiln_fused_elemwise every output with every full input (the CPU
// kernel reads a position's inputs before it writes that position's
// outputs: backends/cpu/fused.h).
std::vector<std::pair<int, int>> inplace_pairs(const ir::Node& node);

// Bytes of one array of `type`, rounded up to MemoryPlan::kAlignment.
int64_t aligned_bytes(const TensorType& type);

struct PlanOptions {
  // Input nodes placed by the caller: node, byte offset (a multiple of
  // kAlignment; the value's aligned bytes must end within reserved_bytes;
  // placed values must not overlap).
  std::vector<std::pair<ir::NodeId, int64_t>> placed_inputs;
  int64_t reserved_bytes = 0;  // a multiple of kAlignment
};

// Plans `g` as described above. Throws ValueError for a placed node that is
// not an input node, or a place outside the reserved region.
MemoryPlan make_memory_plan(const ir::Graph& g, const PlanOptions& options = {});

// The pipeline pass "plan-memory": returns `g` unchanged, sets
// ctx.memory_plan and the arena/naive/in-place counters of its statistics.
ir::Graph plan_memory(const ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
