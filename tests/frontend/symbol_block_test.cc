// SymbolBlock: real MXNet exports load and run; Kiln's exports load back;
// params files are checked against the graph.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "frontend/autograd.h"
#include "frontend/graph_eval.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "frontend/formats/mxnet/export.h"
#include "frontend/formats/mxnet/params_io.h"
#include "frontend/nn/symbol_block.h"
#include "ir/ops/conv.h"
#include "ir/ops/nn.h"
#include "tests/frontend/grad_check.h"
#include "tests/test_util.h"

#ifndef KILN_TEST_DATA_DIR
#error "tests/CMakeLists.txt passes KILN_TEST_DATA_DIR"
#endif
#ifndef KILN_EXTRA_MXNET_MODELS
#define KILN_EXTRA_MXNET_MODELS ""
#endif

namespace kiln {
namespace {

namespace fs = std::filesystem;

using test::error_of;

// A model folder: in the repository (tests/data/mxnet-models), else in the
// extra directory (exports whose licence keeps them out of the repository).
std::optional<fs::path> model_dir(const std::string& name) {
  for (fs::path root : {fs::path(KILN_TEST_DATA_DIR) / "mxnet-models", fs::path(KILN_EXTRA_MXNET_MODELS)}) {
    if (!root.empty() && fs::is_directory(root / name)) return root / name;
  }
  return std::nullopt;
}

class TempDir {
 public:
  TempDir() {
    auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / fmt::format("kiln_symbol_block_{}_{}", info->name(), ::getpid());
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void expect_finite(const NDArray& a) {
  for (float v : a.to_vector<float>()) {
    ASSERT_TRUE(std::isfinite(v)) << "non-finite value in " << a.shape().to_string();
  }
}

NDArray input(const Shape& s) {
  nd::random::seed(7);
  return nd::random::uniform(s, 0, 255);
}

TEST(SymbolBlock, GluonLenet141) {
  auto dir = model_dir("gluon-lenet-1.4.1");
  if (!dir) GTEST_SKIP() << "gluon-lenet-1.4.1 not found (see tests/data/mxnet-models/README.md)";
  auto net = nn::SymbolBlock::imports(*dir / "lenet-symbol.json", {"data"}, *dir / "lenet-0001.params");
  EXPECT_EQ(net.collect_params().size(), 8u);
  NDArray y = net(input({1, 1, 28, 28}));
  EXPECT_EQ(y.shape(), (Shape{1, 10}));
  expect_finite(y);
  NDArray y4 = net(input({4, 1, 28, 28}));  // another batch size: a second graph
  EXPECT_EQ(y4.shape(), (Shape{4, 10}));
}

TEST(SymbolBlock, GluonMlp170) {
  auto dir = model_dir("gluon-mlp-1.7.0");
  if (!dir) GTEST_SKIP() << "gluon-mlp-1.7.0 not found (see tests/data/mxnet-models/README.md)";
  auto net = nn::SymbolBlock::imports(*dir / "net-symbol.json", {"data"}, *dir / "net-0001.params");
  EXPECT_EQ(net.param("hybridsequential0_dense0_weight").shape(), (Shape{128, 784}));
  NDArray y = net(nd::random::uniform({2, 784}));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
  expect_finite(y);
}

TEST(SymbolBlock, InsightfaceGenderAge130) {
  auto dir = model_dir("insightface-gender-age-1.3.0");
  ASSERT_TRUE(dir) << "tests/data/mxnet-models/insightface-gender-age-1.3.0 is part of the repository";
  auto net = nn::SymbolBlock::imports(*dir / "model-symbol.json", {"data"}, *dir / "model-0000.params");
  auto params = net.collect_params();
  EXPECT_EQ(params.size(), 146u);
  int aux = 0;
  for (auto& [name, p] : params) aux += p.is_aux() ? 1 : 0;
  EXPECT_EQ(aux, 58);
  EXPECT_TRUE(net.param("bn1_moving_var").is_aux());
  NDArray y = net(input({1, 3, 112, 112}));
  EXPECT_EQ(y.shape(), (Shape{1, 202}));
  expect_finite(y);
  // Inference must not touch the moving statistics.
  NDArray before = net.param("bn1_moving_mean").data().copy();
  net(input({1, 3, 112, 112})).wait_to_read();
  EXPECT_EQ(net.param("bn1_moving_mean").data().to_vector<float>(), before.to_vector<float>());
}

TEST(SymbolBlock, MtcnnDet1Legacy) {
  auto dir = model_dir("mtcnn-det1-legacy");
  ASSERT_TRUE(dir) << "tests/data/mxnet-models/mtcnn-det1-legacy is part of the repository";
  auto net = nn::SymbolBlock::imports(*dir / "det1-symbol.json", {"data"}, *dir / "det1-0001.params");
  EXPECT_EQ(net.symbol().mxnet_version, 800);
  for (auto [h, w] : {std::pair{12, 12}, std::pair{24, 30}}) {
    std::vector<NDArray> out = net(std::vector<NDArray>{input({1, 3, h, w})});
    ASSERT_EQ(out.size(), 2u);
    int64_t oh = ((h - 2 + 1) / 2 - 2) - 2, ow = ((w - 2 + 1) / 2 - 2) - 2;  // conv3, pool2 (ceil), conv3, conv3
    EXPECT_EQ(out[0].shape(), (Shape{1, 4, oh, ow}));
    EXPECT_EQ(out[1].shape(), (Shape{1, 2, oh, ow}));
    expect_finite(out[0]);
    // prob1 is a softmax over the channel axis.
    std::vector<float> p = out[1].to_vector<float>();
    int64_t plane = oh * ow;
    for (int64_t i = 0; i < plane; ++i) EXPECT_NEAR(p[i] + p[plane + i], 1.0f, 1e-5f);
  }
  EXPECT_CONTAINS(error_of<ValueError>([&] { net(input({1, 3, 12, 12})); }), "has 2 outputs");
}

TEST(SymbolBlock, ParametersSaveLoadAndExportRoundTrip) {
  auto dir = model_dir("insightface-gender-age-1.3.0");
  ASSERT_TRUE(dir);
  auto net = nn::SymbolBlock::imports(*dir / "model-symbol.json", {"data"}, *dir / "model-0000.params");
  NDArray x = input({2, 3, 112, 112});
  std::vector<float> expected = net(x).to_vector<float>();
  TempDir tmp;

  // save_parameters / load_parameters into a block without values.
  net.save_parameters(tmp / "plain.params");
  auto blank = nn::SymbolBlock::imports(*dir / "model-symbol.json", {"data"});
  EXPECT_EQ(blank.param("conv_1_conv2d_weight").shape(), (Shape{8, 0, 3, 3}));  // partial until data or values
  blank.load_parameters(tmp / "plain.params");
  EXPECT_EQ(blank(x).to_vector<float>(), expected);

  // export_model writes arg:/aux: names that imports reads back.
  auto [json, params] = net.export_model(tmp / "copy", 3);
  EXPECT_EQ(params, tmp / "copy-0003.params");
  int args = 0, auxs = 0;
  for (auto& [name, a] : mxnet::load_ndarrays(params)) {
    args += name.starts_with("arg:") ? 1 : 0;
    auxs += name.starts_with("aux:") ? 1 : 0;
  }
  EXPECT_EQ(args, 88);
  EXPECT_EQ(auxs, 58);
  auto copy = nn::SymbolBlock::imports(json, {"data"}, params);
  EXPECT_EQ(copy(x).to_vector<float>(), expected);
}

TEST(SymbolBlock, WithoutParamsShapesCompleteAtTheFirstForward) {
  auto dir = model_dir("mtcnn-det1-legacy");
  ASSERT_TRUE(dir);
  auto net = nn::SymbolBlock::imports(*dir / "det1-symbol.json", {"data"});
  EXPECT_EQ(net.param("conv1_weight").shape(), (Shape{10, 0, 3, 3}));
  net.initialize(init::Xavier());
  std::vector<NDArray> out = net(std::vector<NDArray>{input({1, 3, 12, 12})});
  EXPECT_EQ(net.param("conv1_weight").shape(), (Shape{10, 3, 3, 3}));
  EXPECT_EQ(net.param("prelu1_gamma").shape(), (Shape{10}));
  EXPECT_EQ(out[1].shape(), (Shape{1, 2, 1, 1}));
  expect_finite(out[0]);
}

TEST(SymbolBlock, AutogradRecordsTheImportedGraph) {
  auto dir = model_dir("mtcnn-det1-legacy");
  ASSERT_TRUE(dir);
  auto net = nn::SymbolBlock::imports(*dir / "det1-symbol.json", {"data"}, *dir / "det1-0001.params");
  NDArray x = input({1, 3, 12, 12});
  NDArray loss;
  {
    autograd::Record record;
    std::vector<NDArray> out = net(std::vector<NDArray>{x});
    loss = nd::sum(out[0]) + nd::sum(out[1]);
  }
  autograd::backward({loss});
  for (const char* name : {"conv1_weight", "prelu1_gamma", "conv4_1_bias"}) {
    SCOPED_TRACE(name);
    NDArray g = net.param(name).grad();
    expect_finite(g);
  }
  double total = 0;
  for (float v : net.param("prelu3_gamma").grad().to_vector<float>()) total += std::abs(v);
  EXPECT_GT(total, 0);
}

// An ir::Graph written by export_graph loads as a SymbolBlock and computes
// what eval_graph computes on the graph itself.
TEST(SymbolBlock, ExportGraphImportsBack) {
  ir::Graph g;
  ir::Entry x = g.add_input("data", {Shape{2, 6}, DType::kFloat32});
  ir::Entry w = g.add_param("fc_weight", {Shape{4, 6}, DType::kFloat32});
  ir::Entry b = g.add_param("fc_bias", {Shape{4}, DType::kFloat32});
  ir::Entry fc = g.add_op(OpId::kFullyConnected, OpAttrs::make(FullyConnectedAttrs{.num_hidden = 4}),
                          std::vector<ir::Entry>{x, w, b}, "fc")[0];
  ir::Entry gamma = g.add_param("bn_gamma", {Shape{4}, DType::kFloat32});
  ir::Entry beta = g.add_param("bn_beta", {Shape{4}, DType::kFloat32});
  ir::Entry mean = g.add_param("bn_moving_mean", {Shape{4}, DType::kFloat32}, true);
  ir::Entry var = g.add_param("bn_moving_var", {Shape{4}, DType::kFloat32}, true);
  ir::Entry bn = g.add_op(OpId::kBatchNorm, OpAttrs::make(BatchNormAttrs{.fix_gamma = false}),
                          std::vector<ir::Entry>{fc, gamma, beta, mean, var}, "bn")[0];
  ir::Entry act = g.add_op(OpId::kActivation, OpAttrs::make(ActivationAttrs{ActType::kSigmoid}),
                           std::vector<ir::Entry>{bn}, "act")[0];
  g.set_outputs({act});

  nd::random::seed(3);
  ArrayMap values{
      {"fc_weight", nd::random::normal({4, 6})},      {"fc_bias", nd::random::normal({4})},
      {"bn_gamma", nd::random::uniform({4}, 0.5, 2)}, {"bn_beta", nd::random::normal({4})},
      {"bn_moving_mean", nd::random::normal({4})},    {"bn_moving_var", nd::random::uniform({4}, 0.5, 2)}};
  NDArray data = nd::random::normal({2, 6});
  std::vector<NDArray> by_node(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const ir::Node& n = g.node(static_cast<ir::NodeId>(i));
    if (n.kind == ir::NodeKind::kInput) by_node[i] = data;
    if (values.contains(n.name)) by_node[i] = values.at(n.name);
  }
  std::vector<float> expected = eval_graph(g, by_node)[0].to_vector<float>();

  TempDir tmp;
  auto [json, params] = mxnet::export_graph(tmp / "mlp", 0, g, values);
  EXPECT_EQ(params, tmp / "mlp-0000.params");
  auto net = nn::SymbolBlock::imports(json, {"data"}, params);
  EXPECT_TRUE(net.param("bn_moving_var").is_aux());
  EXPECT_FALSE(net.param("bn_gamma").is_aux());
  EXPECT_EQ(net(data).to_vector<float>(), expected);
  EXPECT_EQ(net.graph_for(std::vector<TensorType>{{Shape{2, 6}, DType::kFloat32}}).to_text(), g.to_text());

  // A value missing: nothing is written.
  ArrayMap partial = values;
  partial.erase("bn_beta");
  EXPECT_CONTAINS(error_of<ValueError>([&] { mxnet::export_graph(tmp / "bad", 0, g, partial); }), "bn_beta");
  EXPECT_FALSE(fs::exists(tmp / "bad-symbol.json"));
}

// Gluon 2 exports name parameters structurally ("features.0.weight"): they
// keep those names in collect_params, through nested empty children.
TEST(SymbolBlock, DottedParameterNames) {
  ir::Graph g;
  ir::Entry x = g.add_input("data", {Shape{3, 5}, DType::kFloat32});
  ir::Entry w = g.add_param("features.0.weight", {Shape{2, 5}, DType::kFloat32});
  ir::Entry b = g.add_param("features.0.bias", {Shape{2}, DType::kFloat32});
  ir::Entry s = g.add_param("output.scale", {Shape{2}, DType::kFloat32});
  ir::Entry fc = g.add_op(OpId::kFullyConnected, OpAttrs::make(FullyConnectedAttrs{.num_hidden = 2}),
                          std::vector<ir::Entry>{x, w, b}, "dense0")[0];
  g.set_outputs({g.add_op(OpId::kBroadcastMul, {}, std::vector<ir::Entry>{fc, s}, "scale0")[0]});
  ArrayMap values{{"features.0.weight", nd::ones({2, 5})},
                      {"features.0.bias", nd::zeros({2})},
                      {"output.scale", nd::full({2}, 3.0)}};
  TempDir tmp;
  auto [json, params] = mxnet::export_graph(tmp / "dotted", 1, g, values);
  auto net = nn::SymbolBlock::imports(json, {"data"}, params);
  EXPECT_EQ(net.collect_params().names(),
            (std::vector<std::string>{"features.0.weight", "features.0.bias", "output.scale"}));
  EXPECT_EQ(net(nd::ones({3, 5})).to_vector<float>(), std::vector<float>(6, 15.0f));
  net.save_parameters(tmp / "dotted.params");
  auto again = nn::SymbolBlock::imports(json, {"data"});
  again.load_parameters(tmp / "dotted.params");
  EXPECT_EQ(again(nd::ones({3, 5})).to_vector<float>(), std::vector<float>(6, 15.0f));
}

// A Module checkpoint ends in SoftmaxOutput(data, softmax_label): the label
// is neither an input nor a parameter, and the output is the softmax.
TEST(SymbolBlock, ModuleCheckpointHead) {
  mxnet::Symbol s = mxnet::parse_symbol_json(R"J({"nodes": [{"op": "null", "name": "data", "inputs": []},
    {"op": "null", "name": "fc_weight", "inputs": []}, {"op": "null", "name": "fc_bias", "inputs": []},
    {"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "4"}, "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]},
    {"op": "null", "name": "softmax_label", "inputs": []},
    {"op": "SoftmaxOutput", "name": "softmax", "inputs": [[3, 0, 0], [4, 0, 0]]}],
    "arg_nodes": [0, 1, 2, 4], "heads": [[5, 0, 0]], "attrs": {"mxnet_version": ["int", 10301]}})J");
  nn::SymbolBlock net(s, {"data"});
  EXPECT_EQ(net.collect_params().names(), (std::vector<std::string>{"fc_weight", "fc_bias"}));
  net.initialize(init::Xavier());
  std::vector<float> p = net(nd::random::normal({3, 7})).to_vector<float>();
  ASSERT_EQ(p.size(), 12u);
  for (int r = 0; r < 3; ++r) EXPECT_NEAR(p[4 * r] + p[4 * r + 1] + p[4 * r + 2] + p[4 * r + 3], 1.0f, 1e-5f);
}

TEST(SymbolBlock, ParamsFileNamesAreCheckedAgainstTheGraph) {
  auto dir = model_dir("mtcnn-det1-legacy");
  ASSERT_TRUE(dir);
  std::string sym = *dir / "det1-symbol.json";
  NamedArrays good = mxnet::load_ndarrays(*dir / "det1-0001.params");
  TempDir tmp;
  auto with = [&](const std::string& file, NamedArrays arrays) {
    mxnet::save_ndarrays(tmp / file, arrays);
    return tmp / file;
  };
  // A name that matches no variable.
  NamedArrays extra = good;
  extra.emplace_back("arg:conv9_weight", nd::zeros({2}));
  std::string e = error_of<ValueError>([&] { nn::SymbolBlock::imports(sym, {"data"}, with("extra.params", extra)); });
  EXPECT_CONTAINS(e, "extra.params");
  EXPECT_CONTAINS(e, "match no variable of the graph: arg:conv9_weight");
  // A data input stored as a parameter; the wrong prefix.
  NamedArrays data = good;
  data.emplace_back("arg:data", nd::zeros({1, 3, 12, 12}));
  EXPECT_CONTAINS(error_of<ValueError>([&] { nn::SymbolBlock::imports(sym, {"data"}, with("data.params", data)); }),
                  "data inputs, not parameters: arg:data");
  NamedArrays wrong = good;
  wrong[0].first = "aux:" + wrong[0].first.substr(4);
  EXPECT_CONTAINS(error_of<ValueError>([&] { nn::SymbolBlock::imports(sym, {"data"}, with("wrong.params", wrong)); }),
                  "wrong prefix");
  // A parameter missing.
  NamedArrays missing(good.begin() + 1, good.end());
  e = error_of<ValueError>([&] { nn::SymbolBlock::imports(sym, {"data"}, with("missing.params", missing)); });
  EXPECT_CONTAINS(e, "missing from the params file: " + good[0].first.substr(4));
  // Truncated and wrong-magic files: IOError with the byte offset.
  std::string bytes = mxnet::serialize_ndarrays(good);
  for (size_t n : {size_t{0}, size_t{7}, size_t{100}, bytes.size() - 3}) {
    { std::ofstream(tmp / "cut.params", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(n)); }
    e = error_of<IOError>([&] { nn::SymbolBlock::imports(sym, {"data"}, tmp / "cut.params"); });
    EXPECT_CONTAINS(e, "cut.params");
    EXPECT_CONTAINS(e, "byte");
  }
  bytes[0] = 0x13;
  { std::ofstream(tmp / "magic.params", std::ios::binary) << bytes; }
  e = error_of<IOError>([&] { nn::SymbolBlock::imports(sym, {"data"}, tmp / "magic.params"); });
  EXPECT_CONTAINS(e, "header 0x113");
  EXPECT_CONTAINS(e, "byte 0");
  // An input name that is not a variable.
  EXPECT_CONTAINS(error_of<ValueError>([&] { nn::SymbolBlock::imports(sym, {"image"}); }),
                  "input 'image' is not a variable");
}

TEST(Prelu, ForwardAndGradient) {
  auto prelu = OpAttrs::make(LeakyReLUAttrs{.act_type = LeakyType::kPrelu});
  NDArray x = nd::array(std::vector<float>{-2, 1, -1, 3, 0.5f, -4}, {1, 2, 3});
  NDArray gamma = nd::array(std::vector<float>{0.1f, 0.5f}, {2});
  EXPECT_EQ(invoke1(OpId::kLeakyReLU, {x, gamma}, prelu).to_vector<float>(),
            (std::vector<float>{-0.2f, 1, -0.1f, 3, 0.5f, -2}));
  NDArray shared = nd::array(std::vector<float>{0.25f}, {1});
  EXPECT_EQ(invoke1(OpId::kLeakyReLU, {x, shared}, prelu).to_vector<float>()[5], -1.0f);
  EXPECT_THROW(invoke1(OpId::kLeakyReLU, {x, nd::ones({3})}, prelu), ShapeError);
  EXPECT_THROW(invoke1(OpId::kLeakyReLU, {x}, prelu), ValueError);
  testing::check_gradients([&](std::span<const NDArray> in) { return invoke1(OpId::kLeakyReLU, in, prelu); },
                           {nd::random::normal({2, 3, 4, 5}, 0, 1, {.dtype = DType::kFloat64}),
                            nd::random::uniform({3}, 0.1, 0.9, {.dtype = DType::kFloat64})});
  testing::check_gradients([&](std::span<const NDArray> in) { return invoke1(OpId::kLeakyReLU, in, prelu); },
                           {nd::random::normal({4, 3}, 0, 1, {.dtype = DType::kFloat64}),
                            nd::random::uniform({1}, 0.1, 0.9, {.dtype = DType::kFloat64})});
}

}  // namespace
}  // namespace kiln
