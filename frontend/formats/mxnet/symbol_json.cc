// Reading MXNet symbol JSON into a Symbol and typing it into an ir::Graph
// (contract: frontend/formats/mxnet/symbol_json.h; writing: frontend/formats/mxnet/symbol_json_write.cc).
#include "frontend/formats/mxnet/symbol_json.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "ir/ops/conv.h"
#include "ir/ops/layer_norm.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"

namespace kiln::mxnet {
using namespace kiln::ir;  // nodes, entries and graphs of the neutral form

namespace {

using nlohmann::json;

// Deeper nesting than this is not a symbol file (real ones nest 5 levels);
// checked before parsing so that no recursion depends on the input.
constexpr int kMaxJsonDepth = 64;

// Ops MXNet files use that Kiln has no OpDef for; to_graph lowers them to
// Kiln ops. The loss outputs of Module checkpoints read a label after their
// data; their forward ignores it, and so does the lowering (inference only:
// the lowered graph's gradient is not the loss op's).
struct LegacyOp {
  std::string_view name;
  int num_inputs;   // as MXNet lists them
  int data_inputs;  // the leading inputs the forward reads
};
constexpr LegacyOp kLegacyOps[] = {{"SoftmaxActivation", 1, 1},
                                   {"SoftmaxOutput", 2, 1},
                                   {"LinearRegressionOutput", 2, 1},
                                   {"MAERegressionOutput", 2, 1},
                                   {"LogisticRegressionOutput", 2, 1}};

const LegacyOp* find_legacy_op(std::string_view name) {
  for (const LegacyOp& op : kLegacyOps)
    if (op.name == name) return &op;
  return nullptr;
}

// Attribute keys MXNet treats as hidden (kHiddenKeys): as `__key__`, bare in
// legacy files, or suffixed to an input name (`weight_lr_mult`).
constexpr std::string_view kHiddenKeys[] = {"ctx_group",       "lr_mult",      "wd_mult",
                                            "force_mirroring", "mirror_stage", "profiler_scope"};

bool is_hidden_key(std::string_view key) {
  if (key.size() > 4 && key.starts_with("__") && key.ends_with("__")) return true;
  for (std::string_view h : kHiddenKeys) {
    if (key == h) return true;
    if (key.size() > h.size() + 1 && key.ends_with(h) && key[key.size() - h.size() - 1] == '_') return true;
  }
  return false;
}

// Legacy hidden keys in MXNet's current form, as its loader rewrites them
// (UpgradeJSON_FixParsing): `lr_mult` becomes `__lr_mult__`; an op's
// `weight_lr_mult` moves to its `weight` input variable as `__lr_mult__`
// (dropped when that input is not a variable).
void normalize_hidden_keys(Symbol& s) {
  for (SymbolNode& n : s.nodes) {
    AttrMap kept;
    for (auto& [k, v] : n.hidden) {
      if (k.starts_with("__")) {
        kept[k] = v;
        continue;
      }
      for (std::string_view h : kHiddenKeys) {
        if (k == h) {
          kept.emplace(fmt::format("__{}__", h), v);
        } else if (k.ends_with(h) && k.size() > h.size() + 1 && n.def != nullptr) {
          std::string_view arg = std::string_view(k).substr(0, k.size() - h.size() - 1);
          auto it = std::ranges::find(n.def->input_names, arg);
          if (it == n.def->input_names.end()) continue;
          auto input = static_cast<size_t>(it - n.def->input_names.begin());
          if (input >= n.inputs.size()) continue;
          SymbolNode& var = s.nodes[static_cast<size_t>(n.inputs[input].node)];
          if (var.is_variable()) var.hidden.emplace(fmt::format("__{}__", h), v);
        }
      }
    }
    n.hidden = std::move(kept);
  }
}

void check_depth(std::string_view text, std::string_view source) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      KILN_CHECK(++depth <= kMaxJsonDepth, ValueError, "{}: JSON nested deeper than {} levels at byte {}", source,
                 kMaxJsonDepth, i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

class NodeError {
 public:
  NodeError(std::string_view source, size_t index, const json& node) : source_(source), index_(index) {
    if (node.is_object()) {
      auto n = node.find("name");
      auto o = node.find("op");
      if (n != node.end() && n->is_string()) name_ = n->get<std::string>();
      if (o != node.end() && o->is_string()) op_ = o->get<std::string>();
    }
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw ValueError(fmt::format("{}: node {} '{}' ({}): {}", source_, index_, name_, op_, what));
  }

 private:
  std::string_view source_;
  size_t index_;
  std::string name_, op_ = "?";
};

std::string attr_value(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number() || v.is_boolean()) return v.dump();  // lenient: MXNet writes strings only
  throw ValueError(fmt::format("attribute value {} is not a string", v.dump().substr(0, 40)));
}

int32_t entry_int(const json& v, const char* what) {
  KILN_CHECK(v.is_number_integer(), ValueError, "{} {} is not an integer", what, v.dump().substr(0, 40));
  auto x = v.get<int64_t>();
  KILN_CHECK(x >= 0 && x <= INT32_MAX, ValueError, "{} {} is out of range", what, x);
  return static_cast<int32_t>(x);
}

SymbolEntry parse_entry(const json& e) {
  KILN_CHECK(e.is_array() && (e.size() == 2 || e.size() == 3), ValueError,
             "an entry must be [node, output] or [node, output, version], got {}", e.dump().substr(0, 60));
  SymbolEntry out{entry_int(e[0], "node id"), entry_int(e[1], "output index"), 0};
  if (e.size() == 3) out.version = entry_int(e[2], "version");
  return out;
}

std::vector<int32_t> parse_int_array(const json& j, const char* key, std::string_view source) {
  KILN_CHECK(j.is_array(), ValueError, "{}: '{}' must be an array", source, key);
  std::vector<int32_t> out;
  out.reserve(j.size());
  for (const json& v : j) {
    try {
      out.push_back(entry_int(v, key));
    } catch (ValueError& e) {
      e.add_context(std::string(source));
      throw;
    }
  }
  return out;
}

int parse_version(const json& attrs) {
  if (!attrs.is_object()) return 800;
  auto it = attrs.find("mxnet_version");
  if (it == attrs.end()) return 800;
  const json& v = *it;
  // ["int", 10901]; tolerate a bare number or string.
  const json& x = v.is_array() && v.size() == 2 ? v[1] : v;
  if (x.is_number_integer()) return static_cast<int>(x.get<int64_t>());
  if (x.is_string()) {
    try {
      return std::stoi(x.get<std::string>());
    } catch (...) {
    }
  }
  return 800;
}

// MXNet < 0.9 stored no aux variables: an op may lack its trailing aux
// inputs, which the loader creates (UpgradeJSON_000800_000900).
constexpr int kAuxStoredSince = 900;

SymbolNode parse_node(const json& j, size_t index, std::string_view source, int version) {
  NodeError err(source, index, j);
  if (!j.is_object()) err.fail("a node must be a JSON object");
  SymbolNode n;
  for (const char* key : {"op", "name"}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) err.fail(fmt::format("'{}' is missing or not a string", key));
  }
  n.op = j["op"].get<std::string>();
  n.name = j["name"].get<std::string>();
  // attrs (>= 1.0), attr (0.9-0.12), param (<= 0.8: merged last, as MXNet does).
  for (const char* key : {"attrs", "attr", "param"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_object()) err.fail(fmt::format("'{}' must be an object of strings", key));
    for (auto& [k, v] : it->items()) {
      std::string value;
      try {
        value = attr_value(v);
      } catch (const ValueError& e) {
        err.fail(fmt::format("attribute '{}': {}", k, e.message()));
      }
      (is_hidden_key(k) ? n.hidden : n.attrs)[k] = std::move(value);
    }
  }
  auto inputs = j.find("inputs");
  if (inputs == j.end() || !inputs->is_array()) err.fail("'inputs' is missing or not an array");
  for (const json& e : *inputs) {
    try {
      n.inputs.push_back(parse_entry(e));
    } catch (const ValueError& e2) {
      err.fail(fmt::format("input {}: {}", n.inputs.size(), e2.message()));
    }
  }
  if (auto sub = j.find("subgraphs"); sub != j.end() && sub->is_array() && !sub->empty()) {
    throw NotSupported(fmt::format("{}: node {} '{}' ({}): subgraphs (control flow ops) are not supported", source,
                                   index, n.name, n.op));
  }
  if (n.is_variable()) {
    if (!n.inputs.empty()) err.fail("a variable (op \"null\") has inputs");
    n.num_outputs = 1;
    return n;
  }
  n.def = find_op(n.op);
  int num_inputs = -1;
  if (n.def != nullptr) {
    num_inputs = n.def->num_inputs;
  } else if (const LegacyOp* legacy = find_legacy_op(n.op)) {
    num_inputs = legacy->num_inputs;
    // A loss output without its label (files saved for inference) is fine.
    if (static_cast<int>(n.inputs.size()) == legacy->data_inputs) num_inputs = legacy->data_inputs;
  } else {
    throw NotSupported(fmt::format("{}: node {} '{}': op '{}' is not supported by Kiln", source, index, n.name, n.op));
  }
  // Only missing aux inputs are added (MXNet adds any missing input; Kiln
  // reports the others as a wrong input count).
  bool synthesized = version < kAuxStoredSince && n.def != nullptr && static_cast<int>(n.inputs.size()) < num_inputs &&
                     n.def->input_names.size() == static_cast<size_t>(num_inputs);
  for (auto k = static_cast<int>(n.inputs.size()); synthesized && k < num_inputs; ++k)
    synthesized = std::ranges::find(n.def->mutate_inputs, k) != n.def->mutate_inputs.end();
  if (num_inputs >= 0 && static_cast<int>(n.inputs.size()) != num_inputs && !synthesized) {
    err.fail(fmt::format("expected {} input(s), got {}", num_inputs, n.inputs.size()));
  }
  return n;
}

// Adds the variables pre-0.9 files left out, named "<node>_<input name>"
// ("bn0_moving_mean"), just before their op; renumbers every entry.
void add_missing_variables(Symbol& s) {
  std::vector<SymbolNode> nodes;
  std::vector<int32_t> new_id(s.nodes.size());
  auto remap = [&](SymbolEntry& e) { e.node = new_id[static_cast<size_t>(e.node)]; };
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    SymbolNode n = std::move(s.nodes[i]);
    for (SymbolEntry& e : n.inputs) remap(e);
    if (n.def != nullptr && n.def->num_inputs > static_cast<int>(n.inputs.size())) {
      for (auto k = static_cast<int>(n.inputs.size()); k < n.def->num_inputs; ++k) {
        SymbolNode v;
        v.op = "null";
        v.name = n.name + "_" + std::string(n.def->input_names[static_cast<size_t>(k)]);
        v.num_outputs = 1;
        n.inputs.push_back({static_cast<int32_t>(nodes.size()), 0, 0});
        nodes.push_back(std::move(v));
      }
    }
    new_id[i] = static_cast<int32_t>(nodes.size());
    nodes.push_back(std::move(n));
  }
  for (SymbolEntry& e : s.heads) remap(e);
  s.nodes = std::move(nodes);
}

