#include "frontend/cached_op.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "frontend/amp.h"
#include "frontend/autograd.h"
#include "frontend/graph_eval.h"
#include "frontend/nn/block.h"
#include "ir/amp.h"
#include "ir/decompose.h"
#include "passes/fuse_elementwise.h"
#include "passes/pass.h"
#include "runtime/device_backend.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

bool log_retraces() {
  static const bool on = [] {
    const char* env = std::getenv("KILN_LOG_RETRACE");
    return env != nullptr && *env != '\0' && std::string_view(env) != "0";
  }();
  return on;
}

// KILN_HYBRID_TRAIN=eager evaluates hybridized blocks op by op while
// recording (for comparing against the compiled training step).
bool compiled_training_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("KILN_HYBRID_TRAIN");
    return env == nullptr || std::string_view(env) != "eager";
  }();
  return on;
}

// "HybridNet (predict, f32[1,512] on cuda(0))": a cache entry in messages.
template <typename Key>
std::string entry_label(nn::Block& block, const Key& key) {
  std::string types;
  for (const TensorType& t : key.inputs)
    types += fmt::format("{}{}{}", types.empty() ? "" : ", ", dtype_name(t.dtype), t.shape);
  return fmt::format("{} ({}, {} on {})", block.display_name(), key.train ? "train" : "predict", types, key.device);
}

std::string input_name(size_t i, size_t n) { return n == 1 ? "data" : fmt::format("data{}", i); }

// Node ids change when a pass rebuilds the graph; names do not.
void remap(trace::TracedGraph& t, const ir::Graph& before) {
  auto id_of = [&](ir::NodeId old) {
    const std::string& name = before.node(old).name;
    auto found = t.graph.find(name);
    KILN_CHECK(found.has_value(), InternalError, "hybridize: a pass dropped the graph's leaf node '{}'", name);
    return *found;
  };
  for (ir::NodeId& id : t.inputs) id = id_of(id);
  for (auto& [id, _] : t.params) id = id_of(id);
  for (auto& [id, _] : t.consts) id = id_of(id);
}

// KILN_DUMP_GRAPHS=dir: each trace gets its own folder, "dir/<block>-<mode>-<n>".
std::string dump_subdir(const std::string& dir, const std::string& what, bool train_mode) {
  static std::atomic<int> next{0};
  std::string name;
  for (char c : what) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return fmt::format("{}/{}-{}-{}", dir, name, train_mode ? "train" : "predict", next.fetch_add(1));
}

// The ops of `g` to run as their decompositions (ir/decompose.h) on `device`:
// those its backend has no kernel for, and those KILN_DECOMPOSE names.
std::vector<OpId> ops_to_decompose(const ir::Graph& g, Device device) {
  std::vector<OpId> ops;
  for (const ir::Node& n : g.nodes()) {
    if (!n.is_op() || decomposition(n.op) == nullptr || std::find(ops.begin(), ops.end(), n.op) != ops.end()) continue;
    if (decomposition_forced(n.op) || !has_kernel(n.op, device.kind)) ops.push_back(n.op);
  }
  return ops;
}

}  // namespace

// The optimization pipeline every traced graph goes through before it runs.
// KILN_DUMP_GRAPHS=dir writes the graph after each pass; KILN_PIPELINE=passes
// replaces the pipeline (to measure what a pass buys; "" runs none).
// Under mixed precision, amp-cast runs after the folds and fusions.
constexpr std::string_view kPipeline =
    "eliminate-common-expr,fold-constants,simplify-algebra,fold-batch-norm,fuse-conv-activation,eliminate-dead-code";
constexpr std::string_view kAmpPipeline =
    "eliminate-common-expr,fold-constants,simplify-algebra,fold-batch-norm,fuse-conv-activation,amp-cast,"
    "eliminate-dead-code";

std::string_view pipeline(bool amp) {
  static const char* env = std::getenv("KILN_PIPELINE");
  if (env != nullptr) return env;
  return amp ? kAmpPipeline : kPipeline;
}

