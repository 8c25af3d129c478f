// 2-D pooling over NCHW input (Gluon's nn.MaxPool2D, AvgPool2D,
// GlobalAvgPool2D, GlobalMaxPool2D; the Pooling op).
//
//   net.add(nn::Conv2D(6, 5), nn::MaxPool2D(2));       // 2x2 windows, stride 2
//   nn::AvgPool2D(3, 2, 1, true, false);                // 3x3, stride 2, pad 1, ceil, pad excluded
//   nn::GlobalAvgPool2D()(x);                           // [N,C,H,W] -> [N,C,1,1]
//
// `strides` 0 (the default) means `pool_size`. ceil_mode picks the output size rounding
// (pooling_convention "full" rather than "valid"): out = ceil((in + 2 pad -
// size) / stride) + 1 instead of floor. AvgPool2D's count_include_pad divides
// by the whole window (padding included) or only by the part inside the input.
// Prints as Gluon: "MaxPool2D(size=(2, 2), stride=(2, 2), padding=(0, 0),
// ceil_mode=False, global_pool=False, pool_type=max, layout=NCHW)".
#pragma once

#include <optional>

#include "frontend/nn/block.h"
#include "frontend/nn/conv2d.h"
#include "ir/ops/conv.h"

namespace kiln::nn {

// The common part: a Pooling op with fixed attributes.
class Pooling2D : public HybridBlock {
 public:
  NDArray forward(const NDArray& x) override;
  std::string to_string() const override;
  const PoolingAttrs& attrs() const { return attrs_; }

 protected:
  // ValueError for non-positive sizes or strides, or negative padding.
  Pooling2D(Int2 pool_size, Int2 strides, Int2 padding, bool ceil_mode, bool global_pool, const char* pool_type,
            std::optional<bool> count_include_pad);

 private:
  PoolingAttrs attrs_;
};

class MaxPool2D : public Pooling2D {
 public:
  explicit MaxPool2D(Int2 pool_size = 2, Int2 strides = 0, Int2 padding = 0, bool ceil_mode = false)
      : Pooling2D(pool_size, strides, padding, ceil_mode, false, "max", std::nullopt) {}
};

class AvgPool2D : public Pooling2D {
 public:
  explicit AvgPool2D(Int2 pool_size = 2, Int2 strides = 0, Int2 padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true)
      : Pooling2D(pool_size, strides, padding, ceil_mode, false, "avg", count_include_pad) {}
};

class GlobalMaxPool2D : public Pooling2D {
 public:
  GlobalMaxPool2D() : Pooling2D(1, 1, 0, true, true, "max", std::nullopt) {}
};

class GlobalAvgPool2D : public Pooling2D {
 public:
  GlobalAvgPool2D() : Pooling2D(1, 1, 0, true, true, "avg", std::nullopt) {}
};

}  // namespace kiln::nn
