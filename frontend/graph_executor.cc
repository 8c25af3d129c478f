#include "frontend/graph_executor.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>

#include "frontend/graph_eval.h"
#include "frontend/static_values.h"
#include "ir/error.h"
#include "ir/ops/nn.h"
#include "passes/memory_plan.h"
#include "passes/op_effects.h"
#include "runtime/device_backend.h"
#include "runtime/engine_impl.h"
#include "runtime/graph_capture.h"
#include "runtime/kernel.h"
#include "runtime/profiler.h"

namespace kiln {

// A segment's device graph (runtime/graph_capture.h): what it binds per call,
// what it assumes stays put, and the graph once recorded. Guarded by `mutex`
// (a segment's runs are ordered by the arena's variable anyway; graphs
// without an arena may run on several threads under the naive engine,
// which never captures).
struct GraphExecutor::CaptureSlot {
  std::mutex mutex;
  // Static, from the steps: one binding per external input or graph output
  // the segment touches (small: copied through staging buffers).
  std::vector<GraphBinding> bindings;
  std::vector<int32_t> binding_ext;  // per binding: the external
  std::vector<int32_t> binding_of;   // per external: its binding, or -1 (pinned or unused)
  std::vector<int32_t> pinned;  // externals (parameters, constants) whose memory the graph reads or writes in place
  // The call's block (a training step's saved values) can be large: it is
  // used in place, and a graph is recorded per block address (the allocator
  // hands a step's block out from a few addresses).
  bool uses_block = false;
  bool empty_binding = false;
  // Decided on the first run in each mode (index: is_train).
  bool decided[2] = {false, false};
  std::optional<GraphFallback> blocked[2];
  std::string blocked_detail[2];
  // Dynamic.
  struct Variant {
    std::unique_ptr<CapturedGraph> graph;
    void* block = nullptr;  // the block address it was recorded with (uses_block)
    uint64_t last_use = 0;
  };
  static constexpr size_t kMaxVariants = 3;
  static constexpr int64_t kMaxCaptures = 16;  // beyond: the block moves too often, run normally
  int64_t runs = 0;
  int64_t captures = 0;
  uint64_t uses = 0;
  std::optional<GraphFallback> failed;  // a capture or replay failed: run normally from now on
  std::vector<Variant> variants;
  bool graph_is_train = false;
  std::vector<void*> pinned_data;  // per pinned external, at the capture
  std::vector<std::shared_ptr<detail::Chunk>> pinned_chunks;  // kept alive while the graphs read them
  void* arena_data = nullptr;
};


struct GraphExecutor::Program {
  // Where a value lives: a bound array (ext >= 0), or at `offset` in the
  // arena (in_block false) or in the call's block (in_block true).
  struct Ref {
    int32_t ext = -1;
    bool in_block = false;
    int64_t offset = 0;
    Shape shape;
    DType dtype = DType::kFloat32;
  };
  struct Step {
    KernelFn fn = nullptr;
    OpId op{};
    std::string name;  // the node's, for errors
    OpAttrs attrs;
    std::vector<Ref> in, out;
    int32_t fresh = -1;  // index among the steps that draw new random values per call (Dropout, random ops)
  };
  enum class Source : int8_t { kInput, kParam, kConst, kOutput };
  struct External {
    Source source;
    int32_t index;  // into inputs / traced params / traced consts / outputs
    bool mutated = false;
  };

  // A consecutive range of steps pushed as one engine operation, with the
  // externals its steps read and write.
  struct Segment {
    size_t begin = 0, end = 0;
    std::vector<int32_t> reads, writes;
    std::shared_ptr<CaptureSlot> capture;  // null where the device records no graphs
  };

  Device device;
  std::vector<Step> steps;
  std::vector<Segment> segments;  // cover `steps` in order; one by default
  size_t max_views = 0;  // the most inputs + outputs of one step
  int32_t num_fresh = 0;
  std::vector<External> externals;
  std::vector<int32_t> output_ext;  // per graph output
  std::vector<std::vector<int32_t>> result_positions;  // per external: the graph outputs it is
  std::vector<TensorType> output_types;  // per kOutput external, by index
  std::vector<int32_t> output_position;  // per kOutput external: the graph output, or -1 when several name it
  int64_t block_bytes = 0;  // the call's block, when the layout uses one
  int64_t arena_bytes = 0, naive_bytes = 0;
  NDArray arena;
  // Device graphs: the device's recorder (null on CPUs and under the naive
  // engine), the name graphs and their messages use, and whether a fallback
  // was logged.
  GraphCapture* capturer = nullptr;
  std::string label;
  // Shared by the programs of one training step (share_arena): one line per cache entry.
  std::shared_ptr<std::atomic<bool>> logged = std::make_shared<std::atomic<bool>>(false);
  // The values that depend only on parameters and constants, computed before
  // the steps when a parameter changed (plain executors only: frontend/static_values.h).
  std::unique_ptr<StaticValues> statics;
};

bool GraphExecutor::supports(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes()) {
    if (!n.is_op()) continue;
    if (passes::is_random(op_def(n.op)) && !draws_per_call(n.op)) return false;
  }
  return true;
}

