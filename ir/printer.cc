// The IR text form:
//
//   graph {
//     %data = input f32[1,512]
//     %dense0.weight = param f32[256,512]
//     %dense0 = FullyConnected(%data, %dense0.weight) {no_bias="True", num_hidden="256"} : f32[1,256]
//     %parts = SliceChannel(%x) {num_outputs="2"} : f32[1,2], f32[1,2]
//     %y = elemwise_add(%parts#0, %parts#1) : f32[1,2]
//     return %y
//   }
//
// Output 0 of a node is written %name, output k > 0 %name#k. Attribute
// values are MXNet's strings, quoted. Parsed back by ir/parser.cc.
#include <string>

#include "ir/graph.h"

namespace kiln::ir {
namespace {

std::string type_text(const TensorType& t) {
  return fmt::format("{}{}", dtype_short_name(t.dtype), t.shape.to_string());
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}

std::string entry_text(const Graph& g, Entry e) {
  return e.index == 0 ? "%" + g.node(e.node).name : fmt::format("%{}#{}", g.node(e.node).name, e.index);
}

}  // namespace

std::string Graph::to_text() const {
  std::string out = "graph {\n";
  for (const Node& n : nodes_) {
    out += "  %" + n.name + " = ";
    if (!n.is_op()) {
      out += fmt::format("{} {}", node_kind_name(n.kind), type_text(n.types[0]));
      if (n.kind == NodeKind::kConst) out += fmt::format(" slot={}", n.inputs[0].index);
      out += '\n';
      continue;
    }
    out += std::string(op_def(n.op).name) + "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) out += (i ? ", " : "") + entry_text(*this, n.inputs[i]);
    out += ")";
    AttrMap attrs = n.attrs.to_strings();
    if (!attrs.empty()) {
      out += " {";
      bool first = true;
      for (const auto& [k, v] : attrs) {
        out += (first ? "" : ", ") + k + "=" + quote(v);
        first = false;
      }
      out += "}";
    }
    out += " :";
    for (size_t i = 0; i < n.types.size(); ++i) out += (i ? ", " : " ") + type_text(n.types[i]);
    out += '\n';
  }
  out += "  return";
  for (size_t i = 0; i < outputs_.size(); ++i) out += (i ? ", " : " ") + entry_text(*this, outputs_[i]);
  return out + "\n}\n";
}

}  // namespace kiln::ir
