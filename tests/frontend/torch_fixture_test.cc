// Layers against PyTorch: every case of tests/data/torch/manifest.json (written
// by scripts/make_torch_fixtures.py, never run by the tests) runs one Kiln op
// by its MXNet name and MXNet string attributes, or one Gluon loss, on the
// fixture's inputs, and compares the outputs, the gradients of
// sum(output * head) for every listed input, and the inputs a train-mode op
// updates in place (BatchNorm's moving statistics) with PyTorch's values.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <ostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "frontend/npy.h"
#include "frontend/train/loss.h"
#include "ir/op.h"

namespace kiln {
namespace {

const std::string kDir = KILN_TORCH_FIXTURES;

struct Case {
  std::string name, op;
  AttrMap attrs;
  int inputs = 0, outputs = 1;
  std::vector<int> grad, after;
  bool train = false;
  double rtol = 1e-4, atol = 1e-5;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name << " (" << c.op << ")"; }

std::vector<Case> load_cases() {
  std::ifstream in(kDir + "/manifest.json");
  if (!in) return {};
  nlohmann::json m = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const auto& c : m.at("cases")) {
    Case k;
    k.name = c.at("name");
    k.op = c.at("op");
    for (const auto& [key, value] : c.at("attrs").items()) k.attrs[key] = value.get<std::string>();
    k.inputs = c.at("inputs");
    k.outputs = c.at("outputs");
    k.grad = c.at("grad").get<std::vector<int>>();
    k.after = c.at("after").get<std::vector<int>>();
    k.train = c.at("train");
    k.rtol = c.at("rtol");
    k.atol = c.at("atol");
    cases.push_back(std::move(k));
  }
  return cases;
}

NDArray fixture(const Case& c, const std::string& tag) { return npy::load(kDir + "/" + c.name + "." + tag + ".npy"); }

// Elementwise |got - want| <= atol + rtol * |want|, naming the first element that is not.
void expect_close(const NDArray& got, const NDArray& want, const Case& c, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << c.name << ": " << what;
  std::vector<float> g = got.astype(DType::kFloat32).to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - w[i]) <= c.atol + c.rtol * std::abs(w[i]))) {
      ADD_FAILURE() << c.name << " (" << c.op << "): " << what << " element " << i << ": Kiln " << g[i]
                    << ", PyTorch " << w[i] << " (atol " << c.atol << ", rtol " << c.rtol << ")";
      return;
    }
  }
}

// The op's outputs as the fixture lists them (a loss: its one [N] output).
std::vector<NDArray> run(const Case& c, const std::vector<NDArray>& in) {
  if (c.op.starts_with("loss:")) {
    std::string loss = c.op.substr(5);
    if (loss == "SoftmaxCrossEntropy") return {loss::SoftmaxCrossEntropy{}(in[0], in[1])};
    if (loss == "L2Loss") return {loss::L2Loss{}(in[0], in[1])};
    if (loss == "L1Loss") return {loss::L1Loss{}(in[0], in[1])};
    if (loss == "SigmoidBinaryCrossEntropy") return {loss::SigmoidBinaryCrossEntropy{}(in[0], in[1])};
    ADD_FAILURE() << c.name << ": unknown loss '" << loss << "' in the manifest";
    return {};
  }
  const OpDef* def = find_op(c.op);
  if (def == nullptr) {
    ADD_FAILURE() << c.name << ": unknown op '" << c.op << "' in the manifest";
    return {};
  }
  OpAttrs attrs = def->parse_attrs ? def->parse_attrs(c.op, c.attrs) : OpAttrs{};
  std::vector<NDArray> outs = invoke(def->id, in, attrs);
  outs.resize(static_cast<size_t>(c.outputs));  // BatchNorm: the output, not the batch mean and variance
  return outs;
}

class TorchFixture : public ::testing::TestWithParam<Case> {};

TEST_P(TorchFixture, ForwardGradientsAndUpdatedStates) {
  const Case& c = GetParam();
  std::vector<NDArray> in;
  for (int i = 0; i < c.inputs; ++i) in.push_back(fixture(c, "in" + std::to_string(i)));
  for (int i : c.grad) in[static_cast<size_t>(i)].attach_grad();
  std::vector<NDArray> outs;
  {
    autograd::Record record(c.train);
    outs = run(c, in);
  }
  ASSERT_EQ(outs.size(), static_cast<size_t>(c.outputs));
  std::vector<NDArray> heads;
  for (int j = 0; j < c.outputs; ++j) {
    expect_close(outs[static_cast<size_t>(j)], fixture(c, "out" + std::to_string(j)), c, "output " + std::to_string(j));
    heads.push_back(fixture(c, "head" + std::to_string(j)));
  }
  if (!c.grad.empty()) {
    autograd::backward(outs, heads, {.train_mode = c.train});
    for (int i : c.grad) {
      expect_close(in[static_cast<size_t>(i)].grad(), fixture(c, "grad" + std::to_string(i)), c,
                   "gradient of input " + std::to_string(i));
    }
  }
  for (int i : c.after) {
    expect_close(in[static_cast<size_t>(i)], fixture(c, "after" + std::to_string(i)), c,
                 "input " + std::to_string(i) + " after the call");
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorch, TorchFixture, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// The manifest is committed with its fixtures: an empty or missing one would
// make the suite above vacuous.
TEST(TorchFixtures, ManifestCoversTheLayers) {
  std::vector<Case> cases = load_cases();
  ASSERT_GE(cases.size(), 30u) << "tests/data/torch/manifest.json missing or truncated; rerun "
                                  "scripts/make_torch_fixtures.py";
  for (std::string op : {"FullyConnected", "Convolution", "Pooling", "BatchNorm", "Activation", "LeakyReLU",
                         "softmax", "log_softmax", "loss:SoftmaxCrossEntropy", "loss:L2Loss", "loss:L1Loss",
                         "loss:SigmoidBinaryCrossEntropy"}) {
    bool found = false;
    for (const Case& c : cases) found = found || c.op == op;
    EXPECT_TRUE(found) << "no fixture for " << op;
  }
}

}  // namespace
}  // namespace kiln