const char* plural_s(int n) { return n == 1 ? "" : "s"; }

}  // namespace

std::optional<int32_t> Symbol::find(std::string_view name) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == name) return static_cast<int32_t>(i);
  return std::nullopt;
}

std::vector<std::string> Symbol::list_variables() const {
  std::vector<std::string> out;
  for (const SymbolNode& n : nodes)
    if (n.is_variable()) out.push_back(n.name);
  return out;
}

std::vector<std::string> Symbol::list_arguments() const {
  std::vector<std::string> out;
  for (const SymbolNode& n : nodes)
    if (n.is_variable() && !n.is_aux) out.push_back(n.name);
  return out;
}

std::vector<std::string> Symbol::list_auxiliary_states() const {
  std::vector<std::string> out;
  for (const SymbolNode& n : nodes)
    if (n.is_variable() && n.is_aux) out.push_back(n.name);
  return out;
}

Symbol parse_symbol_json(std::string_view text, std::string_view source) {
  KILN_CHECK(text.size() <= kMaxSymbolJsonBytes, ValueError, "{}: {} bytes is over the {}-byte limit for symbol files",
             source, text.size(), kMaxSymbolJsonBytes);
  check_depth(text, source);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    // e.byte counts the characters read, the offending one included: report its 0-based offset.
    throw ValueError(fmt::format("{}: invalid JSON at byte {}: {}", source, e.byte > 0 ? e.byte - 1 : 0, what));
  } catch (const json::exception& e) {  // a number out of range ("1e999")
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw ValueError(fmt::format("{}: invalid JSON: {}", source, what));
  }
  KILN_CHECK(root.is_object(), ValueError, "{}: the top level must be a JSON object", source);
  for (const char* key : {"nodes", "arg_nodes", "heads"}) {
    KILN_CHECK(root.contains(key), ValueError, "{}: '{}' is missing (not an MXNet symbol file?)", source, key);
  }
  const json& nodes = root["nodes"];
  KILN_CHECK(nodes.is_array(), ValueError, "{}: 'nodes' must be an array", source);
  KILN_CHECK(!nodes.empty(), ValueError, "{}: the graph has no nodes", source);

  Symbol s;
  if (auto a = root.find("attrs"); a != root.end()) s.mxnet_version = parse_version(*a);
  s.nodes.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) s.nodes.push_back(parse_node(nodes[i], i, source, s.mxnet_version));

  // Output counts from node_row_ptr (MXNet's counts, hidden outputs included).
  if (auto rp = root.find("node_row_ptr"); rp != root.end()) {
    std::vector<int32_t> row = parse_int_array(*rp, "node_row_ptr", source);
    KILN_CHECK(row.size() == s.nodes.size() + 1 && row[0] == 0, ValueError,
               "{}: node_row_ptr has {} entries starting at {}; expected {} starting at 0", source, row.size(),
               row.empty() ? -1 : row[0], s.nodes.size() + 1);
    for (size_t i = 0; i < s.nodes.size(); ++i) {
      int32_t count = row[i + 1] - row[i];
      KILN_CHECK(count >= 1, ValueError, "{}: node_row_ptr gives node {} '{}' {} outputs", source, i, s.nodes[i].name,
                 count);
      KILN_CHECK(!s.nodes[i].is_variable() || count == 1, ValueError,
                 "{}: node_row_ptr gives variable {} '{}' {} outputs", source, i, s.nodes[i].name, count);
      s.nodes[i].num_outputs = count;
    }
  }

  auto check_entry = [&](const SymbolEntry& e, size_t limit, const std::string& where) {
    KILN_CHECK(static_cast<size_t>(e.node) < limit, ValueError,
               "{}: {} refers to node {}, which {} (the graph has {} nodes; inputs must come before their users)",
               source, where, e.node,
               static_cast<size_t>(e.node) < s.nodes.size() ? "does not come before it" : "does not exist",
               s.nodes.size());
    const SymbolNode& src = s.nodes[static_cast<size_t>(e.node)];
    KILN_CHECK(src.num_outputs < 0 || e.index < src.num_outputs, ValueError,
               "{}: {} reads output {} of node {} '{}', which has {} output{}", source, where, e.index, e.node,
               src.name, src.num_outputs, plural_s(src.num_outputs));
  };
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    SymbolNode& n = s.nodes[i];
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      check_entry(n.inputs[k], i, fmt::format("node {} '{}' ({}) input {}", i, n.name, n.op, k));
    }
  }
  const json& heads = root["heads"];
  KILN_CHECK(heads.is_array() && !heads.empty(), ValueError, "{}: 'heads' must be a non-empty array of entries",
             source);
  for (const json& h : heads) {
    SymbolEntry e;
    try {
      e = parse_entry(h);
    } catch (ValueError& err) {
      err.add_context(fmt::format("{}: head {}", source, s.heads.size()));
      throw;
    }
    check_entry(e, s.nodes.size(), fmt::format("head {}", s.heads.size()));
    s.heads.push_back(e);
  }
  for (int32_t id : parse_int_array(root["arg_nodes"], "arg_nodes", source)) {
    KILN_CHECK(static_cast<size_t>(id) < s.nodes.size() && s.nodes[static_cast<size_t>(id)].is_variable(), ValueError,
               "{}: arg_nodes lists node {}, which is not a variable", source, id);
  }
  normalize_hidden_keys(s);
  if (s.mxnet_version < kAuxStoredSince) add_missing_variables(s);
  // Aux states: variables an op mutates.
  for (const SymbolNode& n : s.nodes) {
    if (n.def == nullptr) continue;
    for (int m : n.def->mutate_inputs) {
      if (static_cast<size_t>(m) >= n.inputs.size()) continue;
      SymbolNode& src = s.nodes[static_cast<size_t>(n.inputs[static_cast<size_t>(m)].node)];
      if (src.is_variable()) src.is_aux = true;
    }
  }
  // Labels: variables that only loss outputs read, as their label.
  std::vector<int> reads(s.nodes.size(), 0), label_reads(s.nodes.size(), 0);
  for (const SymbolNode& n : s.nodes) {
    const LegacyOp* legacy = n.def == nullptr && !n.is_variable() ? find_legacy_op(n.op) : nullptr;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      auto src = static_cast<size_t>(n.inputs[k].node);
      ++reads[src];
      if (legacy != nullptr && static_cast<int>(k) >= legacy->data_inputs) ++label_reads[src];
    }
  }
  for (size_t i = 0; i < s.nodes.size(); ++i)
    s.nodes[i].is_label = s.nodes[i].is_variable() && reads[i] > 0 && reads[i] == label_reads[i];
  return s;
}