// Then, for the graph the inference executor runs only: channels-last
// (16-bit convolutions on NHWC data) where the device's backend prefers that
// layout for the graph's 16-bit types (DeviceBackend::prefers_channels_last:
// CPUs with native 16-bit kernels; KILN_CHANNELS_LAST=0 leaves it out), and
// fusions, whose nodes have no gradient (autograd differentiates the graph above, and TrainProgram
// fuses its forward and backward graphs after the split). Fusions of layers
// with their activations (fuse-conv-activation) go before fuse-elementwise.
// KILN_FUSE=0 leaves fusion out (for measuring); so does a graph on a GPU
// without NVRTC-generated fused kernels (passes::fuse_elementwise_on).
// Without `graph` (the pipeline as `kiln inspect` shows it), channels-last
// is listed where the backend prefers it for bfloat16.
std::string executor_pipeline(Device device, const ir::Graph* graph = nullptr) {
  static const bool enabled = [] {
    const char* env = std::getenv("KILN_CHANNELS_LAST");
    return env == nullptr || std::string_view(env) != "0";
  }();
  DeviceBackend* backend = find_device_backend(device.kind);
  bool channels_last = enabled && backend != nullptr && (graph || backend->prefers_channels_last(DType::kBfloat16));
  for (size_t i = 0; channels_last && graph && i < graph->size(); ++i) {
    const ir::Node& n = graph->node(static_cast<ir::NodeId>(i));
    if (!n.is_op() || (n.op != OpId::kConvolution && n.op != OpId::kConvAct)) continue;
    const DType t = graph->type(n.inputs[0]).dtype;
    channels_last = !is_16bit_float(t) || backend->prefers_channels_last(t);
  }
  std::string p = channels_last ? "channels-last," : "";
  if (passes::fuse_elementwise_on(device)) p += "fuse-elementwise,";
  return p.empty() ? p : p + "eliminate-dead-code";
}

std::string inference_pipeline(Device device) {
  std::string p(pipeline(false)), fusions(executor_pipeline(device));
  if (p.empty() || fusions.empty()) return p + fusions;
  return p + "," + fusions;
}

std::string CachedOp::optimize(trace::TracedGraph& traced, bool train_mode, std::optional<DType> amp,
                               const std::string& what, std::string_view pipeline_text) {
  passes::PassContext ctx;
  ctx.options.train_mode = train_mode;
  ctx.options.amp = amp;
  if (!ctx.options.dump_dir.empty()) ctx.options.dump_dir = dump_subdir(ctx.options.dump_dir, what, train_mode);
  // Ops the device cannot run are decomposed first, whatever the pipeline.
  ctx.options.decompose = ops_to_decompose(traced.graph, traced.device);
  std::string text(pipeline_text);
  if (!ctx.options.decompose.empty()) text = text.empty() ? "decompose" : "decompose," + text;
  ir::Graph before = traced.graph;
  try {
    traced.graph = passes::run_pipeline(before, text, ctx);
  } catch (Error& e) {
    e.add_context(fmt::format("{}: optimizing the traced graph", what));
    throw;
  }
  remap(traced, before);
  return ctx.report();
}

std::optional<TrainProgram::Memory> CachedOp::train_memory() const {
  std::lock_guard lock(mutex_);
  if (!last_train_) return std::nullopt;
  return last_train_->memory();
}

std::string CachedOp::pass_report() const {
  std::lock_guard lock(mutex_);
  return pass_report_;
}

CachedOp::CachedOp(int max_entries, std::optional<DType> amp) : max_entries_(std::max(1, max_entries)), amp_(amp) {}

int64_t CachedOp::num_traces() const {
  std::lock_guard lock(mutex_);
  return num_traces_;
}

std::vector<std::string> CachedOp::retrace_log() const {
  std::lock_guard lock(mutex_);
  return retrace_log_;
}

std::shared_ptr<const trace::TracedGraph> CachedOp::last_graph() const {
  std::lock_guard lock(mutex_);
  return entries_.empty() ? nullptr : entries_.front()->traced;
}

std::shared_ptr<const trace::TracedGraph> CachedOp::graph_for_export() const {
  std::lock_guard lock(mutex_);
  for (const auto& e : entries_)
    if (!e->key.train) return e->raw;
  return entries_.empty() ? nullptr : entries_.front()->raw;
}

std::string CachedOp::explain(const Key& before, const Key& after) {
  std::vector<std::string> changes;
  if (before.inputs.size() != after.inputs.size())
    changes.push_back(fmt::format("{} inputs -> {}", before.inputs.size(), after.inputs.size()));
  for (size_t i = 0; i < std::min(before.inputs.size(), after.inputs.size()); ++i) {
    const TensorType &a = before.inputs[i], &b = after.inputs[i];
    if (a.shape != b.shape) changes.push_back(fmt::format("input {} shape {} -> {}", i, a.shape, b.shape));
    if (a.dtype != b.dtype)
      changes.push_back(fmt::format("input {} dtype {} -> {}", i, dtype_name(a.dtype), dtype_name(b.dtype)));
  }
  if (before.device != after.device) changes.push_back(fmt::format("device {} -> {}", before.device, after.device));
  if (before.train != after.train)
    changes.push_back(fmt::format("mode {} -> {}", before.train ? "train" : "predict", after.train ? "train" : "predict"));
  if (before.amp != after.amp)
    changes.push_back(fmt::format("mixed precision {} -> {}", before.amp ? dtype_name(*before.amp) : "off",
                                  after.amp ? dtype_name(*after.amp) : "off"));
  return fmt::format("{}", fmt::join(changes, ", "));
}

