#include "frontend/nn/multi_head_attention.h"

#include "frontend/nd_attention.h"
#include "frontend/nd_matrix.h"

namespace kiln::nn {

MultiHeadAttention::MultiHeadAttention(int64_t units, int heads, bool causal, double dropout, bool use_bias)
    : units_(units),
      heads_(heads),
      causal_(causal),
      dropout_rate_(dropout),
      qkv_(3 * units, "", use_bias, /*flatten=*/false, units),
      proj_(units, "", use_bias, /*flatten=*/false, units),
      dropout_(dropout) {
  KILN_CHECK(units >= 1 && heads >= 1 && units % heads == 0, ValueError,
             "MultiHeadAttention: units ({}) must be a positive multiple of heads ({})", units, heads);
  register_child("qkv", qkv_);
  register_child("proj", proj_);
  if (dropout > 0) register_child("dropout", dropout_);
}

NDArray MultiHeadAttention::forward(const NDArray& x) { return attend(x, nullptr); }

NDArray MultiHeadAttention::forward(const NDArray& x, AttentionCache& cache) { return attend(x, &cache); }

NDArray MultiHeadAttention::attend(const NDArray& x, AttentionCache* cache) {
  KILN_CHECK(x.ndim() == 3 && x.shape()[2] == units_, ShapeError,
             "MultiHeadAttention: expected x [N, T, {}], got {}", units_, x.shape());
  // [N, T, 3 units] -> [N, T, 3, heads, head] -> [3, N, heads, T, head]
  NDArray qkv = nd::reshape(qkv_(x), {0, 0, 3, heads_, -1});
  std::vector<NDArray> parts = nd::split(nd::transpose(qkv, {2, 0, 3, 1, 4}), 3, 0, /*squeeze_axis=*/true);
  NDArray k = parts[1], v = parts[2];
  if (cache != nullptr) {
    if (cache->length() > 0) {
      KILN_CHECK(cache->keys.shape()[0] == x.shape()[0], ShapeError,
                 "MultiHeadAttention: x {} does not continue the cache's batch of {}", x.shape(),
                 cache->keys.shape()[0]);
      k = nd::concat({cache->keys, k}, 2);
      v = nd::concat({cache->values, v}, 2);
    }
    cache->keys = k;
    cache->values = v;
  }
  NDArray a = nd::scaled_dot_product_attention(parts[0], k, v, {.causal = causal_});
  // [N, heads, T, head] -> [N, T, heads, head] -> [N, T, units]
  NDArray merged = nd::reshape(nd::transpose(a, {0, 2, 1, 3}), {0, 0, -1});
  NDArray y = proj_(merged);
  return dropout_rate_ > 0 ? dropout_(y) : y;
}

std::string MultiHeadAttention::to_string() const {
  return fmt::format("{}(units={}, heads={}, causal={})", type_name(), units_, heads_, causal_ ? "True" : "False");
}

}  // namespace kiln::nn
