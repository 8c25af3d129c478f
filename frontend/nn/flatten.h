// Flatten: [N, d1, d2, ...] -> [N, d1*d2*...] (Gluon's nn.Flatten; the Flatten op).
//
//   net.add(nn::Conv2D(8, 3), nn::Flatten(), nn::Dense(10));
#pragma once

#include "frontend/nn/block.h"

namespace kiln::nn {

class Flatten : public HybridBlock {
 public:
  NDArray forward(const NDArray& x) override;
  std::string to_string() const override { return type_name(); }  // "Flatten", as Gluon
};

}  // namespace kiln::nn