bool CachedOp::Key::matches(std::span<const NDArray> in, bool is_train, std::optional<DType> with_amp) const {
  if (is_train != train || with_amp != amp || in.size() != inputs.size()) return false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].is_none() || in[i].device() != device || in[i].shape() != inputs[i].shape ||
        in[i].dtype() != inputs[i].dtype)
      return false;
  }
  return true;
}

std::shared_ptr<const CachedOp::Entry> CachedOp::lookup(nn::Block& block, std::span<const NDArray> inputs) {
  const bool train = autograd::is_training();
  const std::optional<DType> amp = amp_ ? amp_ : amp::active();
  {
    // The common case: the same signature as the last call, found without
    // building a Key or the block's name (no allocation).
    std::lock_guard lock(mutex_);
    if (!entries_.empty() && entries_.front()->key.matches(inputs, train, amp)) return entries_.front();
  }
  const std::string what = block.display_name();
  KILN_CHECK(!inputs.empty(), ValueError, "{}: a hybridized block needs at least one input", what);
  Key key;
  key.device = inputs[0].device();
  key.train = train;
  key.amp = amp;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const NDArray& x = inputs[i];
    KILN_CHECK(!x.is_none(), ValueError, "{}: input {} is an empty (none) NDArray", what, i);
    KILN_CHECK(x.device() == key.device, DeviceError, "{}: input 0 is on {} but input {} is on {}", what, key.device,
               i, x.device());
    key.inputs.push_back({x.shape(), x.dtype()});
  }

  std::lock_guard lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if ((*it)->key == key) {
      if (it != entries_.begin()) entries_.splice(entries_.begin(), entries_, it);
      return entries_.front();
    }
  }

  // Miss: trace forward on symbolic inputs.
  auto traced = std::make_shared<trace::TracedGraph>(trace_block(block, key.inputs, key.device, what));
  auto raw = std::make_shared<const trace::TracedGraph>(*traced);
  pass_report_ = optimize(*traced, key.train, key.amp, what, pipeline(key.amp.has_value()));
  if (num_traces_ > 0 && !entries_.empty()) {
    std::string line = fmt::format("re-traced {}: {}", what, explain(entries_.front()->key, key));
    if (log_retraces()) std::fprintf(stderr, "kiln: %s\n", line.c_str());
    retrace_log_.push_back(std::move(line));
  }
  ++num_traces_;
  auto entry = std::make_shared<Entry>();
  entry->key = std::move(key);
  entry->traced = std::move(traced);
  entry->raw = std::move(raw);
  entry->compilable = GraphExecutor::supports(entry->traced->graph);
  entries_.push_front(entry);
  while (static_cast<int>(entries_.size()) > max_entries_) entries_.pop_back();
  return entry;
}

std::vector<NDArray> CachedOp::call(nn::Block& block, std::span<const NDArray> inputs) {
  std::shared_ptr<const Entry> entry = lookup(block, inputs);
  const trace::TracedGraph& t = *entry->traced;
  if (!autograd::is_recording() && entry->compilable) {
    std::call_once(entry->compile_once, [&] {
      auto graph = std::make_shared<trace::TracedGraph>(t);
      std::string report =
          optimize(*graph, entry->key.train, entry->key.amp, block.display_name(),
                   executor_pipeline(t.device, &graph->graph));
      entry->executor = std::make_unique<GraphExecutor>(std::move(graph));
      entry->executor->set_label(entry_label(block, entry->key));
      std::lock_guard lock(mutex_);
      pass_report_ += report;
    });
    return entry->executor->run(inputs, entry->key.train);
  }
  if (autograd::is_recording() && compiled_training_enabled()) {
    std::vector<bool> needs(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) needs[i] = inputs[i].requires_grad();
    std::shared_ptr<const TrainProgram> program;
    {
      std::lock_guard lock(entry->train_mutex);
      auto it = entry->train.find(needs);
      if (it == entry->train.end())
        it = entry->train
                 .emplace(needs, TrainProgram::compile(entry->traced, needs, entry->key.train,
                                                       entry_label(block, entry->key) + " training step"))
                 .first;
      program = it->second;
    }
    if (program) {
      std::lock_guard lock(mutex_);
      last_train_ = program;
    }
    if (program) return program->call(inputs, entry->key.train);
  }
  return eval_graph(t.graph, bind_values(t, inputs));
}

trace::TracedGraph trace_block(nn::Block& block, std::span<const TensorType> types, Device device,
                               const std::string& what) {
  std::unordered_map<const void*, std::string> names;
  for (const auto& [name, p] : block.collect_params()) names.emplace(p.id(), name);
  trace::Tracer tracer(what, device, std::move(names));
  std::vector<NDArray> sym;
  for (size_t i = 0; i < types.size(); ++i) sym.push_back(tracer.add_input(input_name(i, types.size()), types[i]));
  std::vector<NDArray> outs = block.forward(std::span<const NDArray>(sym));
  return tracer.finish(outs);
}

}  // namespace kiln
