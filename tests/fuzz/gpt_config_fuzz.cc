// The GPT configuration `kiln generate` reads (PREFIX.json, models/gpt.cc):
// parse, write back, parse again; the two must agree.
#include "models/gpt.h"
#include "tests/fuzz/fuzz_target.h"

namespace kiln {

KILN_FUZZ_TARGET(gpt_config) {
  models::GptConfig c = models::GptConfig::from_json(std::string(fuzz::as_string_view(data)), "fuzz input");
  const std::string text = c.to_json();
  KILN_CHECK(models::GptConfig::from_json(text, "written back").to_json() == text, InternalError,
             "gpt_config: the written configuration reads back differently: {}", text);
}

}  // namespace kiln
