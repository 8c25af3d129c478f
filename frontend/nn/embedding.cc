#include "frontend/nn/embedding.h"

#include "frontend/nd_nn.h"

namespace kiln::nn {

Embedding::Embedding(int64_t input_dim, int64_t output_dim, DType dtype,
                     std::optional<init::Initializer> weight_initializer)
    : input_dim_(input_dim), output_dim_(output_dim) {
  KILN_CHECK(input_dim >= 1 && output_dim >= 1, ValueError,
             "Embedding: input_dim and output_dim must be >= 1, got {} and {}", input_dim, output_dim);
  weight_ = register_parameter("weight", Shape{input_dim, output_dim}, {.dtype = dtype, .init = weight_initializer});
}

NDArray Embedding::forward(const NDArray& ids) { return nd::embedding(ids, weight_.data(ids.device())); }

std::string Embedding::to_string() const {
  return fmt::format("{}({} -> {}, {})", type_name(), input_dim_, output_dim_, dtype_name(weight_.dtype()));
}

}  // namespace kiln::nn
