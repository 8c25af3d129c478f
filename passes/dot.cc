#include "passes/dot.h"

namespace kiln::passes {
namespace {

// A double-quoted Graphviz string; "\n" stays a Graphviz line break.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + '"';
}

std::string types_text(const ir::Node& n) {
  std::string out;
  for (size_t i = 0; i < n.types.size(); ++i)
    out += fmt::format("{}{}{}", i ? ", " : "", dtype_short_name(n.types[i].dtype), n.types[i].shape);
  return out;
}

}  // namespace

std::string to_dot(const ir::Graph& g) {
  std::string out = "digraph kiln {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  for (size_t i = 0; i < g.size(); ++i) {
    const ir::Node& n = g.node(static_cast<ir::NodeId>(i));
    if (n.is_op()) {
      out += fmt::format("  n{} [shape=box, label={}];\n", i,
                         quoted(fmt::format("{}\n{}\n{}", n.name, op_def(n.op).name, types_text(n))));
    } else {
      out += fmt::format("  n{} [shape=ellipse, style=filled, fillcolor=\"#eeeeee\", label={}];\n", i,
                         quoted(fmt::format("{}\n{} {}", n.name, ir::node_kind_name(n.kind), types_text(n))));
    }
  }
  for (size_t i = 0; i < g.size(); ++i) {
    const ir::Node& n = g.node(static_cast<ir::NodeId>(i));
    if (!n.is_op()) continue;
    for (const ir::Entry& e : n.inputs) {
      out += e.index == 0 ? fmt::format("  n{} -> n{};\n", e.node, i)
                          : fmt::format("  n{} -> n{} [label=\"#{}\"];\n", e.node, i, e.index);
    }
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const ir::Entry& e = g.outputs()[k];
    out += fmt::format("  out{} [shape=plaintext, label=\"output {}\"];\n", k, k);
    out += e.index == 0 ? fmt::format("  n{} -> out{};\n", e.node, k)
                        : fmt::format("  n{} -> out{} [label=\"#{}\"];\n", e.node, k, e.index);
  }
  return out + "}\n";
}

}  // namespace kiln::passes
