// TransformerBlock: one pre-norm transformer layer (GPT-2's block).
//
//   nn::TransformerBlock block(256, 4);              // units 256, 4 heads, hidden 1024, causal
//   block.initialize();
//   NDArray y = block(x);                            // x [N, T, 256] -> [N, T, 256]
//
//   h = x + attn(ln1(x))
//   y = h + proj(dropout?(gelu(fc(ln2(h)))))      (fc: units -> hidden, proj: hidden -> units)
//
// Children: "ln1" (LayerNorm), "attn" (MultiHeadAttention, with `causal`
// and `dropout`), "ln2", "fc" (Dense to `hidden`, 0 meaning 4 units), "gelu"
// (the erf form), "proj" (Dense back to units), and "dropout" after proj
// when dropout > 0. forward(x, cache) is the decoding form
// (MultiHeadAttention's cache). Errors are those of the children.
//
// Prints its children as Gluon does.
#pragma once

#include "frontend/nn/block.h"
#include "frontend/nn/dense.h"
#include "frontend/nn/dropout.h"
#include "frontend/nn/gelu.h"
#include "frontend/nn/layer_norm.h"
#include "frontend/nn/multi_head_attention.h"

namespace kiln::nn {

class TransformerBlock : public HybridBlock {
 public:
  TransformerBlock(int64_t units, int heads, int64_t hidden = 0, bool causal = true, double dropout = 0);

  using HybridBlock::forward;
  NDArray forward(const NDArray& x) override;
  NDArray forward(const NDArray& x, AttentionCache& cache);

 private:
  NDArray feed_forward(const NDArray& h);

  double dropout_rate_;
  LayerNorm ln1_, ln2_;
  MultiHeadAttention attn_;
  Dense fc_, proj_;
  GELU gelu_;
  Dropout dropout_;
};

}  // namespace kiln::nn
