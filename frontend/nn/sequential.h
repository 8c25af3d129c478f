// Sequential and HybridSequential: children called in order, each on the
// previous one's output (Gluon's nn.Sequential / nn.HybridSequential).
//
//   nn::HybridSequential net;
//   net.add(nn::Dense(256, "relu"), nn::Dense(128, "relu"), nn::Dense(2));
//   net.initialize();
//   NDArray y = net(nd::random::normal({1, 512}));   // [1,2]
//   net[0];                                           // the first Dense, as a Block&
//   net.at<nn::Dense>(0).weight();                    // typed access (TypeError if not a Dense)
//
// Children are named "0", "1", ... in the order added, so parameters are
// "0.weight", "0.bias", "1.weight", ... for every instance. An empty
// container returns its input. With several inputs, the first child gets all
// of them and each later child gets the previous one's outputs.
// HybridSequential accepts only HybridBlocks (ValueError naming the child).
#pragma once

#include <cstddef>
#include <memory>

#include "frontend/nn/block.h"

namespace kiln::nn {

namespace detail {
NDArray chain_forward(const std::vector<Block::Child>& children, const NDArray& x);
std::vector<NDArray> chain_forward(const std::vector<Block::Child>& children, std::span<const NDArray> xs);
Block& child_at(const Block& container, size_t i);
}  // namespace detail

// Shared by the containers: add(blocks...), size(), [i], at<T>(i).
template <typename Base>
class ContainerMixin : public Base {
 public:
  // Adds each block (by value, stored as its own type, or a shared_ptr to a Block).
  template <typename... Ts>
  ContainerMixin& add(Ts... blocks) {
    (add_one(std::move(blocks)), ...);
    return *this;
  }
  size_t size() const { return this->children().size(); }
  // IndexError when i >= size().
  Block& operator[](size_t i) const { return detail::child_at(*this, i); }
  // The child as its own type; TypeError naming both types otherwise.
  template <std::derived_from<Block> T>
  T& at(size_t i) const {
    Block& b = detail::child_at(*this, i);
    auto* t = dynamic_cast<T*>(&b);
    KILN_CHECK(t != nullptr, TypeError, "{}: child {} is a {}, not the type asked for", this->type_name(), i,
               b.type_name());
    return *t;
  }

 private:
  template <std::derived_from<Block> T>
  void add_one(T block) {
    this->register_child(std::to_string(size()), std::move(block));
  }
  void add_one(std::shared_ptr<Block> block) { this->register_child(std::to_string(size()), std::move(block)); }
};

class Sequential : public ContainerMixin<Block> {
 public:
  NDArray forward(const NDArray& x) override { return detail::chain_forward(children(), x); }
  std::vector<NDArray> forward(std::span<const NDArray> xs) override { return detail::chain_forward(children(), xs); }
};

class HybridSequential : public ContainerMixin<HybridBlock> {
 public:
  NDArray forward(const NDArray& x) override { return detail::chain_forward(children(), x); }
  std::vector<NDArray> forward(std::span<const NDArray> xs) override { return detail::chain_forward(children(), xs); }
};

}  // namespace kiln::nn