// Without a block layout (inference), the values that depend only on
// parameters and constants move to a static part computed when they change.
GraphExecutor::GraphExecutor(std::shared_ptr<const trace::TracedGraph> traced) {
  auto [main, statics] = StaticValues::split(std::move(traced));
  GraphExecutor built(std::move(main), BlockLayout{});
  traced_ = std::move(built.traced_);
  program_ = std::move(built.program_);
  program_->statics = std::move(statics);
}

GraphExecutor::GraphExecutor(std::shared_ptr<const trace::TracedGraph> traced, BlockLayout layout)
    : traced_(std::move(traced)), program_(std::make_shared<Program>()) {
  const ir::Graph& g = traced_->graph;
  Program& p = *program_;
  p.device = traced_->device;
  using Source = Program::Source;
  KILN_CHECK(layout.outputs.empty() || layout.outputs.size() == g.outputs().size(), InternalError,
             "GraphExecutor: block layout for {} outputs, the graph has {}", layout.outputs.size(), g.outputs().size());
  KILN_CHECK(layout.inputs.empty() || layout.inputs.size() == traced_->inputs.size(), InternalError,
             "GraphExecutor: block layout for {} inputs, the graph has {}", layout.inputs.size(),
             traced_->inputs.size());
  auto in_block = [&](const std::vector<int64_t>& at, size_t i) { return i < at.size() && at[i] >= 0; };
  for (const auto* at : {&layout.outputs, &layout.inputs})
    for (int64_t o : *at)
      KILN_CHECK(o < 0 || (o % passes::MemoryPlan::kAlignment == 0 && o < layout.bytes), InternalError,
                 "GraphExecutor: block offset {} is unaligned or outside the block's {} bytes", o, layout.bytes);

  // Per node, per output: its Ref.
  std::vector<std::vector<Program::Ref>> refs(g.size());
  auto external = [&](Source source, int32_t index) {
    p.externals.push_back({source, index});
    return static_cast<int32_t>(p.externals.size() - 1);
  };
  passes::PlanOptions plan_options;
  for (size_t i = 0; i < traced_->inputs.size(); ++i) {
    const ir::NodeId id = traced_->inputs[i];
    if (in_block(layout.inputs, i)) {
      refs[static_cast<size_t>(id)] = {{.in_block = true, .offset = layout.inputs[i]}};
      plan_options.placed_inputs.emplace_back(id, layout.inputs[i]);
      plan_options.reserved_bytes = layout.bytes;
    } else {
      refs[static_cast<size_t>(id)] = {{external(Source::kInput, static_cast<int32_t>(i))}};
    }
  }
  for (size_t i = 0; i < traced_->params.size(); ++i)
    refs[static_cast<size_t>(traced_->params[i].first)] = {{external(Source::kParam, static_cast<int32_t>(i))}};
  for (size_t i = 0; i < traced_->consts.size(); ++i)
    refs[static_cast<size_t>(traced_->consts[i].first)] = {{external(Source::kConst, static_cast<int32_t>(i))}};

  // Graph outputs produced by ops get fresh arrays per call, or their place
  // in the block.
  std::map<std::pair<ir::NodeId, int32_t>, int32_t> output_of;
  std::map<std::pair<ir::NodeId, int32_t>, int64_t> block_output_at;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const ir::Entry e = g.outputs()[i];
    const bool to_block = in_block(layout.outputs, i);
    const bool named = output_of.contains({e.node, e.index}) || block_output_at.contains({e.node, e.index});
    KILN_CHECK(!to_block || (g.node(e.node).is_op() && !named), InternalError,
               "GraphExecutor: output {} ('{}') goes to the block but is not an op's output or is named twice", i,
               g.node(e.node).name);
    if (to_block) {
      block_output_at[{e.node, e.index}] = layout.outputs[i];
      continue;
    }
    if (!g.node(e.node).is_op()) continue;
    if (auto it = output_of.find({e.node, e.index}); it != output_of.end()) {
      KILN_CHECK(!block_output_at.contains({e.node, e.index}), InternalError,
                 "GraphExecutor: output {} ('{}') goes to the block and to a fresh array", i, g.node(e.node).name);
      p.output_position[static_cast<size_t>(p.externals[static_cast<size_t>(it->second)].index)] = -1;
      continue;
    }
    KILN_CHECK(!block_output_at.contains({e.node, e.index}), InternalError,
               "GraphExecutor: output {} ('{}') goes to the block and to a fresh array", i, g.node(e.node).name);
    output_of[{e.node, e.index}] = external(Source::kOutput, static_cast<int32_t>(p.output_types.size()));
    p.output_types.push_back(g.type(e));
    p.output_position.push_back(static_cast<int32_t>(i));
  }
  if (!block_output_at.empty() || plan_options.reserved_bytes > 0) p.block_bytes = layout.bytes;

  const passes::MemoryPlan plan = passes::make_memory_plan(g, plan_options);
  const int64_t reserved = plan_options.reserved_bytes;
  for (size_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.nodes()[id];
    auto& r = refs[id];
    r.resize(n.types.size());
    for (size_t i = 0; i < n.types.size(); ++i) {
      r[i].shape = n.types[i].shape;
      r[i].dtype = n.types[i].dtype;
    }
    if (!n.is_op()) continue;
    const OpDef& def = op_def(n.op);
    Program::Step step;
    std::vector<TensorType> in_types;
    for (const ir::Entry& e : n.inputs) in_types.push_back(g.node(e.node).types[static_cast<size_t>(e.index)]);
    step.fn = find_kernel(def, p.device, in_types, n.types);
    prepare_kernel(n.op, p.device, n.attrs);  // e.g. compile a fused loop now, not in the first call
    step.op = n.op;
    step.name = n.name;
    step.attrs = n.attrs;
    if (draws_per_call(n.op)) step.fresh = p.num_fresh++;
    for (const ir::Entry& e : n.inputs) step.in.push_back(refs[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)]);
    for (int m : def.mutate_inputs) {
      const Program::Ref& in = step.in[static_cast<size_t>(m)];
      if (in.ext < 0 && in.in_block) continue;  // the call's block: written by the run anyway
      KILN_CHECK(in.ext >= 0, NotSupported, "hybridize: node '{}' ({}) mutates input {}, which is not a graph input",
                 n.name, def.name, m);
      p.externals[static_cast<size_t>(in.ext)].mutated = true;
    }
    // Outputs: fresh graph outputs, or their planned place in the arena.
    for (int32_t i = 0; i < n.num_outputs(); ++i) {
      Program::Ref& out = r[static_cast<size_t>(i)];
      if (auto it = output_of.find({static_cast<ir::NodeId>(id), i}); it != output_of.end()) {
        out.ext = it->second;
      } else if (auto at = block_output_at.find({static_cast<ir::NodeId>(id), i}); at != block_output_at.end()) {
        out.in_block = true;
        out.offset = at->second;
      } else {
        // The plan's arena: the block's region [0, reserved), then the arena.
        out.offset = plan.offset[id][static_cast<size_t>(i)];
        KILN_ASSERT(out.offset >= 0);
        out.in_block = out.offset < reserved;
        if (!out.in_block) out.offset -= reserved;
      }
      step.out.push_back(out);
    }
    p.max_views = std::max(p.max_views, step.in.size() + step.out.size());
    p.steps.push_back(std::move(step));
  }
  for (const ir::Entry& e : g.outputs()) p.output_ext.push_back(refs[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)].ext);
  p.result_positions.resize(p.externals.size());
  for (size_t i = 0; i < p.output_ext.size(); ++i)
    if (p.output_ext[i] >= 0) p.result_positions[static_cast<size_t>(p.output_ext[i])].push_back(static_cast<int32_t>(i));
  p.arena_bytes = plan.arena_bytes - reserved;
  p.naive_bytes = plan.naive_bytes;
  if (p.arena_bytes > 0) p.arena = NDArray::empty(Shape{p.arena_bytes}, {DType::kUint8, p.device});
  if (!p.device.is_cpu() && engine::get().kind() == engine::Kind::kThreaded)
    if (DeviceBackend* backend = find_device_backend(p.device.kind)) p.capturer = backend->graph_capture();
  p.label = fmt::format("a compiled graph of {} steps on {}", p.steps.size(), p.device);
  set_segments(p, {p.steps.size()});
}

