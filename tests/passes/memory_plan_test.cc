// plan-memory: hand-made graphs with known plans, and a property test over
// random graphs: no two entries live at the same time share bytes (except an
// in-place output and the input it overwrites).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "passes/memory_plan.h"
#include "passes/pass.h"
#include "tests/passes/random_graph.h"

namespace kiln::passes {
namespace {

int64_t at(const MemoryPlan& p, const ir::Graph& g, std::string_view name, int k = 0) {
  return p.offset[static_cast<size_t>(*g.find(name))][static_cast<size_t>(k)];
}

TEST(MemoryPlan, ReusesFreedBlocks) {
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[4,4]
  %a = transpose(%x) : f32[4,4]
  %b = transpose(%a) : f32[4,4]
  %c = transpose(%b) : f32[4,4]
  %d = transpose(%c) : f32[4,4]
  %e = transpose(%d) : f32[4,4]
  return %e
})IR");
  MemoryPlan p = make_memory_plan(g);
  EXPECT_EQ(at(p, g, "x"), -1);
  EXPECT_EQ(at(p, g, "a"), 0);
  EXPECT_EQ(at(p, g, "b"), 64);
  EXPECT_EQ(at(p, g, "c"), 0);
  EXPECT_EQ(at(p, g, "d"), 64);
  EXPECT_EQ(at(p, g, "e"), -1);
  EXPECT_EQ(p.arena_bytes, 128);
  EXPECT_EQ(p.naive_bytes, 256);
  EXPECT_EQ(p.inplace_reuses, 0);
}

TEST(MemoryPlan, InPlaceOnlyAfterTheLastOtherReader) {
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[4,4]
  %a = transpose(%x) : f32[4,4]
  %b = exp(%a) : f32[4,4]
  %c = elemwise_mul(%b, %a) : f32[4,4]
  %d = tanh(%c) : f32[4,4]
  %e = transpose(%d) : f32[4,4]
  return %e
})IR");
  MemoryPlan p = make_memory_plan(g);
  EXPECT_EQ(at(p, g, "a"), 0);
  EXPECT_EQ(at(p, g, "b"), 64) << "a is read again by c, so exp cannot overwrite it";
  EXPECT_EQ(at(p, g, "c"), 64) << "c overwrites b, read last by c";
  EXPECT_EQ(at(p, g, "d"), 64) << "d overwrites c";
  EXPECT_EQ(p.inplace_reuses, 2);
  EXPECT_EQ(p.arena_bytes, 128);
  EXPECT_EQ(p.naive_bytes, 256);
}

TEST(MemoryPlan, OutputsAndInputsAreExternalAndNeverOverwritten) {
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[4,4]
  %a = exp(%x) : f32[4,4]
  %b = tanh(%a) : f32[4,4]
  %c = negative(%b) : f32[4,4]
  return %b, %c
})IR");
  MemoryPlan p = make_memory_plan(g);
  EXPECT_EQ(at(p, g, "a"), 0) << "exp may not overwrite the caller's x";
  EXPECT_EQ(at(p, g, "b"), -1);
  EXPECT_EQ(at(p, g, "c"), -1);
  EXPECT_EQ(p.inplace_reuses, 0);
  EXPECT_EQ(p.arena_bytes, 64);
}

TEST(MemoryPlan, BestFitPicksTheSmallestFreeBlock) {
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[8,8]
  %a = transpose(%x) : f32[8,8]
  %s = sum(%x) {axis="(1,)"} : f32[8]
  %g = transpose(%x) : f32[8,8]
  %t = sum(%x) {axis="(1,)"} : f32[8]
  %o1 = broadcast_add(%a, %t) : f32[8,8]
  %v = sum(%g) {axis="(1,)"} : f32[8]
  %o2 = broadcast_mul(%g, %s) : f32[8,8]
  %o3 = elemwise_add(%v, %s) : f32[8]
  return %o1, %o2, %o3
})IR");
  MemoryPlan p = make_memory_plan(g);
  EXPECT_EQ(at(p, g, "a"), 0);
  EXPECT_EQ(at(p, g, "s"), 256);
  EXPECT_EQ(at(p, g, "g"), 320);
  EXPECT_EQ(at(p, g, "t"), 576);
  EXPECT_EQ(at(p, g, "v"), 576) << "the 64-byte hole, not the 256-byte one";
  EXPECT_EQ(p.arena_bytes, 640);
  EXPECT_EQ(p.naive_bytes, 704);
}

