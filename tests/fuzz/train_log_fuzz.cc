// Training logs (frontend/viz/train_log.cc), as `kiln plot` reads them: parse,
// then draw what parsed.
#include "frontend/viz/svg_plot.h"
#include "frontend/viz/train_log.h"
#include "tests/fuzz/fuzz_target.h"

namespace kiln {

KILN_FUZZ_TARGET(train_log) {
  viz::TrainLog log = viz::parse_train_log(fuzz::as_string_view(data), "fuzz input");
  (void)viz::training_curves_svg({&log, 1});
}

}  // namespace kiln
