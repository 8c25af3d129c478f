// Sampling text from a models::Gpt, with or without a KV cache.
//
//   models::SampleOptions o{.tokens = 200, .temperature = 0.8, .top_k = 40, .seed = 1};
//   std::string more = models::generate(net, "Q: Why", o);   // 200 bytes after the prompt
//
// The prompt's bytes (its last `context` bytes when longer; a single "\n"
// when empty) are run once; then each step samples one byte from the last
// position's logits and feeds it back. With the cache (the default) a step
// runs the model on that one byte against the cached keys and values; when
// the cache reaches the context, it restarts from the last context / 2
// bytes. Without it (use_cache false, for comparison) every step runs the
// whole window (the last `context` bytes) again. While the text fits in the
// context both compute the same logits (up to rounding), so they give the
// same bytes for the same seed.
//
// temperature 0 is greedy (argmax); otherwise logits / temperature, limited
// to the top_k largest when top_k > 0, are sampled with std::mt19937_64
// seeded by `seed`: the same seed gives the same text. Runs in predict mode
// on the device of the model's parameters.
//
// ValueError for tokens < 0, temperature < 0 or top_k < 0.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "models/gpt.h"

namespace kiln::models {

struct SampleOptions {
  int64_t tokens = 200;
  double temperature = 1.0;
  int64_t top_k = 0;  // 0: every byte
  uint64_t seed = 0;
  bool use_cache = true;
  Device device = Device::cpu(0);
};

std::string generate(Gpt& net, std::string_view prompt, const SampleOptions& options = {});

}  // namespace kiln::models