TEST(MemoryPlan, UnreadOutputsStillGetStorage) {
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[2,32]
  %p = SliceChannel(%x) {num_outputs="2"} : f32[2,16], f32[2,16]
  %y = transpose(%p#1) : f32[16,2]
  return %y
})IR");
  MemoryPlan p = make_memory_plan(g);
  EXPECT_NE(at(p, g, "p", 0), at(p, g, "p", 1));
  EXPECT_EQ(p.arena_bytes, 256);
}

TEST(MemoryPlan, PipelinePassRecordsBytesAndKeepsTheGraph) {
  ir::Graph g = testing::random_graph(3);
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pass("plan-memory", g, ctx);
  EXPECT_EQ(out.to_text(), g.to_text());
  ASSERT_TRUE(ctx.memory_plan.has_value());
  EXPECT_FALSE(ctx.stats.back().changed);
  EXPECT_EQ(ctx.stats.back().arena_bytes, ctx.memory_plan->arena_bytes);
  EXPECT_EQ(ctx.stats.back().naive_bytes, ctx.memory_plan->naive_bytes);
  EXPECT_LE(ctx.memory_plan->arena_bytes, ctx.memory_plan->naive_bytes);
  EXPECT_NE(ctx.memory_plan->summary().find("naive"), std::string::npos);
}

// The live range [writer, last reader] of each arena entry.
struct Live {
  ir::Entry e;
  ir::NodeId from, to;
  int64_t offset, bytes;
};

bool is_inplace_pair(const ir::Graph& g, const Live& src, const Live& dst) {
  if (dst.from != src.to) return false;
  const ir::Node& n = g.node(dst.from);
  for (auto [out, in] : inplace_pairs(n))
    if (out == dst.e.index && in < static_cast<int>(n.inputs.size()) && n.inputs[static_cast<size_t>(in)] == src.e)
      return true;
  return false;
}

// `reserved`: the caller's region at the bottom of the arena; placed inputs
// (offset >= 0) live in it, and no entry may cross its end.
void check_no_overlap(const ir::Graph& g, const MemoryPlan& p, const std::string& what, int64_t reserved = 0) {
  std::vector<Live> live;
  std::vector<bool> is_output_node(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const ir::Node& n = g.node(static_cast<ir::NodeId>(i));
    ASSERT_EQ(p.offset[i].size(), static_cast<size_t>(n.num_outputs())) << what;
    for (int k = 0; k < n.num_outputs(); ++k) {
      int64_t off = p.offset[i][static_cast<size_t>(k)];
      bool is_out = std::find(g.outputs().begin(), g.outputs().end(), ir::Entry{static_cast<ir::NodeId>(i), k}) !=
                    g.outputs().end();
      bool placed = n.kind == ir::NodeKind::kInput && off >= 0;
      if ((!n.is_op() && !placed) || is_out) {
        EXPECT_EQ(off, -1) << what << ": external entry " << n.name << "#" << k;
        continue;
      }
      ASSERT_GE(off, 0) << what;
      EXPECT_EQ(off % MemoryPlan::kAlignment, 0) << what;
      int64_t bytes = p.bytes[i][static_cast<size_t>(k)];
      EXPECT_GE(bytes, aligned_bytes(n.types[static_cast<size_t>(k)])) << what;
      EXPECT_LE(off + bytes, p.arena_bytes) << what;
      EXPECT_EQ(off < reserved, off + aligned_bytes(n.types[static_cast<size_t>(k)]) <= reserved)
          << what << ": " << n.name << "#" << k << " at " << off << " crosses the reserved region's end " << reserved;
      live.push_back({{static_cast<ir::NodeId>(i), k},
                      static_cast<ir::NodeId>(i),
                      static_cast<ir::NodeId>(i),
                      off,
                      aligned_bytes(n.types[static_cast<size_t>(k)])});
    }
  }
  for (Live& l : live) {
    for (size_t j = 0; j < g.size(); ++j) {
      const ir::Node& n = g.node(static_cast<ir::NodeId>(j));
      if (n.is_op() && std::find(n.inputs.begin(), n.inputs.end(), l.e) != n.inputs.end())
        l.to = std::max(l.to, static_cast<ir::NodeId>(j));
    }
  }
  for (size_t a = 0; a < live.size(); ++a) {
    for (size_t b = a + 1; b < live.size(); ++b) {
      const Live& x = live[a];
      const Live& y = live[b];
      if (x.bytes == 0 || y.bytes == 0) continue;
      bool same_time = x.from <= y.to && y.from <= x.to;
      bool same_bytes = x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
      if (!same_time || !same_bytes) continue;
      if (is_inplace_pair(g, x, y) || is_inplace_pair(g, y, x)) continue;
      ADD_FAILURE() << what << ": " << g.node(x.e.node).name << "#" << x.e.index << " [" << x.from << ", " << x.to
                    << "] at " << x.offset << " and " << g.node(y.e.node).name << "#" << y.e.index << " [" << y.from
                    << ", " << y.to << "] at " << y.offset << " overlap";
    }
  }
}

