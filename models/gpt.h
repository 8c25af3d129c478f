// A small GPT: a byte-level decoder-only transformer (GPT-2's layout).
//
//   models::Gpt net({.layers = 4, .heads = 4, .width = 256, .context = 128});
//   net.initialize(init::Normal(0.02));
//   NDArray logits = net(ids);                    // ids [N, T] int32, T <= context -> [N, T, vocab]
//
//   models::GptCache cache;                       // decoding with a KV cache
//   NDArray first = net.forward(prompt, cache);   // [N, P, vocab]
//   NDArray next = net.forward(one_id, cache);    // [N, 1, vocab]: attends to all P + 1 positions
//
// Token embedding ("embed", vocab -> width) plus a learned position
// embedding ("pos_weight", [context, width]), `layers` pre-norm
// nn::TransformerBlocks ("blocks.0" ...), a final LayerNorm ("ln_f") and a
// bias-free Dense head ("head", width -> vocab). Positions count from the
// cache's length, so decoding continues where the prompt ended.
//
// Errors: ShapeError naming both when ids is not [N, T] or T (plus the
// cache's length) exceeds the context; token ids outside [0, vocab) are
// Embedding's IndexError naming the id and the vocabulary size; ValueError
// for a configuration that does not fit (width not a multiple of heads, ...).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frontend/nn/nn.h"

namespace kiln::models {

struct GptConfig {
  int64_t vocab = 256;
  int layers = 4;
  int heads = 4;
  int64_t width = 256;
  int64_t context = 128;
  double dropout = 0;

  // {"vocab":256,"layers":4,...}: what `kiln train --model gpt --save` writes
  // beside the parameters, so that `kiln generate` can rebuild the model.
  std::string to_json() const;
  // ValueError naming the field for a missing or out-of-range value; `source` names the text in errors.
  static GptConfig from_json(const std::string& text, const std::string& source);
};

struct GptCache {
  std::vector<nn::AttentionCache> layers;
  int64_t length() const { return layers.empty() ? 0 : layers[0].length(); }
};

class Gpt : public nn::HybridBlock {
 public:
  explicit Gpt(GptConfig config = {});

  using HybridBlock::forward;
  NDArray forward(const NDArray& ids) override;
  NDArray forward(const NDArray& ids, GptCache& cache);

  const GptConfig& config() const { return config_; }

 private:
  NDArray embed(const NDArray& ids, int64_t offset);

  GptConfig config_;
  nn::Embedding embed_;
  nn::Parameter pos_;
  nn::HybridSequential blocks_;
  std::vector<nn::TransformerBlock> block_list_;
  nn::LayerNorm ln_f_;
  nn::Dense head_;
};

}  // namespace kiln::models
