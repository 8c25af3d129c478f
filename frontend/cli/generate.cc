// kiln generate: sample text from a GPT that `kiln train --model gpt --save
// PREFIX` wrote (PREFIX.params and PREFIX.json).
//
//   kiln generate gpt --prompt "Q: Why" --tokens 200 --temperature 0.8 --top-k 40 --seed 1
//   kiln generate gpt.params --prompt "A " --benchmark     # also prints tokens/s with and without the cache
//
// Prints the prompt followed by the sampled bytes. MODEL is the prefix or
// the .params file beside its .json. --no-cache runs the whole window every
// step instead of the KV cache (same text while it fits in the context).
// --benchmark prints `generate_tokens_per_s` (cached) and
// `generate_nocache_tokens_per_s` lines after the text.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "ir/error.h"
#include "models/gpt.h"
#include "models/gpt_generate.h"

namespace kiln::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  models::SampleOptions sample;
  bool no_cache = false;
  bool benchmark = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), IOError, "{}: cannot open (expected the GPT's configuration that kiln train --save writes)",
             path);
  std::ostringstream s;
  s << in.rdbuf();
  KILN_CHECK(s.str().size() < (1u << 20), IOError, "{}: larger than 1 MiB; not a GPT configuration", path);
  return s.str();
}

void run_generate(GenerateArgs args) {
  std::string prefix = args.model;
  if (prefix.size() > 7 && prefix.ends_with(".params")) prefix.resize(prefix.size() - 7);
  const std::string json_path = prefix + ".json";
  models::Gpt net(models::GptConfig::from_json(read_text(json_path), json_path));
  net.load_parameters(prefix + ".params");
  args.sample.use_cache = !args.no_cache;
  auto start = std::chrono::steady_clock::now();
  std::string text = models::generate(net, args.prompt, args.sample);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fwrite(args.prompt.data(), 1, args.prompt.size(), stdout);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
  if (args.benchmark) {
    models::SampleOptions other = args.sample;
    other.use_cache = !args.sample.use_cache;
    auto again = std::chrono::steady_clock::now();
    models::generate(net, args.prompt, other);
    double other_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - again).count();
    const double tokens = static_cast<double>(args.sample.tokens);
    const double cached = args.sample.use_cache ? seconds : other_seconds;
    const double uncached = args.sample.use_cache ? other_seconds : seconds;
    std::printf("generate_tokens_per_s %.4g tokens/s\n", tokens / cached);
    std::printf("generate_nocache_tokens_per_s %.4g tokens/s\n", tokens / uncached);
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Sample text from a GPT saved by kiln train --model gpt --save");
  cmd->add_option("model", args->model, "PREFIX (or PREFIX.params) of the saved GPT")->required();
  cmd->add_option("--prompt", args->prompt, "Text to continue (empty: a newline)");
  cmd->add_option("--tokens", args->sample.tokens, "Bytes to sample")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", args->sample.temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", args->sample.top_k, "Sample among the K likeliest bytes only (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", args->sample.seed, "Seed of the sampler")->capture_default_str();
  cmd->add_flag("--no-cache", args->no_cache, "Run the whole window every step instead of using the KV cache");
  cmd->add_flag("--benchmark", args->benchmark, "Also print tokens/s with and without the KV cache");
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace kiln::cli
