#include "frontend/nn/transformer_block.h"

#include "frontend/nd_elemwise.h"

namespace kiln::nn {
namespace {
int64_t hidden_or_default(int64_t units, int64_t hidden) { return hidden > 0 ? hidden : 4 * units; }
}  // namespace

TransformerBlock::TransformerBlock(int64_t units, int heads, int64_t hidden, bool causal, double dropout)
    : dropout_rate_(dropout),
      ln1_(-1, 1e-5, true, true, units),
      ln2_(-1, 1e-5, true, true, units),
      attn_(units, heads, causal, dropout),
      fc_(hidden_or_default(units, hidden), "", true, /*flatten=*/false, units),
      proj_(units, "", true, /*flatten=*/false, hidden_or_default(units, hidden)),
      dropout_(dropout) {
  KILN_CHECK(hidden >= 0, ValueError, "TransformerBlock: hidden must be >= 0 (0: 4 x units), got {}", hidden);
  register_child("ln1", ln1_);
  register_child("attn", attn_);
  register_child("ln2", ln2_);
  register_child("fc", fc_);
  register_child("gelu", gelu_);
  register_child("proj", proj_);
  if (dropout > 0) register_child("dropout", dropout_);
}

NDArray TransformerBlock::feed_forward(const NDArray& h) {
  NDArray y = proj_(gelu_(fc_(ln2_(h))));
  return dropout_rate_ > 0 ? dropout_(y) : y;
}

NDArray TransformerBlock::forward(const NDArray& x) {
  NDArray h = x + attn_(ln1_(x));
  return h + feed_forward(h);
}

NDArray TransformerBlock::forward(const NDArray& x, AttentionCache& cache) {
  NDArray h = x + attn_.forward(ln1_(x), cache);
  return h + feed_forward(h);
}

}  // namespace kiln::nn
