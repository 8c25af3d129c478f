// Embedding: a lookup table of learned vectors, one per token id (Gluon's
// nn.Embedding).
//
//   nn::Embedding emb(256, 64);                        // 256 ids, 64 values each
//   emb.initialize();
//   NDArray x = emb(nd::array(std::vector<int32_t>{3, 1, 4}, Shape{1, 3}));   // [1, 3, 64]
//
// Parameter "weight" [input_dim, output_dim], initialized by the layer's own
// initializer if given, else by the one given to initialize() (as Dense's
// weight). Runs MXNet's Embedding
// op, so it exports as MXNet writes it; the weight's gradient adds dy's rows
// into the rows the ids picked. An id outside [0, input_dim) is an
// IndexError naming the id and input_dim.
//
// Prints as Gluon: "Embedding(256 -> 64, float32)".
#pragma once

#include <optional>

#include "frontend/nn/block.h"

namespace kiln::nn {

class Embedding : public HybridBlock {
 public:
  // ValueError for input_dim or output_dim < 1.
  Embedding(int64_t input_dim, int64_t output_dim, DType dtype = DType::kFloat32,
            std::optional<init::Initializer> weight_initializer = std::nullopt);

  NDArray forward(const NDArray& ids) override;
  std::string to_string() const override;

  Parameter weight() const { return weight_; }

 private:
  int64_t input_dim_, output_dim_;
  Parameter weight_;
};

}  // namespace kiln::nn
