// Graph pictures: Graphviz text laid out and drawn as SVG by Graphviz's `dot`
// program (Debian package graphviz), run as a child process.
//
//   std::string svg = dot_to_svg(passes::to_dot(g, {.collapse_params = true}));
//   write_file_atomically("model.svg", svg);
//
// Why a process rather than libgvc in-process: Graphviz 2.43 (Debian 12)
// leaks a few KiB per layout and reads freed memory when a second context is
// made (both seen under AddressSanitizer); a child process keeps both out of
// Kiln. `dot` is looked up on PATH.
//
// The result is Graphviz's SVG with the external DOCTYPE line removed, so it
// refers to nothing outside itself; each Graphviz node is a
// <g class="node" id="..."> whose id is the node's `id` attribute (the graph
// node's name in passes::to_dot), each cluster a <g class="cluster">.
// Text Graphviz cannot read, or a layout that fails, throws ValueError with
// Graphviz's message; a missing `dot` program throws NotSupported saying
// which package provides it. Thread safe (each call has its own files).
#pragma once

#include <string>

namespace kiln::viz {

std::string dot_to_svg(const std::string& dot);

}  // namespace kiln::viz
