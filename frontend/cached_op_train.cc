#include "frontend/cached_op_train.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "frontend/autograd.h"
#include "frontend/autograd_tape.h"
#include "frontend/graph_eval.h"
#include "frontend/invoke.h"
#include "ir/error.h"
#include "passes/fuse_elementwise.h"
#include "passes/gradient.h"
#include "passes/pass.h"
#include "passes/split_gradient.h"

namespace kiln {
namespace {

// Binds `g`'s leaves to what `traced` bound them to, by name; input nodes are
// bound in `input_order`.
std::shared_ptr<trace::TracedGraph> bind_leaves(ir::Graph g, const trace::TracedGraph& traced,
                                         const std::vector<std::string>& input_order) {
  auto t = std::make_shared<trace::TracedGraph>();
  t->device = traced.device;
  for (const std::string& name : input_order) {
    auto id = g.find(name);
    KILN_CHECK(id.has_value(), InternalError, "hybridize: compiled training graph has no input '{}'", name);
    t->inputs.push_back(*id);
  }
  for (const auto& [old, p] : traced.params)
    if (auto id = g.find(traced.graph.node(old).name)) t->params.emplace_back(*id, p);
  for (const auto& [old, a] : traced.consts)
    if (auto id = g.find(traced.graph.node(old).name)) t->consts.emplace_back(*id, a);
  size_t bound = t->inputs.size() + t->params.size() + t->consts.size();
  size_t leaves = 0;
  for (const ir::Node& n : g.nodes()) leaves += !n.is_op();
  KILN_CHECK(bound == leaves, InternalError, "hybridize: {} of {} leaves of a compiled training graph are bound",
             bound, leaves);
  t->graph = std::move(g);
  return t;
}

// How many engine operations a backward part runs as
// (GraphExecutor::split_into_segments): KILN_BACKWARD_SEGMENTS, default 8.
// Each segment's gradients are ready when it ends, so data-parallel
// aggregation of the last layers starts while the first layers' backward
// still runs; a push costs about a microsecond, so 8 are free for any graph
// worth compiling.
int backward_segments() {
  static const int n = [] {
    const char* env = std::getenv("KILN_BACKWARD_SEGMENTS");
    if (env == nullptr || *env == '\0') return 8;
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    KILN_CHECK(*end == '\0' && v >= 1 && v <= 1024, ValueError,
               "KILN_BACKWARD_SEGMENTS='{}': expected a whole number from 1 to 1024", env);
    return static_cast<int>(v);
  }();
  return n;
}

}  // namespace

std::shared_ptr<const TrainProgram> TrainProgram::compile(std::shared_ptr<const trace::TracedGraph> traced_graph,
                                                          const std::vector<bool>& input_needs_grad,
                                                          bool train_mode, const std::string& label) {
  const trace::TracedGraph& traced = *traced_graph;
  const ir::Graph& fwd = traced.graph;
  if (!GraphExecutor::supports(fwd)) return nullptr;
  std::vector<std::string> wrt;
  auto program = std::shared_ptr<TrainProgram>(new TrainProgram);
  program->device_ = traced.device;
  program->traced_ = std::move(traced_graph);
  program->num_outputs_ = fwd.outputs().size();
  for (const ir::Entry& e : fwd.outputs()) program->output_types_.push_back(fwd.type(e));
  program->input_grad_.assign(traced.inputs.size(), -1);
  for (size_t i = 0; i < traced.inputs.size(); ++i) {
    if (!input_needs_grad[i]) continue;
    program->input_grad_[i] = static_cast<int>(wrt.size());
    wrt.push_back(fwd.node(traced.inputs[i]).name);
  }
  for (const auto& [node, p] : traced.params) {
    if (p.is_aux() || p.grad_req() == GradReq::kNull) continue;
    program->param_grads_.emplace_back(p, static_cast<int>(wrt.size()));
    wrt.push_back(fwd.node(node).name);
  }
  if (wrt.empty()) return nullptr;

  ir::Graph grad = passes::build_gradient_graph(fwd, wrt, train_mode);
  std::vector<std::string> heads;
  for (size_t i = 0; i < fwd.outputs().size(); ++i) heads.push_back(passes::head_grad_name(fwd, i));
  passes::SplitGraph split = passes::split_gradient_graph(grad, fwd.outputs().size(), heads);
  passes::PassContext ctx;
  if (!ctx.options.dump_dir.empty()) {
    static std::atomic<int> next{0};
    ctx.options.dump_dir += fmt::format("/training-backward-{}", next.fetch_add(1));
  }
  // Fusion after the split: the values saved for backward are forward
  // outputs, so they stay materialized. A fused node may write an output over
  // a full input it reads for the last time (passes::inplace_pairs), like the
  // in-place gradient kernels it replaces.
  const bool fuse = passes::fuse_elementwise_on(traced.device);
  ir::Graph backward = passes::run_pipeline(
      split.backward,
      fuse ? "eliminate-common-expr,eliminate-dead-code,fuse-elementwise" : "eliminate-common-expr,eliminate-dead-code",
      ctx);
  ir::Graph forward = fuse ? passes::run_pipeline(split.forward, "fuse-elementwise", ctx) : std::move(split.forward);

  // The block: every saved value an op of the forward part writes, that no
  // other forward output names and that backward does not return as is.
  int64_t saved_bytes = 0;
  GraphExecutor::BlockLayout forward_layout;
  forward_layout.outputs.assign(forward.outputs().size(), -1);
  std::vector<int64_t> saved_at(split.saved.size(), -1);
  for (size_t k = 0; k < split.saved.size(); ++k) {
    const ir::Entry e = forward.outputs()[program->num_outputs_ + k];
    const TensorType t = forward.type(e);
    saved_bytes += t.shape.size() * static_cast<int64_t>(dtype_size(t.dtype));
    auto backward_node = backward.find(split.saved[k]);
    bool eligible = forward.node(e.node).is_op() && backward_node.has_value() &&
                    std::count(forward.outputs().begin(), forward.outputs().end(), e) == 1 &&
                    std::none_of(backward.outputs().begin(), backward.outputs().end(),
                                 [&](const ir::Entry& o) { return o.node == *backward_node; });
    if (!eligible) continue;
    saved_at[k] = forward_layout.bytes;
    forward_layout.outputs[program->num_outputs_ + k] = forward_layout.bytes;
    forward_layout.bytes += passes::aligned_bytes(t);
  }

  std::vector<std::string> forward_inputs;
  for (ir::NodeId id : traced.inputs) forward_inputs.push_back(fwd.node(id).name);
  program->forward_ =
      std::make_unique<GraphExecutor>(bind_leaves(std::move(forward), traced, forward_inputs), forward_layout);

  std::vector<std::string> backward_order;
  GraphExecutor::BlockLayout backward_layout;
  backward_layout.bytes = forward_layout.bytes;
  for (size_t k = 0; k < split.saved.size(); ++k) {
    backward_order.push_back(split.saved[k]);
    backward_layout.inputs.push_back(saved_at[k]);
    program->backward_inputs_.push_back({Source::kSaved, k});
  }
  for (size_t k = 0; k < heads.size(); ++k) {
    if (!backward.find(heads[k])) continue;  // a head gradient nothing reads
    backward_order.push_back(heads[k]);
    backward_layout.inputs.push_back(-1);
    program->backward_inputs_.push_back({Source::kHeadGrad, k});
  }
  for (size_t k = 0; k < forward_inputs.size(); ++k) {
    auto id = backward.find(forward_inputs[k]);
    if (!id || backward.node(*id).kind != ir::NodeKind::kInput) continue;
    backward_order.push_back(forward_inputs[k]);
    backward_layout.inputs.push_back(-1);
    program->backward_inputs_.push_back({Source::kInput, k});
  }
  program->num_backward_outputs_ = backward.outputs().size();
  program->backward_ =
      std::make_unique<GraphExecutor>(bind_leaves(std::move(backward), traced, backward_order), backward_layout);
  program->backward_->split_into_segments(backward_segments());
  GraphExecutor::share_arena(*program->forward_, *program->backward_);
  if (!label.empty()) {
    program->forward_->set_label(label + " forward");
    program->backward_->set_label(label + " backward");
  }
  Memory& m = program->memory_;
  m.forward_arena = program->forward_->arena_bytes();
  m.backward_arena = program->backward_->arena_bytes();
  m.num_saved = static_cast<int64_t>(split.saved.size());
  m.saved = saved_bytes;
  m.block = forward_layout.bytes;
  return program;
}

std::vector<NDArray> TrainProgram::call(std::span<const NDArray> inputs, bool is_train) const {
  NDArray block;
  if (memory_.block > 0) block = NDArray::empty(Shape{memory_.block}, {DType::kUint8, device_});
  std::vector<NDArray> all = forward_->run(inputs, is_train, {.block = block});
  std::vector<NDArray> outputs(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(num_outputs_));
  std::vector<NDArray> saved(all.begin() + static_cast<std::ptrdiff_t>(num_outputs_), all.end());

  auto node = std::make_shared<autograd::detail::Node>();
  node->custom = true;
  node->is_train = is_train;
  node->output_types = output_types_;
  for (const NDArray& x : inputs) {
    node->inputs.push_back(x.requires_grad() ? autograd::detail::Edge{x.ag_node(), x.ag_index()}
                                             : autograd::detail::Edge{});
    node->input_types.push_back({x.shape(), x.dtype()});
  }
  for (const auto& [p, _] : param_grads_) {
    NDArray d = p.data(device_);
    node->inputs.push_back(autograd::detail::Edge{d.ag_node(), d.ag_index()});
    node->input_types.push_back({d.shape(), d.dtype()});
  }
  std::vector<NDArray> kept_inputs(inputs.begin(), inputs.end());
  // The closure holds the program: backward may run after the CachedOp dropped it.
  std::shared_ptr<const TrainProgram> self = shared_from_this();
  node->custom_replay = [self, kept_inputs, is_train](std::span<const NDArray> out_grads) {
    return self->replay_gradients(kept_inputs, out_grads, is_train);
  };
  node->custom_backward = [self, saved = std::move(saved), kept_inputs = std::move(kept_inputs), block,
                           is_train](std::span<const NDArray> out_grads,
                                     const autograd::detail::CustomBackwardArgs& args) {
    const TrainProgram& p = *self;
    std::vector<NDArray> bin;
    bin.reserve(p.backward_inputs_.size());
    for (const BackwardInput& b : p.backward_inputs_) {
      switch (b.source) {
        case Source::kSaved: bin.push_back(saved[b.index]); break;
        case Source::kHeadGrad: bin.push_back(out_grads[b.index]); break;
        case Source::kInput: bin.push_back(kept_inputs[b.index]); break;
      }
    }
    // Gradient buffers to write into, per backward output.
    std::vector<NDArray> into(p.num_backward_outputs_);
    for (size_t k = 0; k < args.into.size(); ++k) {
      int g = k < p.input_grad_.size() ? p.input_grad_[k] : p.param_grads_[k - p.input_grad_.size()].second;
      if (g >= 0 && !args.into[k].is_none()) into[static_cast<size_t>(g)] = args.into[k];
    }
    // The run consumes the block: a backward that may run again gets a copy.
    NDArray b = args.retain_graph && !block.is_none() ? block.copy() : block;
    std::vector<NDArray> grads = p.backward_->run(bin, is_train, {.block = b, .outputs_into = into});
    std::vector<NDArray> per_edge;
    for (int g : p.input_grad_) per_edge.push_back(g >= 0 ? grads[static_cast<size_t>(g)] : NDArray());
    for (const auto& [_, g] : p.param_grads_) per_edge.push_back(grads[static_cast<size_t>(g)]);
    return per_edge;
  };
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i].set_ag_entry(node, static_cast<int>(i));
  return outputs;
}

