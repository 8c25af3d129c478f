// A small hybrid MLP (Dense 16, relu, Dense 3) shared by the hybridize
// suites (hybridize_test.cc, hybridize_train_test.cc).
#pragma once

#include "frontend/kiln.h"

namespace kiln::test {

struct HybridNet : nn::HybridBlock {
  nn::Dense hidden{16}, output{3};
  HybridNet() {
    register_child("hidden", hidden);
    register_child("output", output);
  }
  NDArray forward(const NDArray& x) override { return output(nd::relu(hidden(x))); }
};

}  // namespace kiln::test
