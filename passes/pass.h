// Graph passes: pure functions from a Graph to a Graph, registered in one
// list (passes/pass_list.def) and run by name as a text pipeline.
//
//   passes::PassContext ctx;                       // reads KILN_DUMP_GRAPHS
//   ir::Graph out = passes::run_pipeline(g, "eliminate-common-expr,eliminate-dead-code", ctx);
//   std::cout << ctx.report();                     // one line per pass: nodes, removed, bytes, time
//
// A pass never modifies its input graph. It reports what it did in
// `ctx.current()` (a PassStats, including whether it changed the graph);
// run_pass fills the node counts and the time, runs ir::verify after every
// pass that changed the graph (unless options.verify is false) and, when
// options.dump_dir is set, writes the graph after the pass as
// `<dir>/NN-<pass>.txt` (the IR text form) and `<dir>/NN-<pass>.dot`
// (Graphviz), each written to a temporary file and renamed into place, so a
// reader never sees half a file. NN counts passes run with this context;
// `00-input` is the graph the first pipeline started from.
//
// Thread safety: a PassContext belongs to one thread; passes keep no global
// state, so different contexts may run passes concurrently.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "passes/memory_plan.h"

namespace kiln::passes {

// What one pass did. Counters a pass does not use stay 0 (or -1 for bytes).
struct PassStats {
  std::string pass;  // the pass's pipeline name ("eliminate-dead-code")
  bool changed = false;
  int64_t nodes_before = 0, nodes_after = 0;  // all nodes, filled by run_pass
  int64_t ops_before = 0, ops_after = 0;      // op nodes, filled by run_pass
  int64_t removed = 0;                        // nodes dropped (eliminate-dead-code)
  int64_t merged = 0;                         // nodes replaced by an equal earlier node (eliminate-common-expr)
  int64_t fused = 0;                          // nodes absorbed into fused nodes (fuse-elementwise)
  int64_t rewritten = 0;  // nodes replaced or retyped (simplify-algebra, fold-constants, infer-shape)
  int64_t added = 0;      // nodes added (gradient)
  int64_t arena_bytes = -1, naive_bytes = -1, inplace_reuses = -1;  // plan-memory
  double seconds = 0;                                               // filled by run_pass
  std::string to_string() const;                                    // one line
};

// eliminate-dead-code
struct DeadCodeOptions {
  // Also drop input/param/aux nodes that no kept op reads and that are not
  // graph outputs. Off by default: they are the graph's calling interface.
  bool remove_unused_inputs = false;
};

// gradient (passes/gradient.h)
struct GradientOptions {
  // Names of the input/param/aux nodes that need a gradient, in the order the
  // gradients are returned. Empty: every param node, in graph order.
  std::vector<std::string> wrt;
};

// infer-shape (passes/infer_shape.h)
struct InferShapeOptions {
  // New types of input/param/aux nodes, by name; nodes not listed keep theirs.
  std::unordered_map<std::string, TensorType> input_types;
};

struct PassOptions {
  DeadCodeOptions dead_code;
  GradientOptions gradient;
  InferShapeOptions infer_shape;
  // The mode the graph will run in (fold-batch-norm folds only in predict mode).
  bool train_mode = false;
  // amp-cast (passes/amp_cast.h): the 16-bit dtype of the mixed-precision
  // policy; unset: no mixed precision.
  std::optional<DType> amp;
  // decompose (passes/decompose.h): the ops to replace by their
  // decompositions (ir/decompose.h).
  std::vector<OpId> decompose;
  bool verify = true;    // ir::verify after each pass that changed the graph
  std::string dump_dir;  // empty: no dumps
};

struct PassInfo;

class PassContext {
 public:
  // options.dump_dir comes from the KILN_DUMP_GRAPHS environment variable.
  PassContext();
  // Uses `options` as given (the environment is not read).
  explicit PassContext(PassOptions options);

  PassOptions options;
  std::vector<PassStats> stats;  // one per pass run, in order
  // Set by plan-memory: the plan of the graph it ran on.
  std::optional<MemoryPlan> memory_plan;

  // The statistics of the running pass. A pass called directly (not through
  // run_pass) gets an entry named "?" (the last one, if the last is one).
  PassStats& current();
  // A table of every pass run: name, nodes before -> after, counters, time.
  std::string report() const;

 private:
  friend ir::Graph run_pass(const PassInfo&, const ir::Graph&, PassContext&);
  int open_ = -1;  // index in `stats` of the pass run_pass is running, or -1
  int dumps_ = 0;  // files written so far (for NN)
};

using PassFn = ir::Graph (*)(const ir::Graph& g, PassContext& ctx);

struct PassInfo {
  std::string_view name;  // pipeline name
  PassFn fn;
};

// Every registered pass, sorted by name.
std::span<const PassInfo> all_passes();
// nullptr if no pass has that name.
const PassInfo* find_pass(std::string_view name);

// Splits "a,b, c" into passes (spaces around names are ignored, empty names
// are not allowed). Throws ValueError naming the unknown pass, its position
// and the known passes.
std::vector<const PassInfo*> parse_pipeline(std::string_view pipeline);

// Runs the named pass on `g`: records its statistics, verifies and dumps as
// described above. Throws ValueError for an unknown name.
ir::Graph run_pass(std::string_view name, const ir::Graph& g, PassContext& ctx);
// The same for any pass, registered or not (tests, passes outside passes/).
ir::Graph run_pass(const PassInfo& pass, const ir::Graph& g, PassContext& ctx);

// Runs every pass of `pipeline` in order. An empty pipeline returns `g`.
ir::Graph run_pipeline(const ir::Graph& g, std::string_view pipeline, PassContext& ctx);

}  // namespace kiln::passes