void GraphExecutor::set_label(std::string label) { program_->label = std::move(label); }

std::shared_ptr<GraphExecutor::CaptureSlot> GraphExecutor::make_capture_slot(const Program& p, size_t begin,
                                                                             size_t end) {
  using Source = Program::Source;
  auto slot = std::make_shared<CaptureSlot>();
  slot->binding_of.assign(p.externals.size(), -1);
  // First access per external: a binding needs its memory copied in only
  // when the segment reads it before writing it.
  enum : int8_t { kUnseen, kReadFirst, kWrittenFirst };
  std::vector<int8_t> first(p.externals.size(), kUnseen);
  std::vector<bool> written(p.externals.size(), false);
  std::vector<int64_t> ext_bytes(p.externals.size(), 0);
  bool touches_block = false;
  for (size_t s = begin; s < end; ++s) {
    const Program::Step& step = p.steps[s];
    const OpDef& def = op_def(step.op);
    auto touch = [&](const Program::Ref& r, bool write) {
      if (r.ext >= 0) {
        const auto x = static_cast<size_t>(r.ext);
        if (first[x] == kUnseen) first[x] = write ? kWrittenFirst : kReadFirst;
        if (write) written[x] = true;
        ext_bytes[x] = static_cast<int64_t>(r.shape.size()) * static_cast<int64_t>(dtype_size(r.dtype));
      } else if (r.in_block) {
        touches_block = true;
      }
    };
    for (size_t i = 0; i < step.in.size(); ++i) touch(step.in[i], false);
    for (int m : def.mutate_inputs) touch(step.in[static_cast<size_t>(m)], true);
    for (const Program::Ref& r : step.out) touch(r, true);
  }
  for (size_t x = 0; x < p.externals.size(); ++x) {
    if (first[x] == kUnseen) continue;
    const Source source = p.externals[x].source;
    if (source == Source::kParam || source == Source::kConst) {
      slot->pinned.push_back(static_cast<int32_t>(x));
      continue;
    }
    if (ext_bytes[x] <= 0) slot->empty_binding = true;
    slot->binding_of[x] = static_cast<int32_t>(slot->bindings.size());
    slot->binding_ext.push_back(static_cast<int32_t>(x));
    slot->bindings.push_back({.bytes = static_cast<size_t>(std::max<int64_t>(ext_bytes[x], 0)),
                              .copy_in = first[x] == kReadFirst,
                              .copy_out = written[x]});
  }
  slot->uses_block = touches_block;
  return slot;
}

