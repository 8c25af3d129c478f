// MXNet's symbol JSON (the `*-symbol.json` of an export), read into a
// validated, untyped Symbol, typed into an ir::Graph, and written back.
//
//   mxnet::Symbol s = mxnet::load_symbol_json("lenet-symbol.json");
//   mxnet::TypeMap types{{"data", {Shape{1, 1, 28, 28}, DType::kFloat32}}};   // params: from the
//   ir::Graph g = mxnet::to_graph(s, types, {"data"});                          // map, or deduced
//   std::string json = mxnet::to_json(g);      // what MXNet's Symbol.save writes (canonical op names)
//
// Reading (/work/shared/research/mxnet-formats.md §1) accepts every layout
// MXNet's own reader does: node attributes under `attrs`, `attr` or legacy
// `param` (merged), 2- or 3-element input entries, optional `node_row_ptr`
// and top-level `attrs` (mxnet_version 0.8.0 when absent). Hidden keys
// (`__shape__`, `__dtype__`, `__init__`, `__lr_mult__`, legacy `lr_mult`,
// `weight_lr_mult`, `ctx_group`, ...) are kept apart from the op attributes
// and never fail; legacy ones are rewritten as MXNet's loader does (`lr_mult`
// -> `__lr_mult__`; an op's `weight_lr_mult` -> `__lr_mult__` on its
// `weight` input when Kiln knows the op's input names, else dropped). Files
// older than 0.9 get the aux variables they left out (`bn0_moving_mean`).
//
// Op names resolve through find_op (aliases such as `_Plus`, `flatten`), plus
// a few legacy ops that to_graph lowers to Kiln ops: SoftmaxActivation ->
// softmax, and for inference the loss outputs of Module checkpoints
// (SoftmaxOutput -> softmax, Linear/MAERegressionOutput -> _copy,
// LogisticRegressionOutput -> sigmoid), whose label variables are left out of
// the graph. A node may list more outputs in node_row_ptr than Kiln's op has
// (oneDNN builds give Pooling 2) as long as nothing reads the extra ones.
//
// Variables (`"op": "null"`) are the graph's inputs, params and aux states:
// a variable is aux when an op mutates it (OpDef::mutate_inputs, BatchNorm's
// moving_mean/var); which of the others are inputs is the caller's choice
// (to_graph's input_names).
//
// Errors: ValueError naming the node (index, name and op) for malformed or
// inconsistent files (an input that is not an earlier node, a wrong input
// count, an output index a node does not have); NotSupported naming the op
// and node for ops Kiln lacks; ValueError with the byte offset for invalid
// JSON; IOError for unreadable or oversized files. Nothing is allocated
// from counts in the file before they are checked against its size.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace kiln::mxnet {

// Files larger than this are refused (real exports are well under 1 MiB).
inline constexpr size_t kMaxSymbolJsonBytes = size_t{64} << 20;

// The MXNET_VERSION written into exported files (1.9.1).
inline constexpr int kExportMxnetVersion = 10901;

struct SymbolEntry {
  int32_t node = -1;
  int32_t index = 0;
  int32_t version = 0;  // MXNet's variable version (1+ on mutated inputs); ignored by Kiln
  bool operator==(const SymbolEntry&) const = default;
};

struct SymbolNode {
  std::string op;              // as written: "null" for a variable, aliases kept
  const OpDef* def = nullptr;  // the Kiln op; null for variables and legacy ops (to_graph lowers those)
  std::string name;
  AttrMap attrs;   // the op's attributes (attrs, attr and param merged), hidden keys removed
  AttrMap hidden;  // "__shape__", "__dtype__", "__init__", "__lr_mult__", ... (always "__key__")
  std::vector<SymbolEntry> inputs;
  int num_outputs = -1;   // from node_row_ptr; -1 when the file has none (variables: 1)
  bool is_aux = false;    // a variable that some op mutates
  bool is_label = false;  // a variable only loss outputs read, as their label (to_graph skips it)
  bool is_variable() const { return op == "null"; }
};

// An untyped MXNet graph, validated: every input entry refers to an earlier
// node (and to an output it has, when node_row_ptr says), every op is known
// and has a plausible input count.
struct Symbol {
  std::vector<SymbolNode> nodes;  // topological order
  std::vector<SymbolEntry> heads;
  int mxnet_version = 800;  // the writer's MXNET_VERSION (major*10000 + minor*100 + patch)

  std::optional<int32_t> find(std::string_view name) const;
  // Variable names in node order: all of them / those no op mutates / aux states.
  std::vector<std::string> list_variables() const;
  std::vector<std::string> list_arguments() const;
  std::vector<std::string> list_auxiliary_states() const;
};

Symbol parse_symbol_json(std::string_view text, std::string_view source = "symbol json");
// Reads and parses `path` (IOError when missing, unreadable or over kMaxSymbolJsonBytes).
Symbol load_symbol_json(const std::string& path);

// Types of variables by name.
using TypeMap = std::map<std::string, TensorType, std::less<>>;

// Builds the typed graph. Variables named in `input_names` become inputs
// (ValueError when one is not a variable of the symbol, or has no type in
// `types`); the others become params or aux states. A param's type comes
// from `types`, else from a complete `__shape__` (dtype from `__dtype__`,
// else float32), else is deduced from its consumer and that consumer's data
// input (Convolution, FullyConnected, BatchNorm, prelu's gamma). Node names
// are the file's. Shape and dtype errors are the graph's (ShapeError naming
// the node and its input types: "node 'conv0': Convolution(f32[2,3], ...)");
// other errors name the node's index, name and op.
ir::Graph to_graph(const Symbol& symbol, const TypeMap& types, std::span<const std::string> input_names);

// What the symbol alone tells of variable `node`'s shape (0 = unknown dim):
// a `__shape__` hint, else the shape its first consumer's attributes imply
// (Convolution weight [num_filter, 0, kh, kw], FullyConnected weight
// [num_hidden, 0], BatchNorm and prelu [0], biases). nullopt when neither
// tells (data inputs, or a variable only unknown ops read).
std::optional<Shape> variable_shape_hint(const Symbol& symbol, int32_t node);

// MXNet's symbol JSON of `g`: canonical op names, the non-default attributes
// as strings (Kiln-only ones such as Dropout's seed/offset left out), params
// and aux states with `__shape__`/`__dtype__`, inputs as [node, output, version]
// (version 1 on inputs an op mutates, as MXNet writes), node_row_ptr from
// Kiln's output counts, and attrs {"mxnet_version": ["int", 10901]}; laid
// out as dmlc::JSONWriter does (key order, ", " + newline separators, short
// arrays on one line, no final newline), so text diffs against MXNet's own
// files. Const nodes are written as variables like params (their values live
// outside the graph: HybridBlock::export_model writes them as arg:NAME).
// NotSupported for a Pooling with dilate above 1 (MXNet's Pooling has no
// dilate; an all-1s dilate is left out).
std::string to_json(const ir::Graph& g);
// The symbol written back as read: a file MXNet >= 1.0 wrote comes back byte
// for byte; older files come back upgraded (canonical op names, aux variables
// added, hidden keys renamed) with mxnet_version 10901.
std::string to_json(const Symbol& s);

}  // namespace kiln::mxnet
