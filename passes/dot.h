// The Graphviz form of a graph, for looking at it: KILN_DUMP_GRAPHS writes it
// beside each pass's text dump, and `kiln inspect --svg` lays it out with
// Graphviz (frontend/viz/graph_svg.h).
//
//   std::string dot = passes::to_dot(g);                               // dot -Tsvg 03-gradient.dot
//   std::string two = passes::to_dot_side_by_side({{"traced", &before}, {"optimized", &after}});
//
// One box per op node labelled "op\nname\ntypes" (dtype and shape per
// output), one ellipse per input, param, aux or const node labelled
// "name\nkind types", an edge per use (labelled "#k" when it reads output
// k > 0), and one "output i" node per graph output. A _kiln_fused_elemwise
// node is drawn as a cluster (its label "fused: <name>" and the node's
// types) holding one small node per instruction of its program, with edges
// between them: the group's inside is visible. With collapse_params, param,
// aux and const nodes are left out and each op that reads some says
// "+ N params (V values)" instead (a fused instruction: "+ <param name>").
//
// Ids are stable: a node's Graphviz name, and its `id` in Graphviz's SVG, is
// the node's name (an output: "output#i"; an instruction of a fused node:
// "<name>#<j>"), and nodes are written in graph order, so two pictures of a
// graph before and after a pass lay out the untouched part alike and can
// be compared by eye or by id. Side by side, each graph is a cluster titled
// by its label and its ids are prefixed "<label>:".
// Write-only: nothing parses it back (the text form, Graph::to_text, does that).
#pragma once

#include <span>
#include <string>
#include <utility>

#include "ir/graph.h"

namespace kiln::passes {

struct DotOptions {
  bool collapse_params = false;
};

std::string to_dot(const ir::Graph& g, const DotOptions& options = {});

using LabelledGraph = std::pair<std::string, const ir::Graph*>;
std::string to_dot_side_by_side(std::span<const LabelledGraph> graphs, const DotOptions& options = {});

}  // namespace kiln::passes
