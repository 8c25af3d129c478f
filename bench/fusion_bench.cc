// fuse-elementwise benchmarks.
//
// fusion_chain: y = relu(sigmoid(x * 2 + z) * x) on 16M float32 values (five
// ops, two inputs, one output) run by the graph executor unfused (five
// kernels, 12 array passes) and fused (one loop: 3 array passes), and the
// fused program in the interpreter (KILN_JIT=0's path) for comparison; GB/s
// count the bytes the fused loop must move (x, z in; y out) and are set
// against this machine's memcpy bandwidth (same threads, read + write).
//
// fusion_transcendental: the same for tanh(log(exp(x) + 1) * z), whose exp,
// log and tanh are inline polynomials in the compiled loop.
//
// fusion_resnet18: what the pass does to ResNet-18's graphs (batch 256): the
// inference graph after CachedOp's other passes, and the training step's
// forward and backward graphs as TrainProgram builds them: nodes absorbed,
// and the bytes of intermediate values no longer written.
//
// fusion_resnet18_infer_ab: ResNet-18 inference with and without the pass,
// in one process, alternately.
//
// Effect on whole models: run `kiln bench mlp resnet18_hybridized` with and
// without KILN_FUSE=0 (docs/perf-log.md, "Elementwise fusion").
#include <omp.h>

#include <cstring>
#include <string>

#include "backends/cpu/fused.h"
#include "bench/bench.h"
#include "frontend/autograd.h"
#include "frontend/cached_op.h"
#include "frontend/graph_executor.h"
#include "frontend/nd.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/fused.h"
#include "ir/ops/nn.h"
#include "models/zoo.h"
#include "passes/gradient.h"
#include "passes/pass.h"
#include "passes/split_gradient.h"
#include "runtime/engine.h"

