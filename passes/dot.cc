#include "passes/dot.h"

#include "ir/ops/fused.h"

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

bool is_param_like(const ir::Node& n) {
  return n.kind == ir::NodeKind::kParam || n.kind == ir::NodeKind::kAux || n.kind == ir::NodeKind::kConst;
}

const FusedProgram* fused_program(const ir::Node& n) {
  return n.is_op() && n.op == OpId::kFusedElemwise ? &n.attrs.as<FusedElemwiseAttrs>().program.program() : nullptr;
}

class DotWriter {
 public:
  DotWriter(const ir::Graph& g, const DotOptions& opt, std::string prefix, std::string indent)
      : g_(g), opt_(opt), prefix_(std::move(prefix)), in_(std::move(indent)) {}

  std::string body() {
    std::string out;
    for (size_t i = 0; i < g_.size(); ++i) write_node(out, static_cast<ir::NodeId>(i));
    for (size_t i = 0; i < g_.size(); ++i) write_in_edges(out, static_cast<ir::NodeId>(i));
    for (size_t k = 0; k < g_.outputs().size(); ++k) {
      std::string id = prefix_ + fmt::format("output#{}", k);
      out += fmt::format("{}{} [id={}, shape=plaintext, label=\"output {}\"];\n", in_, quoted(id), quoted(id), k);
      edge(out, g_.outputs()[k], quoted(id));
    }
    return out;
  }

 private:
  std::string node_id(ir::NodeId id) const { return prefix_ + g_.node(id).name; }
  std::string instr_id(ir::NodeId id, size_t j) const { return fmt::format("{}{}#{}", prefix_, g_.node(id).name, j); }

  // The Graphviz node that holds `e`'s value ("" when it is not drawn).
  std::string source_of(ir::Entry e) const {
    const ir::Node& n = g_.node(e.node);
    if (opt_.collapse_params && is_param_like(n)) return "";
    if (const FusedProgram* p = fused_program(n)) {
      int32_t v = p->outputs[static_cast<size_t>(e.index)];
      int32_t k = static_cast<int32_t>(p->inputs.size());
      if (v < k) return source_of(n.inputs[static_cast<size_t>(v)]);  // an input passed through
      return quoted(instr_id(e.node, static_cast<size_t>(v - k)));
    }
    return quoted(node_id(e.node));
  }

  void edge(std::string& out, ir::Entry from, const std::string& to) const {
    std::string src = source_of(from);
    if (src.empty()) return;
    bool fused = fused_program(g_.node(from.node)) != nullptr;
    out += from.index == 0 || fused ? fmt::format("{}{} -> {};\n", in_, src, to)
                                    : fmt::format("{}{} -> {} [label=\"#{}\"];\n", in_, src, to, from.index);
  }