void GraphExecutor::set_segments(Program& p, const std::vector<size_t>& ends) {
  using Source = Program::Source;
  p.segments.clear();
  size_t begin = 0;
  for (size_t end : ends) {
    Program::Segment seg{.begin = begin, .end = end};
    if (p.capturer != nullptr) seg.capture = make_capture_slot(p, begin, end);
    std::vector<bool> read(p.externals.size()), written(p.externals.size());
    for (size_t s = begin; s < end; ++s) {
      const Program::Step& step = p.steps[s];
      for (const Program::Ref& r : step.in)
        if (r.ext >= 0) read[static_cast<size_t>(r.ext)] = true;
      for (const Program::Ref& r : step.out)
        if (r.ext >= 0) written[static_cast<size_t>(r.ext)] = true;
    }
    for (size_t x = 0; x < p.externals.size(); ++x) {
      // Mutated externals are written by whichever segment uses them; a run
      // with a single segment names every external, as before segments.
      const bool single = ends.size() == 1;
      const bool writes = written[x] || (p.externals[x].mutated && (read[x] || single)) ||
                          (single && p.externals[x].source == Source::kOutput);
      if (writes) {
        seg.writes.push_back(static_cast<int32_t>(x));
      } else if (read[x] || single) {
        seg.reads.push_back(static_cast<int32_t>(x));
      }
    }
    p.segments.push_back(std::move(seg));
    begin = end;
  }
}

void GraphExecutor::split_into_segments(int max_segments) {
  Program& p = *program_;
  const size_t n = p.steps.size();
  if (max_segments <= 1 || n < 2) {
    set_segments(p, {n});
    return;
  }
  // Candidate cuts: after a step that writes a graph output.
  std::vector<size_t> candidates;
  for (size_t s = 0; s + 1 < n; ++s) {
    const auto& out = p.steps[s].out;
    if (std::any_of(out.begin(), out.end(), [&](const Program::Ref& r) {
          return r.ext >= 0 && p.externals[static_cast<size_t>(r.ext)].source == Program::Source::kOutput;
        }))
      candidates.push_back(s + 1);
  }
  // For each even split point k*n/max_segments, the nearest candidate after
  // the previous cut.
  std::vector<size_t> ends;
  for (int k = 1; k < max_segments; ++k) {
    const auto target = static_cast<ptrdiff_t>(n * static_cast<size_t>(k) / static_cast<size_t>(max_segments));
    std::optional<size_t> best;
    for (size_t c : candidates) {
      if (!ends.empty() && c <= ends.back()) continue;
      if (!best || std::abs(static_cast<ptrdiff_t>(c) - target) < std::abs(static_cast<ptrdiff_t>(*best) - target))
        best = c;
    }
    if (best) ends.push_back(*best);
  }
  ends.push_back(n);
  set_segments(p, ends);
}

