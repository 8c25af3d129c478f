// The IR's text form (ir/parser.cc): parse, then the verifier must accept
// what the parser built.
#include "ir/graph.h"
#include "tests/fuzz/fuzz_target.h"

namespace kiln {

KILN_FUZZ_TARGET(ir_text) {
  ir::Graph g = ir::parse_graph(fuzz::as_string_view(data));
  ir::verify(g);
  (void)g.to_text();
}

}  // namespace kiln