TEST(MemoryPlan, LiveEntriesNeverOverlapOnRandomGraphs) {
  int64_t arena = 0, naive = 0, inplace = 0, multi_output = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    ir::Graph g = testing::random_graph(seed, 40);
    for (const ir::Node& n : g.nodes()) multi_output += n.num_outputs() > 1 ? 1 : 0;
    MemoryPlan p = make_memory_plan(g);
    check_no_overlap(g, p, fmt::format("seed {}", seed));
    EXPECT_LE(p.arena_bytes, p.naive_bytes) << "seed " << seed;
    arena += p.arena_bytes;
    naive += p.naive_bytes;
    inplace += p.inplace_reuses;
  }
  EXPECT_LT(arena, naive) << "planning should save memory on random graphs";
  EXPECT_GT(inplace, 0);
  EXPECT_GT(multi_output, 10) << "the random graphs should hold multi-output nodes";
}

TEST(MemoryPlan, FusedNodeWritesOverAFullInputItReadsLast) {
  // Before: with no in-place pairs the fused node needs a second block.
  // After (passes::inplace_pairs): it takes a's block, not s's (a scalar).
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[4,4]
  %s = input f32[1]
  %a = transpose(%x) : f32[4,4]
  %t = transpose(%x) : f32[4,4]
  %b = _kiln_fused_elemwise(%a, %s, %t) {program="in=f,s,f;%3=mul(%0,%1);%4=add(%3,%2);%5=relu(%4);out=%5,%3"} : f32[4,4], f32[4,4]
  %c = elemwise_add(%b#0, %t) : f32[4,4]
  %d = transpose(%c) : f32[4,4]
  %e = elemwise_add(%d, %b#1) : f32[4,4]
  return %e
})IR");
  const ir::Node& fused = g.node(*g.find("b"));
  EXPECT_EQ(inplace_pairs(fused), (std::vector<std::pair<int, int>>{{0, 0}, {0, 2}, {1, 0}, {1, 2}}));
  MemoryPlan p = make_memory_plan(g);
  EXPECT_EQ(at(p, g, "b", 0), at(p, g, "a")) << "a dies at the fused node; t is read again by c";
  EXPECT_NE(at(p, g, "b", 1), at(p, g, "t"));
  EXPECT_EQ(p.inplace_reuses, 2) << "b#0 over a, and c over b#0 or t";
  check_no_overlap(g, p, "fused");
}

TEST(MemoryPlan, PlacedInputsAreFreedAfterTheirLastReaderAndReused) {
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[4,4]
  %a = transpose(%x) : f32[4,4]
  %b = transpose(%a) : f32[4,4]
  %c = transpose(%b) : f32[4,4]
  %d = transpose(%c) : f32[4,4]
  return %d
})IR");
  MemoryPlan p = make_memory_plan(g, {.placed_inputs = {{*g.find("x"), 0}}, .reserved_bytes = 64});
  EXPECT_EQ(at(p, g, "x"), 0);
  EXPECT_EQ(at(p, g, "a"), 64) << "x is live while a is written";
  EXPECT_EQ(at(p, g, "b"), 0) << "b reuses x's block after its last reader";
  EXPECT_EQ(at(p, g, "c"), 64);
  EXPECT_EQ(p.arena_bytes, 128) << "the reserved 64 bytes, then one more block";
  check_no_overlap(g, p, "placed", 64);
}