int GraphExecutor::num_segments() const { return static_cast<int>(program_->segments.size()); }

GraphExecutor::~GraphExecutor() = default;

void GraphExecutor::share_arena(GraphExecutor& a, GraphExecutor& b) {
  Program& pa = *a.program_;
  Program& pb = *b.program_;
  KILN_CHECK(pa.device == pb.device, InternalError, "share_arena: programs on {} and {}", pa.device, pb.device);
  NDArray& larger = pa.arena_bytes >= pb.arena_bytes ? pa.arena : pb.arena;
  pa.arena = pb.arena = larger;
  pb.logged = pa.logged;
}

int64_t GraphExecutor::arena_bytes() const { return program_->arena_bytes; }
int64_t GraphExecutor::naive_bytes() const { return program_->naive_bytes; }

// What one call's engine operations share: the chunks of the arrays it binds
// (kept alive until its last segment ran) and their data pointers, resolved
// at the call (the frontend touches every chunk for its engine variable
// anyway; the worker then reads one compact array instead of following each
// array to its chunk). Each segment's operation holds a reference and runs
// its range of steps.
struct GraphExecutor::Call {
  struct Bound {
    void* data = nullptr;
    std::shared_ptr<detail::Chunk> chunk;
    int64_t fresh_bytes = 0;  // a graph output allocated by this call: its bytes (back-pressure)
  };
  std::shared_ptr<const Program> program;
  std::vector<Bound> bound;  // per external
  std::vector<OpAttrs> fresh_attrs;
  Bound block;  // the call's block, if any
  bool is_train = false;

  // Runs segment `segment`: replaying its device graph when it has one,
  // recording it on the run after the first, else launching step by step.
  void run_segment(engine::RunContext rc, size_t segment) const;
  // Launches steps [begin, end) one by one. With `slot` and `staging`, the
  // slot's bindings resolve to the staging buffers (a capture). With
  // `sync_each`, waits for the device after each step and names the node
  // that failed.
  void run_steps(engine::RunContext rc, size_t begin, size_t end, const CaptureSlot* slot = nullptr,
                 std::span<void* const> staging = {}, bool sync_each = false) const;
};

void GraphExecutor::Call::run_steps(engine::RunContext rc, size_t begin, size_t end, const CaptureSlot* slot,
                                    std::span<void* const> staging, bool sync_each) const {
  const Program& p = *program;
  char* arena = p.arena.is_none() ? nullptr : static_cast<char*>(p.arena.data());
  char* block_data = static_cast<char*>(block.data);
  auto external_data = [&](int32_t ext) {
    if (slot != nullptr) {
      const int32_t b = slot->binding_of[static_cast<size_t>(ext)];
      if (b >= 0) return staging[static_cast<size_t>(b)];
    }
    return bound[static_cast<size_t>(ext)].data;
  };
  // One buffer for every step's views (a TensorView holds a Shape: not
  // something to construct 32 of per step), on the stack for small graphs.
  constexpr size_t kInlineViews = 8;
  TensorView inline_views[kInlineViews];
  std::vector<TensorView> heap_views(p.max_views > kInlineViews ? p.max_views : 0);
  TensorView* views = p.max_views > kInlineViews ? heap_views.data() : inline_views;
  // With the profiler on, one event per node inside the CachedOp's.
  const bool profile = profiler::enabled();
  for (size_t s = begin; s < end; ++s) {
    const Program::Step& step = p.steps[s];
    const int64_t start_ns = profile ? profiler::now_ns() : 0;
    size_t k = 0;
    for (const auto* refs : {&step.in, &step.out}) {
      for (const Program::Ref& r : *refs) {
        views[k].data = r.ext >= 0 ? external_data(r.ext)
                        : r.in_block ? block_data + r.offset
                                     : arena + r.offset;
        views[k].shape = r.shape;
        views[k].dtype = r.dtype;
        ++k;
      }
    }
    KernelContext ctx{rc, step.fresh >= 0 ? fresh_attrs[static_cast<size_t>(step.fresh)] : step.attrs, is_train,
                      step.op};
    if (sync_each) {
      try {
        step.fn(ctx, {views, step.in.size()}, {views + step.in.size(), step.out.size()});
        p.capturer->synchronize(rc);
      } catch (Error& e) {
        e.add_context(fmt::format("node '{}' ({}) of {}", step.name, op_def(step.op).name, p.label));
        throw;
      }
    } else {
      step.fn(ctx, {views, step.in.size()}, {views + step.in.size(), step.out.size()});
    }
    if (profile) {
      profiler::record({.name = fmt::format("CachedOp/{}", op_def(step.op).name),
                        .device = p.device,
                        .thread = engine::detail::current_thread_id(),
                        .start_ns = start_ns,
                        .end_ns = profiler::now_ns()});
    }
  }
}