Symbol load_symbol_json(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  KILN_CHECK(!ec, IOError, "{}: cannot read: {}", path, ec.message());
  KILN_CHECK(size <= kMaxSymbolJsonBytes, IOError, "{}: {} bytes is over the {}-byte limit for symbol files", path,
             size, kMaxSymbolJsonBytes);
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), IOError, "{}: cannot open for reading: {}", path, std::strerror(errno));
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  KILN_CHECK(in.gcount() == static_cast<std::streamsize>(size), IOError, "{}: read {} of {} bytes", path, in.gcount(),
             size);
  return parse_symbol_json(text, path);
}

// ---- typing

namespace {

// A complete __shape__ hint ("(64, 3, 7, 7)"; 0 or -1 dims are unknown).
std::optional<TensorType> hinted_type(const SymbolNode& n) {
  auto it = n.hidden.find("__shape__");
  if (it == n.hidden.end()) return std::nullopt;
  IntTuple dims;
  try {
    dims = parse_attr(it->second, static_cast<IntTuple*>(nullptr));
  } catch (const Error&) {
    return std::nullopt;
  }
  if (dims.empty() || dims.size() > static_cast<size_t>(Shape::kMaxNdim)) return std::nullopt;
  for (int64_t d : dims)
    if (d <= 0) return std::nullopt;
  TensorType t{Shape(dims), DType::kFloat32};
  if (auto d = n.hidden.find("__dtype__"); d != n.hidden.end()) {
    try {
      t.dtype = dtype_from_flag(parse_attr(d->second, static_cast<int*>(nullptr)));
    } catch (const Error&) {
      return std::nullopt;
    }
  }
  return t;
}

// The shape of input `k` of an op, from its attributes and its data input.
std::optional<Shape> deduce_input_shape(OpId op, const OpAttrs& attrs, int k, const Shape& data) {
  switch (op) {
    case OpId::kConvolution: {
      const auto& a = attrs.as<ConvolutionAttrs>();
      if (k == 2) return Shape{a.num_filter};
      if (k != 1 || data.ndim() < 2 || a.num_group <= 0) return std::nullopt;
      Shape w{a.num_filter, data[1] / a.num_group};
      for (int64_t d : a.kernel) w.push_back(d);
      return w;
    }
    case OpId::kFullyConnected: {
      const auto& a = attrs.as<FullyConnectedAttrs>();
      if (k == 2) return Shape{a.num_hidden};
      if (k != 1 || data.ndim() < 1) return std::nullopt;
      int64_t in = data[data.ndim() - 1];
      if (a.flatten) {
        in = 1;
        for (int i = 1; i < data.ndim(); ++i) in *= data[i];
      }
      return Shape{a.num_hidden, in};
    }
    case OpId::kBatchNorm: {
      const auto& a = attrs.as<BatchNormAttrs>();
      if (k < 1 || k > 4 || data.ndim() == 0) return std::nullopt;
      int axis = a.axis < 0 ? a.axis + data.ndim() : a.axis;
      if (axis < 0 || axis >= data.ndim()) return std::nullopt;
      return Shape{data[axis]};
    }
    case OpId::kLayerNorm: {  // gamma and beta: data's length on the axis
      const auto& a = attrs.as<LayerNormAttrs>();
      if (k < 1 || k > 2 || data.ndim() == 0) return std::nullopt;
      int axis = a.axis < 0 ? a.axis + data.ndim() : a.axis;
      if (axis < 0 || axis >= data.ndim()) return std::nullopt;
      return Shape{data[axis]};
    }
    case OpId::kLeakyReLU:
      if (k == 1 && data.ndim() >= 2 && attrs.as<LeakyReLUAttrs>().act_type == LeakyType::kPrelu) return Shape{data[1]};
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

OpAttrs parse_node_attrs(const OpDef& def, const SymbolNode& n) {
  if (def.parse_attrs != nullptr) return def.parse_attrs(def.name, n.attrs);
  for (auto& [k, v] : n.attrs) {
    KILN_CHECK(detail::is_ignorable_attr_key(k), ValueError, "{}: takes no attributes, got {}='{}'", def.name, k, v);
  }
  return {};
}

// Lowers a legacy op to Kiln ops; the last node added takes `name`.
std::vector<Entry> lower_legacy(Graph& g, const SymbolNode& n, std::span<const Entry> in) {
  if (n.op == "SoftmaxActivation") {
    std::string mode = "instance";
    for (auto& [k, v] : n.attrs) {
      if (k == "mode") {
        mode = v;
      } else {
        KILN_CHECK(detail::is_ignorable_attr_key(k), ValueError, "node '{}': SoftmaxActivation: unknown attribute '{}'",
                   n.name, k);
      }
    }
    KILN_CHECK(mode == "channel" || mode == "instance", ValueError,
               "node '{}': SoftmaxActivation: mode must be 'channel' or 'instance', got '{}'", n.name, mode);
    const Shape& x = g.type(in[0]).shape;
    if (mode == "channel" || x.ndim() <= 2) {  // channel: along axis 1; instance on [N, D]: along D
      SoftmaxAttrs a;
      a.axis = mode == "channel" ? 1 : -1;
      return g.add_op(OpId::kSoftmax, OpAttrs::make(a), in, n.name);
    }
    // instance on [N, ...]: over everything but N.
    ReshapeAttrs flat;
    flat.shape = {0, -1};
    Entry f = g.add_op(OpId::kReshape, OpAttrs::make(flat), in, n.name + "_flat")[0];
    SoftmaxAttrs a;
    Entry sm = g.add_op(OpId::kSoftmax, OpAttrs::make(a), std::vector<Entry>{f}, n.name + "_softmax")[0];
    ReshapeAttrs back;
    back.shape = x.to_vector();
    return g.add_op(OpId::kReshape, OpAttrs::make(back), std::vector<Entry>{sm}, n.name);
  }
  if (n.op == "SoftmaxOutput") {
    // Softmax over axis 1 (multi_output), the last axis (preserve_shape), or
    // everything but axis 0 (the default); the output has data's shape.
    bool multi_output = false, preserve_shape = false;
    for (auto& [k, v] : n.attrs) {
      try {
        if (k == "multi_output") {
          multi_output = parse_attr(v, static_cast<bool*>(nullptr));
        } else if (k == "preserve_shape") {
          preserve_shape = parse_attr(v, static_cast<bool*>(nullptr));
        } else {
          constexpr std::string_view kTrainingOnly[] = {"grad_scale",    "ignore_label", "use_ignore",
                                                        "normalization", "out_grad",     "smooth_alpha"};
          KILN_CHECK(std::ranges::find(kTrainingOnly, k) != std::end(kTrainingOnly) || detail::is_ignorable_attr_key(k),
                     ValueError, "unknown attribute '{}'", k);
        }
      } catch (Error& e) {
        e.add_context(fmt::format("node '{}': SoftmaxOutput", n.name));
        throw;
      }
    }
    const Shape& x = g.type(in[0]).shape;
    SoftmaxAttrs a;
    if (multi_output || preserve_shape || x.ndim() <= 2) {
      a.axis = multi_output ? 1 : -1;
      return g.add_op(OpId::kSoftmax, OpAttrs::make(a), in.first(1), n.name);
    }
    ReshapeAttrs flat;
    flat.shape = {0, -1};
    Entry f = g.add_op(OpId::kReshape, OpAttrs::make(flat), in.first(1), n.name + "_flat")[0];
    Entry sm = g.add_op(OpId::kSoftmax, OpAttrs::make(a), std::vector<Entry>{f}, n.name + "_softmax")[0];
    ReshapeAttrs back;
    back.shape = x.to_vector();
    return g.add_op(OpId::kReshape, OpAttrs::make(back), std::vector<Entry>{sm}, n.name);
  }
  if (n.op.ends_with("RegressionOutput")) {
    for (auto& [k, v] : n.attrs) {
      KILN_CHECK(k == "grad_scale" || detail::is_ignorable_attr_key(k), ValueError,
                 "node '{}': {}: unknown attribute '{}'", n.name, n.op, k);
    }
    OpId op = n.op == "LogisticRegressionOutput" ? OpId::kSigmoid : OpId::kCopy;
    return g.add_op(op, {}, in.first(1), n.name);
  }
  KILN_ASSERT(!"lower_legacy: an op parse_node admitted without a lowering");
  return {};
}

}  // namespace

std::optional<Shape> variable_shape_hint(const Symbol& s, int32_t node) {
  KILN_ASSERT(node >= 0 && static_cast<size_t>(node) < s.nodes.size());
  const SymbolNode& v = s.nodes[static_cast<size_t>(node)];
  if (auto it = v.hidden.find("__shape__"); it != v.hidden.end()) {
    try {
      IntTuple dims = parse_attr(it->second, static_cast<IntTuple*>(nullptr));
      if (!dims.empty() && dims.size() <= static_cast<size_t>(Shape::kMaxNdim)) {
        for (int64_t& d : dims) d = std::max<int64_t>(d, 0);  // legacy 0 and NumPy -1 are unknown
        return Shape(dims);
      }
    } catch (const Error&) {
    }
  }
  // Data of unknown shape: enough zero dims for any axis attribute.
  Shape unknown;
  for (int i = 0; i < Shape::kMaxNdim; ++i) unknown.push_back(0);
  for (const SymbolNode& n : s.nodes) {
    if (n.def == nullptr) continue;
    for (size_t k = 1; k < n.inputs.size(); ++k) {
      if (n.inputs[k].node != node) continue;
      try {
        if (auto shape = deduce_input_shape(n.def->id, parse_node_attrs(*n.def, n), static_cast<int>(k), unknown))
          return shape;
      } catch (const Error&) {  // malformed attributes: to_graph reports them
      }
    }
  }
  return std::nullopt;
}

Graph to_graph(const Symbol& s, const TypeMap& types, std::span<const std::string> input_names) {
  std::set<std::string, std::less<>> inputs(input_names.begin(), input_names.end());
  for (const std::string& name : inputs) {
    auto id = s.find(name);
    KILN_CHECK(id && s.nodes[static_cast<size_t>(*id)].is_variable(), ValueError,
               "input '{}' is not a variable of the graph (variables: {})", name, fmt::join(s.list_variables(), ", "));
  }
  Graph g;
  std::vector<std::vector<Entry>> outs(s.nodes.size());
  std::vector<bool> pending(s.nodes.size(), false);  // variables waiting for a deduced type

  auto add_variable = [&](size_t i, const TensorType& t) {
    const SymbolNode& n = s.nodes[i];
    outs[i] = {inputs.contains(n.name) ? g.add_input(n.name, t) : g.add_param(n.name, t, n.is_aux)};
    pending[i] = false;
  };

  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const SymbolNode& n = s.nodes[i];
    if (n.is_variable() && n.is_label && !inputs.contains(n.name)) continue;  // read by nothing that runs
    if (n.is_variable()) {
      if (auto t = types.find(n.name); t != types.end()) {
        add_variable(i, t->second);
      } else if (inputs.contains(n.name)) {
        throw ValueError(fmt::format("input '{}' (node {}) needs a type", n.name, i));
      } else if (auto h = hinted_type(n)) {
        add_variable(i, *h);
      } else {
        pending[i] = true;  // typed by its first consumer
      }
      continue;
    }
    OpAttrs attrs;
    std::vector<Entry> in;
    try {
      // Parse first: deduction reads the attributes.
      if (n.def != nullptr) attrs = parse_node_attrs(*n.def, n);
      size_t used = n.inputs.size();
      if (n.def == nullptr) used = std::min<size_t>(used, static_cast<size_t>(find_legacy_op(n.op)->data_inputs));
      for (size_t k = 0; k < used; ++k) {
        const SymbolEntry& e = n.inputs[k];
        auto src = static_cast<size_t>(e.node);
        if (pending[src]) {
          std::optional<Shape> shape;
          if (n.def != nullptr && k > 0 && !in.empty()) {
            shape = deduce_input_shape(n.def->id, attrs, static_cast<int>(k), g.type(in[0]).shape);
          }
          KILN_CHECK(shape.has_value(), ValueError, "cannot tell the shape of variable '{}' (input {}); give it a type",
                     s.nodes[src].name, k);
          add_variable(src, {*shape, g.type(in[0]).dtype});
        }
        const std::vector<Entry>& src_outs = outs[src];
        KILN_CHECK(static_cast<size_t>(e.index) < src_outs.size(), ValueError,
                   "input {} reads output {} of '{}', which Kiln's {} has {} of", k, e.index, s.nodes[src].name,
                   s.nodes[src].op, src_outs.size());
        in.push_back(src_outs[static_cast<size_t>(e.index)]);
      }
    } catch (Error& e) {
      e.add_context(fmt::format("node {} '{}' ({})", i, n.name, n.op));
      throw;
    }
    // Inference errors already name the node and its input types.
    outs[i] = n.def != nullptr ? g.add_op(n.def->id, std::move(attrs), in, n.name) : lower_legacy(g, n, in);
  }
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    KILN_CHECK(!pending[i], ValueError, "variable '{}' (node {}) is used by no op and has no type", s.nodes[i].name, i);
  }
  std::vector<Entry> heads;
  for (size_t h = 0; h < s.heads.size(); ++h) {
    const SymbolEntry& e = s.heads[h];
    const auto& src = outs[static_cast<size_t>(e.node)];
    KILN_CHECK(static_cast<size_t>(e.index) < src.size(), ValueError,
               "head {} reads output {} of '{}', which Kiln's {} has {} of", h, e.index,
               s.nodes[static_cast<size_t>(e.node)].name, s.nodes[static_cast<size_t>(e.node)].op, src.size());
    heads.push_back(src[static_cast<size_t>(e.index)]);
  }
  g.set_outputs(std::move(heads));
  return g;
}

}  // namespace kiln::mxnet
