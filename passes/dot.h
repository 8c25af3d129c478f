// The Graphviz form of a graph, for looking at dumps (`dot -Tsvg 03-gradient.dot`).
//
//   std::string dot = passes::to_dot(g);
//
// One box per op node labelled "name\nop\ntypes", one ellipse per input,
// param, aux or const node labelled "name\nkind type", an edge per use (labelled
// "#k" when it reads output k > 0), and one "output i" node per graph output.
// Write-only: nothing parses it back (the text form, Graph::to_text, does that).
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln::passes {

std::string to_dot(const ir::Graph& g);

}  // namespace kiln::passes