std::vector<NDArray> TrainProgram::replay_gradients(std::span<const NDArray> inputs, std::span<const NDArray> out_grads,
                                                    bool is_train) const {
  const trace::TracedGraph& t = *traced_;
  for (const ir::Node& n : t.graph.nodes()) {
    KILN_CHECK(!n.is_op() || !draws_per_call(n.op) || (n.op == OpId::kDropout && !is_train), NotSupported,
               "grad(create_graph=true) through a hybridized block: node '{}' ({}) draws random values per call, "
               "which a replay would draw again; call hybridize(false) on the block for higher-order gradients",
               n.name, op_def(n.op).name);
  }
  // Each tape edge of the call (inputs, then param_grads_) enters the replay
  // through its own copy, recorded, so that an array bound to two edges gets
  // each edge's part of the gradient (the walk stops at the copies).
  std::vector<NDArray> edges(inputs.begin(), inputs.end());
  for (const auto& [p, _] : param_grads_) edges.push_back(p.data(device_));
  std::vector<NDArray> variables;
  std::vector<size_t> where;
  {
    autograd::Record record(is_train);
    for (size_t k = 0; k < edges.size(); ++k) {
      bool wanted = k >= inputs.size() || input_grad_[k] >= 0;
      if (!wanted || !edges[k].requires_grad()) continue;
      edges[k] = invoke1(OpId::kCopy, {edges[k]});
      variables.push_back(edges[k]);
      where.push_back(k);
    }
  }
  std::vector<NDArray> values = bind_values(t, std::span<const NDArray>(edges.data(), inputs.size()));
  for (size_t i = 0; i < param_grads_.size(); ++i) {
    for (const auto& [node, p] : t.params)
      if (p.id() == param_grads_[i].first.id()) values[static_cast<size_t>(node)] = edges[inputs.size() + i];
  }
  // The replay must not move BatchNorm's running statistics a second time.
  for (const auto& [node, p] : t.params)
    if (p.is_aux()) values[static_cast<size_t>(node)] = values[static_cast<size_t>(node)].copy();
  std::vector<NDArray> outputs;
  {
    autograd::Record record(is_train);
    outputs = eval_graph(t.graph, values);
  }
  std::vector<NDArray> per_edge(edges.size());
  std::vector<NDArray> grads = autograd::detail::partial_grads(outputs, out_grads, variables);
  for (size_t i = 0; i < where.size(); ++i) per_edge[where[i]] = grads[i];
  return per_edge;
}


std::string TrainProgram::Memory::to_string() const {
  constexpr double kMiB = 1024.0 * 1024.0;
  return fmt::format(
      "forward arena {:.1f} MiB, backward arena {:.1f} MiB beyond the block (shared: {:.1f} MiB), {} saved values "
      "{:.1f} MiB ({:.1f} MiB in the per-call block backward reuses)",
      static_cast<double>(forward_arena) / kMiB, static_cast<double>(backward_arena) / kMiB,
      static_cast<double>(std::max(forward_arena, backward_arena)) / kMiB, num_saved, static_cast<double>(saved) / kMiB,
      static_cast<double>(block) / kMiB);
}

}  // namespace kiln