namespace {

// KILN_LOG_CUDA_GRAPHS=1: also log the fallbacks decided from the graph alone
// (random ops, ops that read back); failed captures and replays are always
// logged, once per executor.
bool log_static_fallbacks() {
  static const bool on = [] {
    const char* env = std::getenv("KILN_LOG_CUDA_GRAPHS");
    return env != nullptr && *env != '\0' && std::string_view(env) != "0";
  }();
  return on;
}

}  // namespace

void GraphExecutor::Call::run_segment(engine::RunContext rc, size_t segment) const {
  const Program& p = *program;
  KILN_CHECK(segment < p.segments.size(), InternalError,
             "compiled graph: segment {} of {} (segments changed while a run was queued)", segment, p.segments.size());
  const Program::Segment& seg = p.segments[segment];
  CaptureSlot* slot = seg.capture.get();
  if (slot == nullptr || profiler::enabled()) {  // per-node profiler events need the steps launched one by one
    run_steps(rc, seg.begin, seg.end);
    return;
  }
  std::lock_guard lock(slot->mutex);
  auto fall_back = [&](GraphFallback reason, const std::string& detail, bool always_log) {
    graph_capture_count_fallback(reason);
    if ((always_log || log_static_fallbacks()) && !p.logged->exchange(true, std::memory_order_relaxed))
      std::fprintf(stderr, "kiln: %s runs without a CUDA graph (%s)%s%s\n", p.label.c_str(),
                   std::string(graph_fallback_name(reason)).c_str(), detail.empty() ? "" : ": ", detail.c_str());
    run_steps(rc, seg.begin, seg.end);
  };
  if (!graph_capture_enabled()) return fall_back(GraphFallback::kDisabled, {}, false);
  const int mode = is_train ? 1 : 0;
  if (!slot->decided[mode]) {
    const size_t n = seg.end - seg.begin;
    std::vector<OpId> ops(n);
    std::unique_ptr<bool[]> draws(new bool[n]);
    for (size_t i = 0; i < n; ++i) {
      const Program::Step& step = p.steps[seg.begin + i];
      ops[i] = step.op;
      // Dropout outside training is the identity: nothing drawn.
      draws[i] = step.fresh >= 0 && (step.op != OpId::kDropout || is_train ||
                                     step.attrs.as<DropoutAttrs>().mode == DropoutMode::kAlways);
    }
    slot->blocked[mode] =
        capture_blocker(ops, std::span<const bool>(draws.get(), n), slot->empty_binding,
                        [&](OpId op) { return p.capturer->op_capturable(op); }, &slot->blocked_detail[mode]);
    slot->decided[mode] = true;
  }
  if (slot->blocked[mode]) return fall_back(*slot->blocked[mode], slot->blocked_detail[mode], false);
  if (slot->failed) return fall_back(*slot->failed, {}, false);

  // This call's binding memory.
  constexpr size_t kInline = 16;
  void* inline_ptrs[kInline];
  std::vector<void*> heap_ptrs(slot->bindings.size() > kInline ? slot->bindings.size() : 0);
  void** ptrs = slot->bindings.size() > kInline ? heap_ptrs.data() : inline_ptrs;
  for (size_t i = 0; i < slot->bindings.size(); ++i) {
    ptrs[i] = bound[static_cast<size_t>(slot->binding_ext[i])].data;
  }
  const std::span<void* const> pointers(ptrs, slot->bindings.size());
  void* arena_data = p.arena.is_none() ? nullptr : p.arena.data();

  // Replays `v`; a failure drops the slot's graphs for good and, where the
  // device still works, finds the node by running the steps one by one,
  // waiting after each.
  auto replay = [&](CaptureSlot::Variant& v) {
    v.last_use = ++slot->uses;
    try {
      v.graph->replay(rc, pointers);
    } catch (Error& e) {
      slot->variants.clear();
      slot->pinned_chunks.clear();
      slot->failed = GraphFallback::kReplayFailed;
      graph_capture_count_fallback(GraphFallback::kReplayFailed);
      if (!p.logged->exchange(true, std::memory_order_relaxed))
        std::fprintf(stderr, "kiln: %s: CUDA graph replay failed: %s\n", p.label.c_str(), e.what());
      bool device_ok = true;
      try {
        p.capturer->synchronize(rc);
      } catch (...) {
        device_ok = false;
      }
      if (!device_ok) throw;  // the device is lost: the replay's error is all there is
      run_steps(rc, seg.begin, seg.end, nullptr, {}, /*sync_each=*/true);
      e.add_context("a step-by-step rerun did not fail");
      throw;
    }
    graph_capture_count_replay();
  };

  bool recapture = false;
  if (!slot->variants.empty()) {
    if (slot->graph_is_train != is_train) return fall_back(GraphFallback::kModeChanged, {}, false);
    bool moved = arena_data != slot->arena_data;
    for (size_t i = 0; i < slot->pinned.size() && !moved; ++i)
      moved = bound[static_cast<size_t>(slot->pinned[i])].data != slot->pinned_data[i];
    if (!moved) {
      for (CaptureSlot::Variant& v : slot->variants)
        if (!slot->uses_block || v.block == block.data) return replay(v);
    } else {
      // A parameter got new storage (or the arena moved): record again.
      slot->variants.clear();
      slot->pinned_chunks.clear();
      recapture = true;
    }
  }
  if (slot->runs++ == 0 && !recapture) {
    // The first run launches normally: allocator caches, cuBLAS/cuDNN
    // handles and algorithm choices are set up outside the capture.
    graph_capture_count_warmup();
    run_steps(rc, seg.begin, seg.end);
    return;
  }
  if (slot->captures >= CaptureSlot::kMaxCaptures) {
    slot->failed = GraphFallback::kMemoryMoves;
    slot->variants.clear();
    slot->pinned_chunks.clear();
    return fall_back(GraphFallback::kMemoryMoves,
                     fmt::format("recorded {} times: the call's block or a parameter keeps moving",
                                 CaptureSlot::kMaxCaptures),
                     true);
  }
  if (slot->variants.size() >= CaptureSlot::kMaxVariants) {
    auto lru = std::min_element(slot->variants.begin(), slot->variants.end(),
                                [](const auto& a, const auto& b) { return a.last_use < b.last_use; });
    slot->variants.erase(lru);
  }
  CaptureResult r = p.capturer->capture(rc, slot->bindings, pointers, p.label, [&](std::span<void* const> staging) {
    run_steps(rc, seg.begin, seg.end, slot, staging);
  });
  if (!r.graph) {
    slot->failed = r.reason.value_or(GraphFallback::kCaptureFailed);
    slot->variants.clear();
    slot->pinned_chunks.clear();
    return fall_back(*slot->failed, r.detail, true);
  }
  ++slot->captures;
  if (slot->variants.empty()) {
    slot->graph_is_train = is_train;
    slot->arena_data = arena_data;
    slot->pinned_data.clear();
    for (int32_t x : slot->pinned) {
      slot->pinned_data.push_back(bound[static_cast<size_t>(x)].data);
      slot->pinned_chunks.push_back(bound[static_cast<size_t>(x)].chunk);
    }
  }
  graph_capture_count_capture(recapture);
  slot->variants.push_back({std::move(r.graph), block.data, 0});
  replay(slot->variants.back());  // the capture ran nothing: this call's work
}

