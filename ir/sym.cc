#include "ir/sym.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace kiln::ir::sym {

Entry Outputs::operator[](size_t i) const {
  KILN_CHECK(i < entries_.size(), ValueError, "output {} of a node with {} output(s)", i, entries_.size());
  return entries_[i];
}

Outputs apply(Graph& g, OpId op, std::span<const Entry> inputs, const AttrMap& attrs, std::string name) {
  const OpDef& def = op_def(op);
  OpAttrs parsed;
  if (def.parse_attrs != nullptr) {
    parsed = def.parse_attrs(def.name, attrs);
  } else {
    KILN_CHECK(attrs.empty(), ValueError, "{} takes no attributes, got '{}'", def.name, attrs.begin()->first);
  }
  return Outputs(g.add_op(op, std::move(parsed), inputs, std::move(name)));
}

Outputs apply(Graph& g, OpId op, std::span<const Entry> inputs, const OpAttrs& attrs, std::string name) {
  // Printed and parsed back by the op itself: a field the op does not have
  // fails here, naming the op and the field.
  return apply(g, op, inputs, attrs.to_strings(), std::move(name));
}

}  // namespace kiln::ir::sym
