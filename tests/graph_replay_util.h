// Test helpers shared by the device-graph tests (tests/cuda/cuda_graph_test.cc
// on a GPU, tests/frontend/graph_executor_capture_test.cc on the fake backend
// of CPU-only builds): the graphs switch for a scope, inputs on a device,
// and the replay-versus-launches comparisons both make.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/kiln.h"
#include "models/zoo.h"
#include "runtime/graph_capture.h"

namespace kiln::test {

// Sets the graphs switch for a scope.
class GraphsOn {
 public:
  explicit GraphsOn(bool on) : before_(graph_capture_enabled()) { graph_capture_set_enabled(on); }
  ~GraphsOn() { graph_capture_set_enabled(before_); }
  GraphsOn(const GraphsOn&) = delete;
  GraphsOn& operator=(const GraphsOn&) = delete;

 private:
  bool before_;
};

// `n` seeded normal arrays of `shape` on `device`.
inline std::vector<NDArray> inputs_on(Device device, const Shape& shape, int n, uint64_t seed) {
  nd::random::seed(seed);
  std::vector<NDArray> xs;
  for (int i = 0; i < n; ++i) xs.push_back(nd::random::normal(shape).copy_to(device));
  return xs;
}

// The trace and deferred initialization, with graphs off: the segment's
// warm-up run is still to come.
template <typename Net>
void first_call(Net& net, const NDArray& x) {
  GraphsOn off(false);
  net(x).wait_to_read();
}

// Calls `net` on every input `rounds` times with graphs on, keeping every
// output, and checks each against the graphs-off result of its input bit for
// bit (an output handed out earlier must not change with later replays).
template <typename Net>
void expect_replay_matches(Net& net, const std::vector<NDArray>& xs, int rounds) {
  std::vector<std::vector<float>> want;
  {
    GraphsOn off(false);
    for (const NDArray& x : xs) want.push_back(net(x).template to_vector<float>());
  }
  GraphsOn on(true);
  std::vector<NDArray> got;
  for (int r = 0; r < rounds; ++r)
    for (const NDArray& x : xs) got.push_back(net(x));
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i].template to_vector<float>(), want[i % xs.size()])
        << "call " << i << " (input " << i % xs.size() << ")";
}

// `values(graphs)` with graphs off, then on: equal bit for bit.
inline void expect_same_with_and_without_graphs(const std::function<std::vector<std::vector<float>>(bool)>& values) {
  auto want = values(false);
  auto got = values(true);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "value " << i;
}

// Three rounds of training-mode forward calls (no recording) of a net made
// by `make`, then its parameters: BatchNorm's running statistics are updated
// in place by every call, replayed or launched.
template <typename Make>
std::vector<std::vector<float>> train_mode_values(Make make, Device device, const std::vector<NDArray>& xs,
                                                  bool graphs) {
  GraphsOn switch_(graphs);
  auto net = make();
  std::vector<std::vector<float>> out;
  autograd::TrainMode train;
  for (int r = 0; r < 3; ++r)
    for (const NDArray& x : xs) out.push_back(net(x).template to_vector<float>());
  for (auto& [name, p] : net.collect_params()) out.push_back(p.data(device).template to_vector<float>());
  return out;
}

// Three rounds of training steps of the chapter's MLP over `xs`, each loss
// and every gradient. Two calls before one backward: two saved-value blocks
// alive at once, so the calls' blocks change address from step to step.
inline std::vector<std::vector<float>> mlp_training_values(Device device, const std::vector<NDArray>& xs,
                                                           bool graphs) {
  GraphsOn switch_(graphs);
  nd::random::seed(0);
  auto net = models::mlp_chapter();
  net.initialize(init::Xavier(), device);
  net.hybridize();
  std::vector<std::vector<float>> out;
  for (int r = 0; r < 3; ++r) {
    for (size_t k = 0; k < xs.size(); ++k) {
      NDArray loss;
      {
        autograd::Record record;
        NDArray y = net(xs[k]), z = net(xs[(k + 1) % xs.size()]);
        loss = nd::sum(y * y) + nd::sum(z * z);
      }
      autograd::backward({loss});
      out.push_back(loss.to_vector<float>());
      for (auto& [name, p] : net.collect_params()) out.push_back(p.grad(device).to_vector<float>());
    }
  }
  return out;
}

// A block whose forward reads its input back to the host (one_hot of an
// argmax): never captured.
struct OneHotNet : nn::HybridBlock {
  nn::Dense dense{4};
  OneHotNet() { register_child("dense", dense); }
  NDArray forward(const NDArray& x) override { return dense(nd::one_hot(nd::argmax(x, 1), 4)); }
};

}  // namespace kiln::test