std::vector<NDArray> GraphExecutor::run(std::span<const NDArray> inputs, bool is_train, const RunArgs& args) {
  const Program& p = *program_;
  if (p.statics) p.statics->refresh(is_train);
  const trace::TracedGraph& t = *traced_;
  using Source = Program::Source;
  KILN_CHECK(inputs.size() == t.inputs.size(), ValueError, "compiled graph: {} inputs given, the graph takes {}",
             inputs.size(), t.inputs.size());

  // One allocation for the call's shared state; each segment's closure (a
  // pointer and a range) then fits the engine's inline function storage.
  auto call = std::make_shared<Call>();
  call->bound.resize(p.externals.size());
  std::vector<NDArray> result(p.output_ext.size());  // none for outputs written into the block
  for (size_t i = 0; i < p.externals.size(); ++i) {
    const Program::External& x = p.externals[i];
    NDArray fresh;
    const NDArray* a = &fresh;
    switch (x.source) {
      case Source::kInput: a = &inputs[static_cast<size_t>(x.index)]; break;
      case Source::kParam: fresh = t.params[static_cast<size_t>(x.index)].second.data(p.device); break;
      case Source::kConst: a = &t.consts[static_cast<size_t>(x.index)].second; break;
      case Source::kOutput: {
        const TensorType& type = p.output_types[static_cast<size_t>(x.index)];
        const int32_t pos = p.output_position[static_cast<size_t>(x.index)];
        if (pos >= 0 && static_cast<size_t>(pos) < args.outputs_into.size()) {
          const NDArray& into = args.outputs_into[static_cast<size_t>(pos)];
          if (!into.is_none() && into.shape() == type.shape && into.dtype() == type.dtype &&
              into.device() == p.device) {
            a = &into;
            break;
          }
        }
        fresh = NDArray::empty(type.shape, {type.dtype, p.device});
        call->bound[i].fresh_bytes = static_cast<int64_t>(fresh.nbytes());
        break;
      }
    }
    call->bound[i].data = a->data();
    call->bound[i].chunk = a->chunk();
    for (int32_t pos : p.result_positions[i]) result[static_cast<size_t>(pos)] = *a;
  }
  if (p.block_bytes > 0) {
    KILN_CHECK(!args.block.is_none() && static_cast<int64_t>(args.block.nbytes()) >= p.block_bytes &&
                   args.block.device() == p.device,
               InternalError, "compiled graph: needs a block of {} bytes on {}", p.block_bytes, p.device);
    call->block = {args.block.data(), args.block.chunk()};
  }

  // Dropout masks and random ops: new values per call, their stream
  // positions drawn here (at the call, as nd::dropout and nd::random do).
  if (p.num_fresh > 0) {
    for (const Program::Step& step : p.steps) {
      if (step.fresh < 0) continue;
      Shape in0 = step.in.empty() ? Shape{} : step.in[0].shape;
      call->fresh_attrs.push_back(attrs_for_call(step.op, step.attrs, in0, p.device, is_train));
    }
  }
  call->program = program_;
  call->is_train = is_train;

  // Each segment's variables: reads from the front, writes from the back of
  // one buffer (on the stack for small graphs).
  const size_t max_vars = p.externals.size() + 2;
  constexpr size_t kInlineVars = 32;
  engine::Var* inline_vars[kInlineVars];
  std::vector<engine::Var*> heap_vars(max_vars > kInlineVars ? max_vars : 0);
  engine::Var** vars = max_vars > kInlineVars ? heap_vars.data() : inline_vars;
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const Program::Segment& seg = p.segments[s];
    size_t num_reads = 0, first_write = max_vars;
    int64_t new_bytes = 0;
    for (int32_t x : seg.reads) vars[num_reads++] = call->bound[static_cast<size_t>(x)].chunk->var;
    for (int32_t x : seg.writes) {
      vars[--first_write] = call->bound[static_cast<size_t>(x)].chunk->var;
      new_bytes += call->bound[static_cast<size_t>(x)].fresh_bytes;
    }
    if (!p.arena.is_none()) vars[--first_write] = p.arena.var();
    if (p.block_bytes > 0) {
      vars[--first_write] = args.block.var();
      // The block is memory this queued run holds (the forward allocated it
      // for this call; the backward frees it): back-pressure must see it, or
      // a loop that never reads a value runs ahead one block per step.
      if (s + 1 == p.segments.size()) new_bytes += static_cast<int64_t>(args.block.nbytes());
    }
    // One variable may back several arrays (views, an input passed twice).
    std::span<engine::Var*> reads(vars, num_reads), writes(vars + first_write, max_vars - first_write);
    auto dedupe = [](std::span<engine::Var*> v) {
      std::sort(v.begin(), v.end());
      return v.first(static_cast<size_t>(std::unique(v.begin(), v.end()) - v.begin()));
    };
    writes = dedupe(writes);
    reads = dedupe(reads);
    reads = reads.first(static_cast<size_t>(
        std::remove_if(reads.begin(), reads.end(),
                       [&](engine::Var* v) { return std::binary_search(writes.begin(), writes.end(), v); }) -
        reads.begin()));
    // The last segment takes the call's reference instead of copying it.
    std::shared_ptr<const Call> held = s + 1 == p.segments.size() ? std::move(call) : call;
    engine::get().push(
        [call = std::move(held), s](engine::RunContext rc) { call->run_segment(rc, s); },
        std::span<engine::Var* const>(reads.data(), reads.size()),
        std::span<engine::Var* const>(writes.data(), writes.size()),
        {.device = p.device, .lane = engine::Lane::kCompute, .name = "CachedOp", .bytes = new_bytes});
  }
  return result;
}

}  // namespace kiln
