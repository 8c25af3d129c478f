// Lambda and HybridLambda: a block around a function of one NDArray.
//
//   nn::HybridLambda square([](const NDArray& x) { return x * x; }, "square");
//   net.add(nn::Dense(8), square);
//   std::cout << square;   // HybridLambda(square)
//
// HybridLambda's function must be a plain function of its input (issue 4
// traces it); Lambda may do anything (read values, branch on them), and so
// cannot be a child of a HybridBlock.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "frontend/nn/block.h"

namespace kiln::nn {

using LambdaFunction = std::function<NDArray(const NDArray&)>;

class Lambda : public Block {
 public:
  // ValueError for an empty function.
  explicit Lambda(LambdaFunction fn, std::string description = "<function>");
  Lambda(const Lambda&) = default;  // no move: a moved-from handle stays valid
  Lambda& operator=(const Lambda&) = default;
  NDArray forward(const NDArray& x) override;
  std::string to_string() const override;

 private:
  std::shared_ptr<const LambdaFunction> fn_;
  std::string description_;
};

class HybridLambda : public HybridBlock {
 public:
  explicit HybridLambda(LambdaFunction fn, std::string description = "<function>");
  HybridLambda(const HybridLambda&) = default;
  HybridLambda& operator=(const HybridLambda&) = default;
  NDArray forward(const NDArray& x) override;
  std::string to_string() const override;

 private:
  std::shared_ptr<const LambdaFunction> fn_;
  std::string description_;
};

}  // namespace kiln::nn
