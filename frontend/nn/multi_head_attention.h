// MultiHeadAttention: self-attention with several heads over a sequence
// (Gluon-NLP's MultiHeadAttentionCell with its projections, PyTorch's
// nn.MultiheadAttention with batch_first and one input).
//
//   nn::MultiHeadAttention attn(256, 4);                 // units 256, 4 heads of 64, causal
//   attn.initialize();
//   NDArray y = attn(x);                                 // x [N, T, 256] -> [N, T, 256]
//
//   nn::AttentionCache cache;                            // decoding: keys and values so far
//   NDArray a = attn.forward(prompt, cache);             // [N, P, 256]; cache holds P positions
//   NDArray b = attn.forward(next, cache);               // [N, 1, 256]; attends to all P + 1
//
// One Dense (units -> 3 units, "qkv", no flattening) projects x to queries,
// keys and values; they are split into `heads` heads of units / heads,
// attended with nd::scaled_dot_product_attention (scale 1/sqrt(head size),
// causal when `causal`), merged back and projected by a second Dense
// ("proj", units -> units), followed by dropout at `dropout` in training.
// The cache variant appends this call's keys and values ([N, heads, T, head
// size]) to the cache and attends to all of them; the causal rule aligns the
// new queries with the last positions.
//
// ValueError at construction when units is not a multiple of heads; a
// ShapeError naming the shapes when x is not [N, T, units] or does not
// continue the cache's batch.
//
// Prints "MultiHeadAttention(units=256, heads=4, causal=True)".
#pragma once

#include "frontend/nn/block.h"
#include "frontend/nn/dense.h"
#include "frontend/nn/dropout.h"

namespace kiln::nn {

struct AttentionCache {
  NDArray keys, values;  // [N, heads, T, head size]; none before the first call
  int64_t length() const { return keys.is_none() ? 0 : keys.shape()[2]; }
};

class MultiHeadAttention : public HybridBlock {
 public:
  MultiHeadAttention(int64_t units, int heads, bool causal = true, double dropout = 0, bool use_bias = true);

  using HybridBlock::forward;
  NDArray forward(const NDArray& x) override;
  NDArray forward(const NDArray& x, AttentionCache& cache);
  std::string to_string() const override;

  int64_t units() const { return units_; }
  int heads() const { return heads_; }

 private:
  NDArray attend(const NDArray& x, AttentionCache* cache);

  int64_t units_;
  int heads_;
  bool causal_;
  double dropout_rate_;
  Dense qkv_, proj_;
  Dropout dropout_;
};

}  // namespace kiln::nn
