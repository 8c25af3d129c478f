// Writing MXNet's symbol JSON (contract: frontend/formats/mxnet/symbol_json.h).
#include <algorithm>

#include <nlohmann/json.hpp>

#include "frontend/formats/mxnet/symbol_json.h"
#include "ir/ops/conv.h"

namespace kiln::mxnet {
using namespace kiln::ir;  // nodes, entries and graphs of the neutral form

namespace {

using nlohmann::json;

// Attributes Kiln adds to MXNet's ops that MXNet would reject: never exported.
bool is_kiln_only_attr(OpId op, std::string_view key) {
  return (op == OpId::kDropout && (key == "seed" || key == "offset")) ||
         ((op == OpId::kPooling || op == OpId::kPoolingBackward) && key == "dilate");
}

// What one node of the file holds, in the order MXNet writes it.
struct OutNode {
  std::string_view op;
  std::string_view name;
  AttrMap attrs;  // sorted, as MXNet's std::map
  std::vector<SymbolEntry> inputs;
};

struct OutGraph {
  std::vector<OutNode> nodes;
  std::vector<int32_t> arg_nodes, row_ptr{0};
  std::vector<SymbolEntry> heads;
  int mxnet_version = kExportMxnetVersion;
};

// dmlc::JSONWriter's layout, which MXNet's Symbol.save produces: items
// separated by ", " and a newline (so lines end in a space), two spaces per
// level, objects of one entry and arrays of at most 10 plain values on one
// line, no newline at the end.
class DmlcWriter {
 public:
  std::string take() { return std::move(out_); }
  void str(std::string_view s) { out_ += json(s).dump(-1, ' ', false, json::error_handler_t::replace); }
  void entry(const SymbolEntry& e) { out_ += fmt::format("[{}, {}, {}]", e.node, e.index, e.version); }
  template <typename T, typename F>
  void array(const std::vector<T>& items, int level, bool plain, F&& item) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    bool multi = !plain || items.size() > 10;
    out_ += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out_ += ", ";
      if (multi) newline(level + 1);
      item(items[i]);
    }
    if (multi) newline(level);
    out_ += ']';
  }
  void attrs(const AttrMap& m, int level) {
    out_ += '{';
    bool multi = m.size() > 1;
    bool first = true;
    for (auto& [k, v] : m) {
      if (!first) out_ += ", ";
      first = false;
      if (multi) newline(level + 1);
      str(k);
      out_ += ": ";
      str(v);
    }
    if (multi) newline(level);
    out_ += '}';
  }
  void key(std::string_view k, int level, bool first) {
    if (!first) out_ += ", ";
    newline(level);
    str(k);
    out_ += ": ";
  }
  void newline(int level) { out_ += '\n' + std::string(static_cast<size_t>(2 * level), ' '); }
  void raw(std::string_view s) { out_ += s; }

 private:
  std::string out_;
};

std::string write_dmlc(const OutGraph& g) {
  DmlcWriter w;
  w.raw("{");
  w.key("nodes", 1, true);
  w.array(g.nodes, 1, false, [&](const OutNode& n) {
    w.raw("{");
    w.key("op", 3, true);
    w.str(n.op);
    w.key("name", 3, false);
    w.str(n.name);
    if (!n.attrs.empty()) {
      w.key("attrs", 3, false);
      w.attrs(n.attrs, 3);
    }
    w.key("inputs", 3, false);
    w.array(n.inputs, 3, true, [&](const SymbolEntry& e) { w.entry(e); });
    w.newline(2);
    w.raw("}");
  });
  auto ints = [&](int32_t v) { w.raw(std::to_string(v)); };
  w.key("arg_nodes", 1, false);
  w.array(g.arg_nodes, 1, true, ints);
  w.key("node_row_ptr", 1, false);
  w.array(g.row_ptr, 1, true, ints);
  w.key("heads", 1, false);
  w.array(g.heads, 1, true, [&](const SymbolEntry& e) { w.entry(e); });
  w.key("attrs", 1, false);
  w.raw(fmt::format("{{\"mxnet_version\": [\"int\", {}]}}", g.mxnet_version));
  w.newline(0);
  w.raw("}");
  return w.take();
}

}  // namespace

std::string to_json(const Graph& g) {
  OutGraph out;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    OutNode node{"null", n.name, {}, {}};
    if (!n.is_op()) {
      // A constant is a variable like a param (MXNet's JSON holds no
      // values; export writes the constant's value as arg:NAME, as Gluon
      // does for a Constant).
      if (n.kind != NodeKind::kInput) {
        node.attrs = {{"__dtype__", std::to_string(static_cast<int>(n.types[0].dtype))},
                      {"__shape__", n.types[0].shape.to_mxnet_string()}};
      }
      out.arg_nodes.push_back(static_cast<int32_t>(i));
    } else {
      const OpDef& def = op_def(n.op);
      KILN_CHECK(n.op != OpId::kFusedElemwise, NotSupported,
                 "to_json: node '{}' is a {} (made by the fuse-elementwise pass); MXNet has no such op: export the "
                 "graph before optimization passes",
                 n.name, def.name);
      node.op = def.name;
      if (n.op == OpId::kPooling || n.op == OpId::kPoolingBackward) {
        // MXNet's Pooling has no dilate: written only when it is all 1s (then dropped).
        for (int64_t d : n.attrs.as<PoolingAttrs>().dilate)
          KILN_CHECK(d == 1, NotSupported, "to_json: node '{}' ({}) has dilate={}; MXNet's Pooling has no dilation",
                     n.name, def.name, n.attrs.as<PoolingAttrs>().dilate.to_mxnet_string());
      }
      for (auto& [k, v] : n.attrs.to_strings())
        if (!is_kiln_only_attr(n.op, k)) node.attrs[k] = v;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const Entry& e = n.inputs[k];
        bool mutated = std::ranges::find(def.mutate_inputs, static_cast<int>(k)) != def.mutate_inputs.end();
        node.inputs.push_back({e.node, e.index, mutated && !g.node(e.node).is_op() ? 1 : 0});
      }
    }
    out.nodes.push_back(std::move(node));
    out.row_ptr.push_back(out.row_ptr.back() + n.num_outputs());
  }
  for (const Entry& e : g.outputs()) out.heads.push_back({e.node, e.index, 0});
  return write_dmlc(out);
}

std::string to_json(const Symbol& s) {
  OutGraph out;
  // Files from MXNet >= 1.0 keep their version; older ones were upgraded while
  // reading (aux variables added, hidden keys renamed), so they are current.
  out.mxnet_version = s.mxnet_version >= 10000 ? s.mxnet_version : kExportMxnetVersion;
  // Output counts the file did not give: at least those read.
  std::vector<int> read(s.nodes.size(), 1);
  for (const SymbolNode& n : s.nodes)
    for (const SymbolEntry& e : n.inputs) read[e.node] = std::max(read[e.node], e.index + 1);
  for (const SymbolEntry& e : s.heads) read[e.node] = std::max(read[e.node], e.index + 1);
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const SymbolNode& n = s.nodes[i];
    OutNode node{n.def != nullptr ? n.def->name : std::string_view(n.op), n.name, n.attrs, n.inputs};
    node.attrs.insert(n.hidden.begin(), n.hidden.end());
    if (n.is_variable()) out.arg_nodes.push_back(static_cast<int32_t>(i));
    out.nodes.push_back(std::move(node));
    out.row_ptr.push_back(out.row_ptr.back() + (n.num_outputs > 0 ? n.num_outputs : read[i]));
  }
  out.heads = s.heads;
  return write_dmlc(out);
}

}  // namespace kiln::mxnet