  void write_node(std::string& out, ir::NodeId id) const {
    const ir::Node& n = g_.node(id);
    std::string q = quoted(node_id(id));
    if (!n.is_op()) {
      if (opt_.collapse_params && is_param_like(n)) return;
      bool input = n.kind == ir::NodeKind::kInput;
      out += fmt::format("{}{} [id={}, shape=ellipse, style=filled, fillcolor=\"{}\", label={}];\n", in_, q, q,
                         input ? "#dde8f5" : "#eeeeee",
                         quoted(fmt::format("{}\n{} {}", n.name, ir::node_kind_name(n.kind), types_text(n))));
      return;
    }
    if (const FusedProgram* p = fused_program(n)) {
      std::string cid = "cluster " + node_id(id);
      out +=
          fmt::format("{}subgraph {} {{\n{}  id={}; label={}; style=\"rounded,filled\"; fillcolor=\"#fff3e0\";\n", in_,
                      quoted(cid), in_, quoted(cid), quoted(fmt::format("fused: {}\n{}", n.name, types_text(n))));
      for (size_t j = 0; j < p->instrs.size(); ++j) {
        std::string iq = quoted(instr_id(id, j));
        // Literal operands follow the opcode; collapsed parameters it reads are named below it.
        std::string literal, params;
        const FusedInstr& ins = p->instrs[j];
        for (int a = 0; a < fused_opcode_arity(ins.op); ++a) {
          const FusedOperand& arg = ins.args[static_cast<size_t>(a)];
          if (!arg.is_value()) {
            literal += fmt::format(" {}", arg.literal);
          } else if (arg.value < static_cast<int32_t>(p->inputs.size())) {
            const ir::Node& src = g_.node(n.inputs[static_cast<size_t>(arg.value)].node);
            if (opt_.collapse_params && is_param_like(src)) params += "\n+ " + src.name;
          }
        }
        out += fmt::format("{}  {} [id={}, shape=box, style=\"rounded,filled\", fillcolor=\"#ffe0b2\", label={}];\n",
                           in_, iq, iq, quoted(std::string(fused_opcode_name(ins.op)) + literal + params));
      }
      out += in_ + "}\n";
      return;
    }
    std::string label = fmt::format("{}\n{}\n{}", op_def(n.op).name, n.name, types_text(n));
    if (opt_.collapse_params) {
      int count = 0;
      int64_t values = 0;
      for (const ir::Entry& e : n.inputs) {
        if (!is_param_like(g_.node(e.node))) continue;
        ++count;
        values += g_.type(e).shape.size();
      }
      if (count) label += fmt::format("\n+ {} param{} ({} values)", count, count == 1 ? "" : "s", values);
    }
    out += fmt::format("{}{} [id={}, shape=box, label={}];\n", in_, q, q, quoted(label));
  }

  void write_in_edges(std::string& out, ir::NodeId id) const {
    const ir::Node& n = g_.node(id);
    if (!n.is_op()) return;
    if (const FusedProgram* p = fused_program(n)) {
      int32_t k = static_cast<int32_t>(p->inputs.size());
      for (size_t j = 0; j < p->instrs.size(); ++j) {
        const FusedInstr& ins = p->instrs[j];
        std::string to = quoted(instr_id(id, j));
        for (int a = 0; a < fused_opcode_arity(ins.op); ++a) {
          const FusedOperand& arg = ins.args[static_cast<size_t>(a)];
          if (!arg.is_value()) continue;
          if (arg.value < k) {
            edge(out, n.inputs[static_cast<size_t>(arg.value)], to);
          } else {
            out += fmt::format("{}{} -> {};\n", in_, quoted(instr_id(id, static_cast<size_t>(arg.value - k))), to);
          }
        }
      }
      return;
    }
    for (const ir::Entry& e : n.inputs) edge(out, e, quoted(node_id(id)));
  }

  const ir::Graph& g_;
  const DotOptions& opt_;
  std::string prefix_, in_;
};

constexpr std::string_view kHeader =
    "digraph kiln {\n  rankdir=TB;\n  graph [fontname=\"monospace\", fontsize=11];\n  node [fontname=\"monospace\", "
    "fontsize=10];\n"
    "  edge [fontname=\"monospace\", fontsize=9];\n";

}  // namespace

std::string to_dot(const ir::Graph& g, const DotOptions& options) {
  return std::string(kHeader) + DotWriter(g, options, "", "  ").body() + "}\n";
}

std::string to_dot_side_by_side(std::span<const LabelledGraph> graphs, const DotOptions& options) {
  std::string out(kHeader);
  for (const auto& [label, g] : graphs) {
    std::string cid = "cluster " + label;
    out += fmt::format("  subgraph {} {{\n    id={}; label={}; fontname=\"monospace\"; fontsize=14;\n", quoted(cid),
                       quoted(cid), quoted(label));
    out += DotWriter(*g, options, label + ":", "    ").body();
    out += "  }\n";
  }
  return out + "}\n";
}

}  // namespace kiln::passes