TEST(MemoryPlan, InPlaceOverAPlacedInput) {
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[4,4]
  %a = exp(%x) : f32[4,4]
  %b = transpose(%a) : f32[4,4]
  return %b
})IR");
  MemoryPlan p = make_memory_plan(g, {.placed_inputs = {{*g.find("x"), 0}}, .reserved_bytes = 64});
  EXPECT_EQ(at(p, g, "a"), 0) << "exp overwrites x, read last by exp";
  EXPECT_EQ(p.inplace_reuses, 1);
  EXPECT_EQ(p.arena_bytes, 64);
}

TEST(MemoryPlan, NoValueCrossesTheReservedRegionsEnd) {
  // When q (128 bytes) is placed, x's block [0, 64) and a's [64, 128) are
  // both free: merged, they would fit q across the region's end.
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[8]
  %w = input f32[8,4]
  %a = transpose(%x) : f32[8]
  %n = transpose(%w) : f32[4,8]
  %p = broadcast_add(%n, %a) : f32[4,8]
  %q = transpose(%p) : f32[8,4]
  %r = transpose(%q) : f32[4,8]
  return %r
})IR");
  MemoryPlan p = make_memory_plan(g, {.placed_inputs = {{*g.find("x"), 0}}, .reserved_bytes = 64});
  EXPECT_EQ(at(p, g, "a"), 64);
  EXPECT_GE(at(p, g, "q"), 64);
  check_no_overlap(g, p, "barrier", 64);
}

TEST(MemoryPlan, PlacedValuesMustBeInputsInsideTheReservedRegion) {
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[4,4]
  %a = exp(%x) : f32[4,4]
  %b = transpose(%a) : f32[4,4]
  return %b
})IR");
  EXPECT_THROW(make_memory_plan(g, {.placed_inputs = {{*g.find("a"), 0}}, .reserved_bytes = 64}), ValueError);
  EXPECT_THROW(make_memory_plan(g, {.placed_inputs = {{*g.find("x"), 64}}, .reserved_bytes = 64}), ValueError);
  EXPECT_THROW(make_memory_plan(g, {.placed_inputs = {{*g.find("x"), 0}}, .reserved_bytes = 32}), ValueError);
}

TEST(MemoryPlan, LiveEntriesNeverOverlapWithPlacedInputsOnRandomGraphs) {
  int64_t reused = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    ir::Graph g = testing::random_graph(seed, 40);
    PlanOptions options;
    for (size_t i = 0; i < g.size(); i += 1) {
      const auto id = static_cast<ir::NodeId>(i);
      const ir::Node& n = g.node(id);
      if (n.kind != ir::NodeKind::kInput || (i + seed) % 3 == 0) continue;
      bool is_out = std::any_of(g.outputs().begin(), g.outputs().end(), [&](const ir::Entry& e) { return e.node == id; });
      if (is_out) continue;
      options.placed_inputs.emplace_back(id, options.reserved_bytes);
      options.reserved_bytes += aligned_bytes(n.types[0]);
    }
    MemoryPlan p = make_memory_plan(g, options);
    check_no_overlap(g, p, fmt::format("seed {}", seed), options.reserved_bytes);
    for (size_t i = 0; i < g.size(); ++i)
      for (int64_t off : p.offset[i]) reused += g.node(static_cast<ir::NodeId>(i)).is_op() && off >= 0 && off < options.reserved_bytes;
  }
  EXPECT_GT(reused, 0) << "intermediates should reuse the storage of placed inputs";
}

TEST(MemoryPlan, TheOverlapCheckCanFail) {
  // A deliberately broken plan: everything at offset 0.
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[4,4]
  %a = transpose(%x) : f32[4,4]
  %b = transpose(%a) : f32[4,4]
  %c = elemwise_add(%a, %b) : f32[4,4]
  return %c
})IR");
  MemoryPlan p = make_memory_plan(g);
  p.offset[static_cast<size_t>(*g.find("b"))][0] = at(p, g, "a");
  EXPECT_NONFATAL_FAILURE(check_no_overlap(g, p, "broken"), "overlap");
}

}  // namespace
}  // namespace kiln::passes