namespace kiln::bench {

namespace {

constexpr int64_t kN = 16 << 20;

// The chain on inputs x, z: relu(sigmoid(2x + z) * x), or with
// `transcendental` tanh(log(exp(x) + 1) * z).
std::shared_ptr<trace::TracedGraph> chain_graph(bool transcendental) {
  auto t = std::make_shared<trace::TracedGraph>();
  ir::Graph& g = t->graph;
  ir::Entry x = g.add_input("x", {Shape{kN}, DType::kFloat32});
  ir::Entry z = g.add_input("z", {Shape{kN}, DType::kFloat32});
  auto op = [&](OpId id, std::vector<ir::Entry> in, OpAttrs attrs = {}) { return g.add_op(id, attrs, in)[0]; };
  auto scalar = [](double v) { return OpAttrs::make(ScalarAttrs{.scalar = v}); };
  ir::Entry y;
  if (transcendental) {
    ir::Entry a = op(OpId::kExp, {x});
    ir::Entry b = op(OpId::kPlusScalar, {a}, scalar(1));
    ir::Entry c = op(OpId::kLog, {b});
    ir::Entry d = op(OpId::kElemwiseMul, {c, z});
    y = op(OpId::kTanh, {d});
  } else {
    ir::Entry a = op(OpId::kMulScalar, {x}, scalar(2));
    ir::Entry b = op(OpId::kElemwiseAdd, {a, z});
    ir::Entry c = op(OpId::kSigmoid, {b});
    ir::Entry d = op(OpId::kElemwiseMul, {c, x});
    y = op(OpId::kRelu, {d});
  }
  g.set_outputs({y});
  t->device = Device::cpu(0);
  t->inputs = {x.node, z.node};
  return t;
}

double run_seconds(GraphExecutor& exec, std::span<const NDArray> in) {
  engine::wait_all();
  auto start = Clock::now();
  exec.run(in, false)[0].wait_to_read();
  return seconds_since(start);
}

std::vector<Figure> chain_figures(const Options& options, bool transcendental, const std::string& prefix) {
  const int threads = engine::get().cpu_threads(Device::cpu(0));
  NDArray x = nd::random::uniform({kN}, -2, 2), z = nd::random::uniform({kN}, -2, 2);
  x.wait_to_read();
  z.wait_to_read();
  const NDArray in[] = {x, z};

  auto unfused = chain_graph(transcendental);
  GraphExecutor plain(unfused);
  auto fused = std::make_shared<trace::TracedGraph>(*unfused);
  passes::PassContext ctx(passes::PassOptions{});
  fused->graph = passes::run_pass("fuse-elementwise", unfused->graph, ctx);
  GraphExecutor one_loop(fused);  // compiles the loop (JIT) here
  run_seconds(plain, in);
  run_seconds(one_loop, in);
  double t_unfused = best_of(options.repeat, [&] { return run_seconds(plain, in); });
  double t_fused = best_of(options.repeat, [&] { return run_seconds(one_loop, in); });

  // The interpreter on the same program and buffers.
  const ir::Node* node = nullptr;
  for (const ir::Node& n : fused->graph.nodes())
    if (n.is_op() && n.op == OpId::kFusedElemwise) node = &n;
  KILN_CHECK(node != nullptr, InternalError, "fusion_chain: the chain did not fuse");
  std::vector<float> out(static_cast<size_t>(kN));
  void* bufs[] = {x.data(), z.data(), out.data()};
  const Shape shapes[] = {Shape{kN}, Shape{kN}};
  const FusedProgramRef& ref = node->attrs.as<FusedElemwiseAttrs>().program;
  auto interp = [&] {
    auto start = Clock::now();
    cpu::fused_run(ref, nullptr, bufs, shapes, Shape{kN}, threads);
    return seconds_since(start);
  };
  interp();
  double t_interp = best_of(options.repeat, interp);

  // memcpy of one array, split over the same threads.
  std::vector<float> dst(static_cast<size_t>(kN));
  const auto* src = static_cast<const char*>(x.data());
  auto copy = [&] {
    auto start = Clock::now();
    const int64_t bytes = kN * 4;
#pragma omp parallel for num_threads(threads)
    for (int t = 0; t < threads; ++t) {
      int64_t b = bytes * t / threads, e = bytes * (t + 1) / threads;
      std::memcpy(reinterpret_cast<char*>(dst.data()) + b, src + b, static_cast<size_t>(e - b));
    }
    return seconds_since(start);
  };
  copy();
  double t_copy = best_of(options.repeat, copy);
  const double copy_gbs = 2.0 * kN * 4 / t_copy / 1e9;
  const double fused_gbs = 3.0 * kN * 4 / t_fused / 1e9;
  return {{prefix + "_unfused_ms", t_unfused * 1e3, "ms"},
          {prefix + "_fused_ms", t_fused * 1e3, "ms"},
          {prefix + "_interp_ms", t_interp * 1e3, "ms"},
          {prefix + "_speedup", t_unfused / t_fused, "x"},
          {prefix + "_fused_gbs", fused_gbs, "GB/s"},
          {"memcpy_gbs", copy_gbs, "GB/s"},
          {prefix + "_fused_memcpy_pct", 100 * fused_gbs / copy_gbs, "%"},
          {prefix + "_jit", cpu::fused_jit_enabled() ? 1.0 : 0.0, "bool"}};
}

std::vector<Figure> bench_chain(const Options& options) { return chain_figures(options, false, "fusion_chain"); }

std::vector<Figure> bench_transcendental(const Options& options) {
  return chain_figures(options, true, "fusion_transcendental");
}

int64_t op_output_bytes(const ir::Graph& g) {
  int64_t bytes = 0;
  for (const ir::Node& n : g.nodes())
    if (n.is_op())
      for (const TensorType& t : n.types) bytes += t.shape.size() * static_cast<int64_t>(dtype_size(t.dtype));
  return bytes;
}

// The pass on one graph: fused nodes and intermediate MiB no longer written.
std::pair<int64_t, double> fuse_effect(const ir::Graph& g) {
  passes::PassContext ctx(passes::PassOptions{});
  ir::Graph f = passes::run_pipeline(g, "fuse-elementwise,eliminate-dead-code", ctx);
  return {ctx.stats[0].fused, static_cast<double>(op_output_bytes(g) - op_output_bytes(f)) / (1 << 20)};
}

std::vector<Figure> bench_resnet18_pass(const Options&) {
  nd::random::seed(0);
  nn::HybridSequential net = models::make("resnet18", 10);
  net.initialize();
  {
    autograd::PredictMode predict;
    net(nd::random::uniform({1, 1, 28, 28})).wait_to_read();  // deferred shapes
  }
  const TensorType input{Shape{256, 1, 28, 28}, DType::kFloat32};
  // Inference: CachedOp's pipeline in predict mode, then the executor's passes.
  trace::TracedGraph t = trace_block(net, {&input, 1}, Device::cpu(0), "resnet18");
  passes::PassContext ctx(passes::PassOptions{});
  ir::Graph g =
      passes::run_pipeline(t.graph, "eliminate-common-expr,simplify-algebra,fold-batch-norm,eliminate-dead-code", ctx);
  auto [infer_fused, infer_mib] = fuse_effect(g);
  // Training: the train-mode trace's gradient graph, split as TrainProgram does.
  trace::TracedGraph tt = [&] {
    autograd::TrainMode train;
    return trace_block(net, {&input, 1}, Device::cpu(0), "resnet18");
  }();
  std::vector<std::string> wrt, heads;
  for (const auto& [node, p] : tt.params)
    if (!p.is_aux()) wrt.push_back(tt.graph.node(node).name);
  ir::Graph grad = passes::build_gradient_graph(tt.graph, wrt);
  for (size_t i = 0; i < tt.graph.outputs().size(); ++i) heads.push_back(passes::head_grad_name(tt.graph, i));
  passes::SplitGraph split = passes::split_gradient_graph(grad, tt.graph.outputs().size(), heads);
  passes::PassContext bctx(passes::PassOptions{});
  ir::Graph backward = passes::run_pipeline(split.backward, "eliminate-common-expr,eliminate-dead-code", bctx);
  auto [fwd_fused, fwd_mib] = fuse_effect(split.forward);
  auto [bwd_fused, bwd_mib] = fuse_effect(backward);
  return {{"fusion_resnet18_infer_ops", static_cast<double>(g.num_ops()), "ops"},
          {"fusion_resnet18_infer_fused_nodes", static_cast<double>(infer_fused), "nodes"},
          {"fusion_resnet18_infer_mib_saved", infer_mib, "MiB"},
          {"fusion_resnet18_train_ops", static_cast<double>(split.forward.num_ops() + backward.num_ops()), "ops"},
          {"fusion_resnet18_train_fused_nodes", static_cast<double>(fwd_fused + bwd_fused), "nodes"},
          {"fusion_resnet18_train_mib_saved", fwd_mib + bwd_mib, "MiB"}};
}

// `t` with graph `g` (made from t.graph by passes that keep leaf names).
std::shared_ptr<trace::TracedGraph> rebind(const trace::TracedGraph& t, ir::Graph g) {
  auto r = std::make_shared<trace::TracedGraph>();
  auto id = [&](ir::NodeId old) { return *g.find(t.graph.node(old).name); };
  r->device = t.device;
  for (ir::NodeId n : t.inputs) r->inputs.push_back(id(n));
  for (const auto& [n, p] : t.params) r->params.emplace_back(id(n), p);
  for (const auto& [n, a] : t.consts) r->consts.emplace_back(id(n), a);
  r->graph = std::move(g);
  return r;
}

// ResNet-18 inference (batch 32) through two executors in one process, the
// graph with and without fuse-elementwise, timed alternately so that the
// machine's load affects both alike.
std::vector<Figure> bench_resnet18_infer_ab(const Options& options) {
  nd::random::seed(0);
  nn::HybridSequential net = models::make("resnet18", 10);
  net.initialize();
  autograd::PredictMode predict;
  net(nd::random::uniform({1, 1, 28, 28})).wait_to_read();
  const TensorType input{Shape{32, 1, 28, 28}, DType::kFloat32};
  trace::TracedGraph t = trace_block(net, {&input, 1}, Device::cpu(0), "resnet18");
  passes::PassContext ctx(passes::PassOptions{});
  ir::Graph g =
      passes::run_pipeline(t.graph, "eliminate-common-expr,simplify-algebra,fold-batch-norm,eliminate-dead-code", ctx);
  ir::Graph f = passes::run_pipeline(g, "fuse-elementwise,eliminate-dead-code", ctx);
  GraphExecutor plain(rebind(t, g)), fused(rebind(t, std::move(f)));
  const NDArray x[] = {nd::random::uniform({32, 1, 28, 28})};
  x[0].wait_to_read();
  run_seconds(plain, x);
  run_seconds(fused, x);
  double best[2] = {1e30, 1e30};
  for (int r = 0; r < std::max(options.repeat, 3); ++r) {
    best[0] = std::min(best[0], run_seconds(plain, x));
    best[1] = std::min(best[1], run_seconds(fused, x));
  }
  return {{"fusion_resnet18_infer_unfused_ms", best[0] * 1e3, "ms"},
          {"fusion_resnet18_infer_fused_ms", best[1] * 1e3, "ms"},
          {"fusion_resnet18_infer_speedup", best[0] / best[1], "x"}};
}

}  // namespace

void register_fusion_benchmarks() {
  add({"fusion_chain",
       {"fusion_chain_unfused_ms", "fusion_chain_fused_ms", "fusion_chain_interp_ms", "fusion_chain_speedup",
        "fusion_chain_fused_gbs", "memcpy_gbs", "fusion_chain_fused_memcpy_pct", "fusion_chain_jit"},
       &bench_chain});
  add({"fusion_transcendental",
       {"fusion_transcendental_unfused_ms", "fusion_transcendental_fused_ms", "fusion_transcendental_interp_ms",
        "fusion_transcendental_speedup", "fusion_transcendental_fused_gbs", "memcpy_gbs",
        "fusion_transcendental_fused_memcpy_pct", "fusion_transcendental_jit"},
       &bench_transcendental});
  add({"fusion_resnet18",
       {"fusion_resnet18_infer_ops", "fusion_resnet18_infer_fused_nodes", "fusion_resnet18_infer_mib_saved",
        "fusion_resnet18_train_ops", "fusion_resnet18_train_fused_nodes", "fusion_resnet18_train_mib_saved"},
       &bench_resnet18_pass});
  add({"fusion_resnet18_infer_ab",
       {"fusion_resnet18_infer_unfused_ms", "fusion_resnet18_infer_fused_ms", "fusion_resnet18_infer_speedup"},
       &bench_resnet18_infer_ab});
}

}  // namespace kiln::bench
