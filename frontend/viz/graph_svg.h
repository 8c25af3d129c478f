// Graph pictures: Graphviz text laid out and drawn as SVG by Graphviz's own
// library (libgvc), in-process.
//
//   std::string svg = dot_to_svg(passes::to_dot(g, {.collapse_params = true}));
//   write_file_atomically("model.svg", svg);
//
// The result is Graphviz's SVG with the external DOCTYPE line removed, so it
// refers to nothing outside itself; each Graphviz node is a
// <g class="node" id="..."> whose id is the node's `id` attribute (the graph
// node's name in passes::to_dot), each cluster a <g class="cluster">.
// Text Graphviz cannot read, or a layout that fails, throws ValueError
// with Graphviz's message. Thread safe (calls are serialized: libgvc keeps
// global state).
#pragma once

#include <string>

namespace kiln::viz {

std::string dot_to_svg(const std::string& dot);

}  // namespace kiln::viz
