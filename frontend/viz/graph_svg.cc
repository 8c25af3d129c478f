#include "frontend/viz/graph_svg.h"

#include <graphviz/gvc.h>

#include <memory>
#include <mutex>

#include "ir/error.h"

namespace kiln::viz {
namespace {

std::mutex g_graphviz_mutex;
std::string* g_messages = nullptr;  // Graphviz's error messages of the current call

int collect_message(char* text) {
  if (g_messages) *g_messages += text;
  return 0;
}

}  // namespace

std::string dot_to_svg(const std::string& dot) {
  std::lock_guard<std::mutex> lock(g_graphviz_mutex);
  std::string messages;
  g_messages = &messages;
  agusererrf previous = agseterrf(collect_message);
  struct Restore {
    agusererrf previous;
    ~Restore() {
      agseterrf(previous);
      g_messages = nullptr;
    }
  } restore{previous};

  std::unique_ptr<GVC_t, int (*)(GVC_t*)> gvc(gvContext(), gvFreeContext);
  KILN_CHECK(gvc != nullptr, ValueError, "Graphviz: cannot create a context");
  std::unique_ptr<Agraph_t, int (*)(Agraph_t*)> g(agmemread(dot.c_str()), agclose);
  KILN_CHECK(g != nullptr, ValueError, "Graphviz could not read the graph: {}",
             messages.empty() ? "syntax error" : messages);
  KILN_CHECK(gvLayout(gvc.get(), g.get(), "dot") == 0, ValueError, "Graphviz layout failed: {}", messages);
  char* data = nullptr;
  unsigned int size = 0;
  int rc = gvRenderData(gvc.get(), g.get(), "svg", &data, &size);
  std::string svg = rc == 0 && data ? std::string(data, size) : std::string();
  if (data) gvFreeRenderData(data);
  gvFreeLayout(gvc.get(), g.get());
  KILN_CHECK(rc == 0 && !svg.empty(), ValueError, "Graphviz could not render SVG: {}", messages);
  // The DOCTYPE names an external DTD; nothing needs it.
  if (size_t d = svg.find("<!DOCTYPE"); d != std::string::npos) {
    size_t end = svg.find('>', d);
    if (end != std::string::npos) svg.erase(d, end + 1 - d);
  }
  return svg;
}

}  // namespace kiln::viz
