// `kiln bench gpt`: the byte-level GPT of the zoo (models/gpt.h) at the
// reference size, 4 layers, 4 heads, width 256, context 128, batch 32, AdamW:
// training tokens/s hybridized in float32 and under bf16 mixed precision, and
// sampling tokens/s with and without the KV cache (batch 1, 8-byte prompt,
// 120 bytes, so the text fits in the context). bench/pytorch_compare.py
// measures the same model in PyTorch (bench/pytorch_gpt.py).
#include <optional>

#include "bench/bench.h"
#include "frontend/amp.h"
#include "frontend/kiln.h"
#include "models/gpt.h"
#include "models/gpt_generate.h"
#include "runtime/engine.h"

namespace kiln::bench {
namespace {

constexpr int64_t kBatch = 32, kContext = 128;

models::GptConfig reference_config() { return {.layers = 4, .heads = 4, .width = 256, .context = kContext}; }

double train_tokens_per_s(const Options& options, std::optional<DType> amp_dtype) {
  nd::random::seed(0);
  models::Gpt net(reference_config());
  net.initialize(init::Normal(0.02));
  net.hybridize({.amp = amp_dtype});
  Trainer trainer(net.collect_params(), optim::AdamW({.lr = 1e-3, .wd = 0.1}));
  NDArray x = nd::random::uniform({kBatch, kContext}, 0, 255.99).astype(DType::kInt32);
  NDArray y = nd::random::uniform({kBatch, kContext}, 0, 255.99).astype(DType::kInt32);
  loss::SequenceSoftmaxCrossEntropy ce;
  auto step = [&] {
    NDArray l;
    {
      autograd::Record record;
      l = ce(net(x), y);
    }
    autograd::backward({l});
    trainer.step(1);
  };
  for (int i = 0; i < 2; ++i) step();
  engine::wait_all();
  constexpr int kSteps = 5;
  double s = best_of(options.repeat, [&] {
    auto start = Clock::now();
    for (int i = 0; i < kSteps; ++i) step();
    engine::wait_all();
    return seconds_since(start);
  });
  return static_cast<double>(kSteps * kBatch * kContext) / s;
}

double generate_tokens_per_s(const Options& options, bool use_cache) {
  nd::random::seed(0);
  models::Gpt net(reference_config());
  net.initialize(init::Normal(0.02));
  constexpr int64_t kTokens = 120;
  models::SampleOptions o{.tokens = kTokens, .temperature = 1.0, .top_k = 0, .seed = 1, .use_cache = use_cache};
  models::generate(net, "Q: Why i", {.tokens = 4, .seed = 1, .use_cache = use_cache});  // warm-up
  double s = best_of(options.repeat, [&] {
    auto start = Clock::now();
    models::generate(net, "Q: Why i", o);
    return seconds_since(start);
  });
  return static_cast<double>(kTokens) / s;
}

std::vector<Figure> bench_gpt(const Options& options) {
  return {{"train_gpt_tokens_per_s", train_tokens_per_s(options, std::nullopt), "tokens/s"},
          {"train_gpt_bf16_tokens_per_s", train_tokens_per_s(options, DType::kBfloat16), "tokens/s"},
          {"generate_gpt_tokens_per_s", generate_tokens_per_s(options, true), "tokens/s"},
          {"generate_gpt_nocache_tokens_per_s", generate_tokens_per_s(options, false), "tokens/s"}};
}

}  // namespace

void register_gpt_benchmarks() {
  add({"gpt",
       {"train_gpt_tokens_per_s", "train_gpt_bf16_tokens_per_s", "generate_gpt_tokens_per_s",
        "generate_gpt_nocache_tokens_per_s"},
       &bench_gpt});
}

}  // namespace kiln::bench
