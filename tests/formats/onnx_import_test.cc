// ONNX import (frontend/formats/onnx/model.h): models exported from PyTorch
// (tests/data/onnx, written by scripts/make_onnx_fixtures.py) against
// PyTorch's outputs, at two batch sizes of one file; and bad input, each a
// clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include <unistd.h>

#include "frontend/formats/onnx/model.h"
#include "frontend/graph_eval.h"
#include "frontend/nd_init.h"
#include "frontend/nn/export_onnx.h"
#include "frontend/nn/symbol_block.h"
#include "frontend/npy.h"
#include "tests/test_util.h"

// Old-opset models (opsets 7 to 12) go through libonnx's version converter,
// which Kiln runs only on request (frontend/formats/onnx/model.cc): these
// files are trusted.
[[maybe_unused]] static const bool kUpgradeOldOpsets = [] { return setenv("KILN_ONNX_UPGRADE", "1", 1) == 0; }();

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::error_of;

const fs::path kData = KILN_TEST_DATA_DIR "/onnx";

// max |got - want| relative to want's largest magnitude.
double relative_error(const NDArray& got, const NDArray& want) {
  EXPECT_EQ(got.shape(), want.shape());
  std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(g[i]) - w[i]));
    scale = std::max(scale, std::abs(static_cast<double>(w[i])));
  }
  return err / std::max(scale, 1e-30);
}

class OnnxFixture : public testing::TestWithParam<std::string> {};

TEST_P(OnnxFixture, MatchesPyTorchAtTwoBatchSizes) {
  onnx::Model m = onnx::Model::load((kData / (GetParam() + ".onnx")).string());
  ASSERT_EQ(m.inputs().size(), 1u);
  EXPECT_EQ(m.inputs()[0].dim_params[0], "N");
  EXPECT_EQ(m.producer().rfind("pytorch", 0), 0u) << m.producer();
  for (std::string batch : {"", "3"}) {
    NDArray x = npy::load((kData / (GetParam() + ".in" + batch + ".npy")).string());
    NDArray want = npy::load((kData / (GetParam() + ".out" + batch + ".npy")).string());
    std::vector<NDArray> out = m.run(std::span<const NDArray>(&x, 1));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_LT(relative_error(out[0], want), 1e-5) << GetParam() << " batch " << x.shape()[0];
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorchExports, OnnxFixture,
                         testing::Values("mlp_op13", "mlp_external", "cnn_op9", "cnn_op13", "cnn_op17", "attn_op13",
                                         "attn_op17", "ffn_op13"));

// PyTorch's x.view(x.size(0), -1) exports as Shape -> Gather -> Unsqueeze ->
// Concat -> Reshape: with the input's shape known it folds to one Reshape.
TEST(OnnxImport, ShapeSubgraphFoldsToAFixedReshape) {
  onnx::Model m = onnx::Model::load((kData / "cnn_op13.onnx").string());
  EXPECT_EQ(m.op_counts().at("Shape"), 1);
  onnx::Imported im = m.to_graph(std::vector<TensorType>{{Shape{5, 3, 8, 8}, DType::kFloat32}});
  std::map<std::string, int> ops;
  for (const ir::Node& n : im.graph.nodes())
    if (n.is_op()) ++ops[std::string(op_def(n.op).name)];
  EXPECT_EQ(ops.count("take"), 0u);
  EXPECT_EQ(ops.count("Concat"), 0u) << "Pad with zero pads and the shape Concat must vanish";
  EXPECT_EQ(ops["Reshape"], 1);
  EXPECT_EQ(ops["Convolution"], 2);
  EXPECT_EQ(ops["BatchNorm"], 1);
  EXPECT_EQ(im.graph.type(im.graph.outputs()[0]).shape, (Shape{5, 5}));
  // BatchNorm's running statistics are aux nodes, its scale and bias params.
  EXPECT_EQ(im.graph.nodes_of_kind(ir::NodeKind::kAux).size(), 2u);
}

// SymbolBlock::imports tells ONNX by content; the block runs, hybridizes and
// exposes the initializers as parameters.
TEST(OnnxImport, SymbolBlockImportsOnnxAndHybridizes) {
  std::string path = (kData / "cnn_op13.onnx").string();
  auto net = nn::SymbolBlock::imports(path, {"x"});
  ASSERT_NE(net.onnx_model(), nullptr);
  NDArray x = npy::load((kData / "cnn_op13.in3.npy").string());
  NDArray want = npy::load((kData / "cnn_op13.out3.npy").string());
  EXPECT_LT(relative_error(net(x), want), 1e-5);
  net.hybridize();
  EXPECT_LT(relative_error(net(x), want), 1e-5);
  EXPECT_LT(relative_error(net(x), want), 1e-5);  // from the cached plan
  auto params = net.collect_params();
  EXPECT_TRUE(params.contains("conv1.weight"));
  EXPECT_TRUE(net.param("bn.running_mean").is_aux());
  EXPECT_CONTAINS(error_of<ValueError>([&] { nn::SymbolBlock::imports(path, {"x"}, "net.params"); }),
                  "an ONNX model holds its weights");
  EXPECT_CONTAINS(error_of<ValueError>([&] { nn::SymbolBlock::imports(path, {"data"}); }),
                  "input 'x' of the model is not among the inputs given (data)");
  EXPECT_CONTAINS(error_of<NotSupported>([&] { net.symbol(); }), "is an ONNX model");
  // Hybridized before its first call: the graph is imported (and its shape
  // arithmetic folded) while the forward is traced.
  auto fresh = nn::SymbolBlock::imports(path, {"x"});
  fresh.hybridize();
  EXPECT_LT(relative_error(fresh(x), want), 1e-5);
}

// Several inputs are bound by name, in the order the block is given them.
TEST(OnnxImport, SymbolBlockBindsInputsByName) {
  fs::path dir = fs::path(KILN_ONNX_TESTDATA) / "node" / "test_sub";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " is missing (Debian's libonnx-testdata)";
  NDArray x = onnx::load_tensor_file((dir / "test_data_set_0" / "input_0.pb").string());
  NDArray y = onnx::load_tensor_file((dir / "test_data_set_0" / "input_1.pb").string());
  NDArray want = onnx::load_tensor_file((dir / "test_data_set_0" / "output_0.pb").string());  // x - y
  auto net = nn::SymbolBlock::imports((dir / "model.onnx").string(), {"y", "x"});
  std::vector<NDArray> in{y, x};
  std::vector<NDArray> out = net(std::span<const NDArray>(in));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(relative_error(out[0], want), 0.0);
  EXPECT_CONTAINS(error_of<ValueError>([&] { nn::SymbolBlock::imports((dir / "model.onnx").string(), {"x", "y", "z"}); }),
                  "'z' is not an input of the model (inputs: x, y)");
}

TEST(OnnxImport, InputTypesAreCheckedAgainstTheFile) {
  onnx::Model m = onnx::Model::load((kData / "cnn_op13.onnx").string());
  EXPECT_CONTAINS(error_of<ShapeError>([&] { m.to_graph(std::vector<TensorType>{{Shape{2, 4, 8, 8}, DType::kFloat32}}); }),
                  "input 'x' has shape [N,3,8,8] in the model, got [2,4,8,8]");
  EXPECT_CONTAINS(error_of<TypeError>([&] { m.to_graph(std::vector<TensorType>{{Shape{2, 3, 8, 8}, DType::kFloat64}}); }),
                  "input 'x' is float32 in the model, got float64");
  EXPECT_CONTAINS(error_of<ValueError>([&] { m.to_graph(std::vector<TensorType>{}); }), "takes 1 input(s) (x), got 0");
}

// ---- bad input

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// y = OP(x) for x f32[2,3], at `opset`.
::onnx::ModelProto one_node_model(const std::string& op, int opset) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln-test");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  for (auto* v : {g->add_input(), g->add_output()}) {
    v->set_name(v == &g->input(0) ? "x" : "y");
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(::onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(2);
    t->mutable_shape()->add_dim()->set_dim_value(3);
  }
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("node0");
  n->add_input("x");
  n->add_output("y");
  return m;
}

TEST(OnnxImportErrors, TruncatedFile) {
  std::string bytes = read_bytes(kData / "cnn_op13.onnx");
  for (size_t cut : {bytes.size() / 2, bytes.size() - 3, size_t{1}}) {
    std::string e = error_of<ValueError>([&] { onnx::Model::parse(std::string_view(bytes).substr(0, cut), "cut.onnx"); });
    EXPECT_CONTAINS(e, "cut.onnx: not an ONNX model");
  }
}

TEST(OnnxImportErrors, NotAModel) {
  EXPECT_CONTAINS(error_of<ValueError>([] { onnx::Model::parse("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "image.png"); }),
                  "image.png: not an ONNX model");
  EXPECT_CONTAINS(error_of<ValueError>([] { onnx::Model::parse("{\"nodes\": []}", "symbol.json"); }),
                  "symbol.json: not an ONNX model");
  EXPECT_CONTAINS(error_of<ValueError>([] { onnx::Model::parse("", "empty.onnx"); }), "empty.onnx: not an ONNX model");
  EXPECT_CONTAINS(error_of<IOError>([] { onnx::Model::load("/nonexistent/model.onnx"); }), "no such file");
}

TEST(OnnxImportErrors, UnsupportedOpNamesOpNodeAndOpset) {
  ::onnx::ModelProto m = one_node_model("Det", 13);
  m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->clear_dim();
  onnx::Model model = onnx::Model::parse(m.SerializeAsString(), "det.onnx");
  std::string e = error_of<NotSupported>([&] { model.to_graph(std::vector<TensorType>{{Shape{2, 3}, DType::kFloat32}}); });
  EXPECT_CONTAINS(e, "det.onnx: ONNX node 'node0' (Det, opset 13): op Det is not supported");
  EXPECT_CONTAINS(error_of<NotSupported>([] { onnx::Model::parse(one_node_model("Relu", 18).SerializeAsString(), "new.onnx"); }),
                  "new.onnx: opset 18 is newer than the opsets Kiln reads (7 to 17)");
  // Older opsets are upgraded by libonnx's version converter.
  onnx::Model old = onnx::Model::parse(one_node_model("Relu", 6).SerializeAsString(), "old.onnx");
  EXPECT_EQ(old.file_opset(), 6);
  EXPECT_EQ(old.opset(), onnx::kUpgradeOpset);
}

// Upsample's linear mode (asymmetric coordinates) against the example in
// ONNX's operator documentation; Resize's linear mode is covered by ONNX's
// node tests (onnx_node_test), which hold no linear Upsample.
TEST(OnnxImport, UpsampleLinearMatchesOnnxsExample) {
  ::onnx::ModelProto m = one_node_model("Upsample", 7);
  auto* g = m.mutable_graph();
  for (auto* v : {g->mutable_input(0), g->mutable_output(0)}) {
    auto* shape = v->mutable_type()->mutable_tensor_type()->mutable_shape();
    const int64_t side = v == g->mutable_input(0) ? 2 : 4;
    shape->clear_dim();
    for (int64_t d : {int64_t{1}, int64_t{1}, side, side}) shape->add_dim()->set_dim_value(d);
  }
  auto* node = g->mutable_node(0);
  auto* mode = node->add_attribute();
  mode->set_name("mode");
  mode->set_type(::onnx::AttributeProto::STRING);
  mode->set_s("linear");
  auto* scales = node->add_attribute();
  scales->set_name("scales");
  scales->set_type(::onnx::AttributeProto::FLOATS);
  for (float f : {1.0f, 1.0f, 2.0f, 2.0f}) scales->add_floats(f);
  onnx::Model model = onnx::Model::parse(m.SerializeAsString(), "upsample.onnx");
  NDArray x = nd::array(std::vector<float>{1, 2, 3, 4}, Shape{1, 1, 2, 2});
  std::vector<NDArray> y = model.run(std::vector<NDArray>{x});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].shape(), (Shape{1, 1, 4, 4}));
  EXPECT_EQ(y[0].to_vector<float>(), (std::vector<float>{1, 1.5, 2, 2, 2, 2.5, 3, 3, 3, 3.5, 4, 4, 3, 3.5, 4, 4}));
}

// A graph of one node: `inputs` (name, element type, dims) bound at run
// time, `initializers` known at import, `outputs` (name, element type, dims).
struct ValueSpec {
  std::string name;
  int type;
  std::vector<int64_t> dims;
};
::onnx::ModelProto node_model(const std::string& op, int opset, const std::vector<ValueSpec>& inputs,
                              const std::vector<::onnx::TensorProto>& initializers, const std::vector<std::string>& node_inputs,
                              const std::vector<ValueSpec>& outputs) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln-test");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto add = [](::onnx::ValueInfoProto* v, const ValueSpec& s) {
    v->set_name(s.name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(s.type);
    for (int64_t d : s.dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  for (const ValueSpec& s : inputs) add(g->add_input(), s);
  for (const ValueSpec& s : outputs) add(g->add_output(), s);
  for (const ::onnx::TensorProto& t : initializers) *g->add_initializer() = t;
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("node0");
  for (const std::string& i : node_inputs) n->add_input(i);
  for (const ValueSpec& s : outputs) n->add_output(s.name);
  return m;
}

template <typename T>
::onnx::TensorProto tensor(const std::string& name, int type, std::vector<int64_t> dims, const std::vector<T>& values) {
  ::onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)));
  return t;
}

void set_attr(::onnx::NodeProto* n, const std::string& name, const std::string& s) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(s);
}

// ONNX's operator documentation example resize_tf_crop_and_resize_extrapolation_value
// (ONNX 1.12's node tests hold no crop reaching outside the input).
TEST(OnnxImport, ResizeTfCropAndResizeExtrapolates) {
  using TP = ::onnx::TensorProto;
  ::onnx::ModelProto m = node_model(
      "Resize", 13, {{"X", TP::FLOAT, {1, 1, 4, 4}}},
      {tensor<float>("roi", TP::FLOAT, {8}, {0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f}),
       tensor<int64_t>("sizes", TP::INT64, {4}, {1, 1, 3, 3})},
      {"X", "roi", "", "sizes"}, {{"Y", TP::FLOAT, {1, 1, 3, 3}}});
  auto* node = m.mutable_graph()->mutable_node(0);
  set_attr(node, "mode", "linear");
  set_attr(node, "coordinate_transformation_mode", "tf_crop_and_resize");
  auto* e = node->add_attribute();
  e->set_name("extrapolation_value");
  e->set_type(::onnx::AttributeProto::FLOAT);
  e->set_f(10.0f);
  onnx::Model model = onnx::Model::parse(m.SerializeAsString(), "crop.onnx");
  std::vector<float> x(16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
  std::vector<NDArray> y = model.run(std::vector<NDArray>{nd::array(x, Shape{1, 1, 4, 4})});
  ASSERT_EQ(y.size(), 1u);
  std::vector<float> want{7.6f, 10, 10, 12.4f, 10, 10, 10, 10, 10}, got = y[0].to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

// uint64 Max/Min must order values >= 2^63 (which int64 would see as negative) and
// tell apart neighbours that float64 would round together.
TEST(OnnxImport, MaxMinOfUint64AreExactOverTheWholeRange) {
  using TP = ::onnx::TensorProto;
  const uint64_t top = ~uint64_t{0}, half = uint64_t{1} << 63, word = uint64_t{1} << 32;
  std::vector<uint64_t> a{top, half, 5, half + word, (uint64_t{1} << 53) + 1, 7};
  std::vector<uint64_t> b{0, half - 1, top - 1, half + word - 1, uint64_t{1} << 53, 7};
  for (const char* op : {"Max", "Min"}) {
    ::onnx::ModelProto m = node_model(op, 13, {{"a", TP::UINT64, {6}}, {"b", TP::UINT64, {6}}}, {}, {"a", "b"},
                                      {{"y", TP::UINT64, {6}}});
    onnx::Model model = onnx::Model::parse(m.SerializeAsString(), "minmax.onnx");
    auto u64 = [](const std::vector<uint64_t>& v) {
      NDArray t = NDArray::empty(Shape{static_cast<int64_t>(v.size())}, {DType::kUint64, Device::cpu(0)});
      std::memcpy(t.data(), v.data(), v.size() * sizeof(uint64_t));
      return t;
    };
    std::vector<NDArray> y = model.run(std::vector<NDArray>{u64(a), u64(b)});
    ASSERT_EQ(y[0].dtype(), DType::kUint64);
    y[0].wait_to_read();
    std::vector<uint64_t> want(a.size()), got(a.size());
    std::memcpy(got.data(), y[0].data(), got.size() * sizeof(uint64_t));
    for (size_t i = 0; i < a.size(); ++i) want[i] = std::string(op) == "Max" ? std::max(a[i], b[i]) : std::min(a[i], b[i]);
    EXPECT_EQ(got, want) << op;
  }
}

// training_mode true: every output element is 0 or x / (1 - ratio), the mask
// says which, and each run draws a new mask.
TEST(OnnxImport, DropoutInTrainingModeDrawsAMaskPerRun) {
  using TP = ::onnx::TensorProto;
  ::onnx::ModelProto m = node_model(
      "Dropout", 13, {{"x", TP::FLOAT, {1000}}},
      {tensor<float>("ratio", TP::FLOAT, {}, {0.25f}), tensor<uint8_t>("training", TP::BOOL, {}, {1})},
      {"x", "ratio", "training"}, {{"y", TP::FLOAT, {1000}}, {"mask", TP::BOOL, {1000}}});
  onnx::Model model = onnx::Model::parse(m.SerializeAsString(), "dropout.onnx");
  NDArray x = nd::array(std::vector<float>(1000, 3.0f), Shape{1000});
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    std::vector<NDArray> out = model.run(std::vector<NDArray>{x});
    ASSERT_EQ(out.size(), 2u);
    ASSERT_EQ(out[1].dtype(), DType::kBool);
    std::vector<float> y = out[0].to_vector<float>();
    std::vector<uint8_t> mask = out[1].astype(DType::kUint8).to_vector<uint8_t>();
    int kept = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_TRUE(y[i] == 0.0f || y[i] == 4.0f) << i << ": " << y[i];
      EXPECT_EQ(mask[i] != 0, y[i] != 0.0f) << i;
      kept += y[i] != 0.0f;
    }
    EXPECT_GT(kept, 650);
    EXPECT_LT(kept, 850);
    runs.push_back(y);
  }
  EXPECT_NE(runs[0], runs[1]);
}

// GatherND with negative index entries (ONNX's node tests hold none) and a
// batch axis; TopK's equal values come in index order.
TEST(OnnxImport, GatherNDNegativeIndicesAndTopKTies) {
  using TP = ::onnx::TensorProto;
  ::onnx::ModelProto g = node_model("GatherND", 13, {{"data", TP::FLOAT, {2, 3, 4}}},
                                    {tensor<int64_t>("idx", TP::INT64, {2, 2, 2}, {-1, 0, 0, -1, 2, 3, -3, -4})},
                                    {"data", "idx"}, {{"y", TP::FLOAT, {2, 2}}});
  auto* b = g.mutable_graph()->mutable_node(0)->add_attribute();
  b->set_name("batch_dims");
  b->set_type(::onnx::AttributeProto::INT);
  b->set_i(1);
  std::vector<float> data(24);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  std::vector<NDArray> y = onnx::Model::parse(g.SerializeAsString(), "gathernd.onnx")
                               .run(std::vector<NDArray>{nd::array(data, Shape{2, 3, 4})});
  // Batch 0: [2][0] = 8, [0][3] = 3; batch 1: [2][3] = 12 + 11, [0][0] = 12.
  EXPECT_EQ(y[0].to_vector<float>(), (std::vector<float>{8, 3, 23, 12}));

  ::onnx::ModelProto t = node_model("TopK", 13, {{"x", TP::FLOAT, {6}}}, {tensor<int64_t>("k", TP::INT64, {1}, {4})},
                                    {"x", "k"}, {{"values", TP::FLOAT, {4}}, {"indices", TP::INT64, {4}}});
  std::vector<NDArray> top = onnx::Model::parse(t.SerializeAsString(), "topk.onnx")
                                 .run(std::vector<NDArray>{nd::array(std::vector<float>{1, 5, 2, 5, 2, 0}, Shape{6})});
  EXPECT_EQ(top[0].to_vector<float>(), (std::vector<float>{5, 5, 2, 2}));
  EXPECT_EQ(top[1].to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 2, 4}));
}

// Einsum in implicit mode ("ij,jk": output "ik") and with broadcast "..." axes.
TEST(OnnxImport, EinsumImplicitOutputAndBroadcastEllipsis) {
  using TP = ::onnx::TensorProto;
  auto run = [&](const std::string& eq, Shape a, Shape b, Shape out) {
    ::onnx::ModelProto m = node_model("Einsum", 13, {{"a", TP::FLOAT, a.to_vector()}, {"b", TP::FLOAT, b.to_vector()}}, {},
                                      {"a", "b"}, {{"y", TP::FLOAT, out.to_vector()}});
    set_attr(m.mutable_graph()->mutable_node(0), "equation", eq);
    std::vector<float> av(static_cast<size_t>(a.size())), bv(static_cast<size_t>(b.size()));
    for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(i) - 2;
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<float>(i % 5) * 0.5f;
    return onnx::Model::parse(m.SerializeAsString(), "einsum.onnx")
        .run(std::vector<NDArray>{nd::array(av, a), nd::array(bv, b)})[0];
  };
  NDArray y = run("ij,jk", {2, 3}, {3, 2}, {2, 2});
  // a = [[-2,-1,0],[1,2,3]], b = [[0,0.5],[1,1.5],[2,0]].
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{-1, -2.5f, 8, 3.5f}));
  NDArray z = run("...ij,...jk->...ik", {2, 1, 2, 3}, {3, 3, 2}, {2, 3, 2, 2});
  ASSERT_EQ(z.shape(), (Shape{2, 3, 2, 2}));
  std::vector<float> got = z.to_vector<float>();
  for (int p = 0; p < 2; ++p)
    for (int q = 0; q < 3; ++q)
      for (int i = 0; i < 2; ++i)
        for (int k = 0; k < 2; ++k) {
          float want = 0;
          for (int j = 0; j < 3; ++j)
            want += (static_cast<float>(p * 6 + i * 3 + j) - 2) * (static_cast<float>((q * 6 + j * 2 + k) % 5) * 0.5f);
          EXPECT_EQ(got[static_cast<size_t>(((p * 3 + q) * 2 + i) * 2 + k)], want) << p << q << i << k;
        }
}

TEST(OnnxImportErrors, OpsOfOtherDomainsAreNamed) {
  ::onnx::ModelProto m = one_node_model("FancyOp", 13);
  m.mutable_graph()->mutable_node(0)->set_domain("com.example");
  auto* o = m.add_opset_import();
  o->set_domain("com.example");
  o->set_version(1);
  onnx::Model model = onnx::Model::parse(m.SerializeAsString(), "custom.onnx");
  EXPECT_CONTAINS(error_of<NotSupported>([&] { model.to_graph(std::vector<TensorType>{{Shape{2, 3}, DType::kFloat32}}); }),
                  "custom.onnx: ONNX node 'node0' (FancyOp, opset 13): op domain 'com.example' is not supported");
}

TEST(OnnxImportErrors, TheCheckerRejectsDanglingInputs) {
  ::onnx::ModelProto m = one_node_model("Relu", 13);
  m.mutable_graph()->mutable_node(0)->set_input(0, "nothing");
  EXPECT_CONTAINS(error_of<ValueError>([&] { onnx::Model::parse(m.SerializeAsString(), "dangling.onnx"); }),
                  "dangling.onnx: the ONNX checker rejects the model");
}

TEST(OnnxImportErrors, TensorBytesMustMatchShapeAndDtype) {
  ::onnx::ModelProto m = one_node_model("Add", 13);
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(::onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->add_dims(3);
  w->set_raw_data(std::string(20, '\0'));
  m.mutable_graph()->mutable_node(0)->add_input("w");
  EXPECT_CONTAINS(error_of<ValueError>([&] { onnx::Model::parse(m.SerializeAsString(), "short.onnx"); }),
                  "short.onnx: tensor 'w': raw_data holds 20 bytes, its shape [2,3] and dtype float32 need 24");
  w->clear_raw_data();
  for (int i = 0; i < 5; ++i) w->add_float_data(1.0f);
  EXPECT_CONTAINS(error_of<ValueError>([&] { onnx::Model::parse(m.SerializeAsString(), "typed.onnx"); }),
                  "typed.onnx: tensor 'w': holds 5 values, its shape [2,3] needs 6");
  // A huge declared shape is refused before anything is allocated.
  w->clear_float_data();
  w->set_dims(0, int64_t{1} << 40);
  EXPECT_CONTAINS(error_of<ValueError>([&] { onnx::Model::parse(m.SerializeAsString(), "huge.onnx"); }), "limit");
}

// A fresh directory, removed afterwards.
struct TempDir {
  TempDir() : path_(fs::temp_directory_path() / fmt::format("kiln_onnx_import_{}", ::getpid())) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  fs::path path_;
};

// External data resolves inside the model's folder, never outside it.
TEST(OnnxImportErrors, ExternalDataStaysInTheModelsFolder) {
  TempDir dir;
  fs::path sub = fs::path(dir.path()) / "model";
  fs::create_directories(sub);
  fs::copy_file(kData / "mlp_external.bin", fs::path(dir.path()) / "weights.bin");
  ::onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(read_bytes(kData / "mlp_external.onnx")));
  auto with_location = [&](const std::string& location, const std::string& offset = "") {
    ::onnx::ModelProto c = m;
    for (auto& t : *c.mutable_graph()->mutable_initializer()) {
      for (auto& kv : *t.mutable_external_data()) {
        if (kv.key() == "location") kv.set_value(location);
        if (kv.key() == "offset" && !offset.empty()) kv.set_value(offset);
      }
    }
    write_bytes(sub / "m.onnx", c.SerializeAsString());
    return (sub / "m.onnx").string();
  };
  EXPECT_CONTAINS(error_of<ValueError>([&] { onnx::Model::load(with_location("../weights.bin")); }),
                  "external data location '../weights.bin' leaves the model's folder");
  EXPECT_CONTAINS(error_of<ValueError>([&] { onnx::Model::load(with_location((fs::path(dir.path()) / "weights.bin").string())); }),
                  "is absolute");
  fs::create_symlink(fs::path(dir.path()) / "weights.bin", sub / "link.bin");
  EXPECT_CONTAINS(error_of<ValueError>([&] { onnx::Model::load(with_location("link.bin")); }), "outside the model's folder");
  fs::copy_file(kData / "mlp_external.bin", sub / "w.bin");
  EXPECT_CONTAINS(error_of<ValueError>([&] { onnx::Model::load(with_location("w.bin", "100000")); }), "past the end");
  EXPECT_CONTAINS(error_of<IOError>([&] { onnx::Model::load(with_location("absent.bin")); }), "missing");
  // From bytes there is no folder to read from.
  EXPECT_CONTAINS(error_of<ValueError>([&] { onnx::Model::parse(read_bytes(kData / "mlp_external.onnx"), "bytes"); }),
                  "external data, but the model was not read from a file");
  EXPECT_NO_THROW(onnx::Model::load(with_location("w.bin")));
}

// ---- RNN, GRU, LSTM against a float64 reference loop

// What one recurrent node computes, as ONNX defines it (gate orders: GRU
// z r h, LSTM i o f c), for X, W, R, B, initial_h, initial_c and P as the
// node reads them (layout=1: X, states and Y batch-major). Empty B, states
// or P: absent. `acts` per direction as the node's activations attribute.
struct RecurrentRef {
  std::string op;
  int64_t seq, batch, in, hidden;
  int dirs = 1;
  bool reverse = false;  // one direction, reversed
  bool batch_major = false;
  double clip = 0;
  bool linear_before_reset = false;
  bool input_forget = false;
  std::vector<std::function<double(double)>> acts;
  std::vector<double> x, w, r, b, h0, c0, p;
  std::vector<int32_t> lens;  // sequence_lens; empty: absent
  std::vector<double> y, yh, yc;

  int gates() const { return op == "RNN" ? 1 : op == "GRU" ? 3 : 4; }
  size_t xi(int64_t t, int64_t n, int64_t i) const {
    return static_cast<size_t>(((batch_major ? n * seq + t : t * batch + n)) * in + i);
  }
  size_t si(int d, int64_t n, int64_t j) const {
    return static_cast<size_t>((batch_major ? n * dirs + d : d * batch + n) * hidden + j);
  }
  size_t yi(int64_t t, int d, int64_t n, int64_t j) const {
    return static_cast<size_t>((batch_major ? (n * seq + t) * dirs + d : (t * dirs + d) * batch + n) * hidden + j);
  }

  void run() {
    const int64_t g = gates(), gh = g * hidden;
    const size_t per_dir = acts.size() / static_cast<size_t>(dirs);
    y.assign(static_cast<size_t>(seq * dirs * batch * hidden), 0.0);
    yh.assign(static_cast<size_t>(dirs * batch * hidden), 0.0);
    yc = yh;
    auto cl = [&](double v) { return clip > 0 ? std::clamp(v, -clip, clip) : v; };
    for (int d = 0; d < dirs; ++d) {
      auto f = acts[static_cast<size_t>(d) * per_dir],
           gact = acts[static_cast<size_t>(d) * per_dir + (per_dir > 1 ? 1 : 0)];
      auto hact = acts[static_cast<size_t>(d) * per_dir + (per_dir > 2 ? 2 : 0)];
      for (int64_t n = 0; n < batch; ++n) {
        std::vector<double> h(static_cast<size_t>(hidden), 0.0), c = h;
        for (int64_t j = 0; j < hidden; ++j) {
          if (!h0.empty()) h[static_cast<size_t>(j)] = h0[si(d, n, j)];
          if (!c0.empty()) c[static_cast<size_t>(j)] = c0[si(d, n, j)];
        }
        for (int64_t k = 0; k < seq; ++k) {
          const int64_t t = (reverse || d == 1) ? seq - 1 - k : k;
          if (!lens.empty() && t >= lens[static_cast<size_t>(n)]) continue;  // Y stays 0, the state is kept
          // xw[row] = x_t . W[row] + Wb[row]; hr[row] = h . R[row] + Rb[row].
          std::vector<double> xw(static_cast<size_t>(gh)), hr(static_cast<size_t>(gh));
          auto rdot = [&](const std::vector<double>& v, int64_t row) {
            double s = b.empty() ? 0.0 : b[static_cast<size_t>(d * 2 * gh + gh + row)];
            for (int64_t q = 0; q < hidden; ++q)
              s += v[static_cast<size_t>(q)] * r[static_cast<size_t>((d * gh + row) * hidden + q)];
            return s;
          };
          for (int64_t row = 0; row < gh; ++row) {
            double s = b.empty() ? 0.0 : b[static_cast<size_t>(d * 2 * gh + row)];
            for (int64_t i = 0; i < in; ++i) s += x[xi(t, n, i)] * w[static_cast<size_t>((d * gh + row) * in + i)];
            xw[static_cast<size_t>(row)] = s;
            hr[static_cast<size_t>(row)] = rdot(h, row);
          }
          std::vector<double> nh(static_cast<size_t>(hidden));
          auto at = [&](const std::vector<double>& v, int64_t gate, int64_t j) {
            return v[static_cast<size_t>(gate * hidden + j)];
          };
          auto peep = [&](int64_t which, int64_t j) {
            return p.empty() ? 0.0 : p[static_cast<size_t>(d * 3 * hidden + which * hidden + j)];
          };
          if (op == "RNN") {
            for (int64_t j = 0; j < hidden; ++j) nh[static_cast<size_t>(j)] = f(cl(at(xw, 0, j) + at(hr, 0, j)));
          } else if (op == "GRU") {
            std::vector<double> z(static_cast<size_t>(hidden)), rg = z, rh = z;
            for (int64_t j = 0; j < hidden; ++j) {
              z[static_cast<size_t>(j)] = f(cl(at(xw, 0, j) + at(hr, 0, j)));
              rg[static_cast<size_t>(j)] = f(cl(at(xw, 1, j) + at(hr, 1, j)));
              rh[static_cast<size_t>(j)] = rg[static_cast<size_t>(j)] * h[static_cast<size_t>(j)];
            }
            for (int64_t j = 0; j < hidden; ++j) {
              const double lin =
                  linear_before_reset ? rg[static_cast<size_t>(j)] * at(hr, 2, j) : rdot(rh, 2 * hidden + j);
              const double cand = gact(cl(at(xw, 2, j) + lin));
              nh[static_cast<size_t>(j)] =
                  (1 - z[static_cast<size_t>(j)]) * cand + z[static_cast<size_t>(j)] * h[static_cast<size_t>(j)];
            }
          } else {
            for (int64_t j = 0; j < hidden; ++j) {
              double& cj = c[static_cast<size_t>(j)];
              const double i = f(cl(at(xw, 0, j) + at(hr, 0, j) + peep(0, j) * cj));
              const double fg = input_forget ? 1 - i : f(cl(at(xw, 2, j) + at(hr, 2, j) + peep(2, j) * cj));
              const double cand = gact(cl(at(xw, 3, j) + at(hr, 3, j)));
              cj = fg * cj + i * cand;
              const double o = f(cl(at(xw, 1, j) + at(hr, 1, j) + peep(1, j) * cj));
              nh[static_cast<size_t>(j)] = o * hact(cj);
            }
          }
          h = nh;
          for (int64_t j = 0; j < hidden; ++j) y[yi(t, d, n, j)] = h[static_cast<size_t>(j)];
        }
        for (int64_t j = 0; j < hidden; ++j) {
          yh[si(d, n, j)] = h[static_cast<size_t>(j)];
          yc[si(d, n, j)] = c[static_cast<size_t>(j)];
        }
      }
    }
  }
};

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }
double tanh_(double v) { return std::tanh(v); }

// Deterministic values in [-scale, scale).
std::vector<double> wave(size_t count, double phase, double scale) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = scale * std::sin(1.7 * static_cast<double>(i) + phase);
  return v;
}

NDArray f32(const std::vector<double>& v, const std::vector<int64_t>& dims) {
  std::vector<float> f(v.begin(), v.end());
  return nd::array(f, Shape(dims));
}

void expect_close(const NDArray& got, const std::vector<double>& want, const std::vector<int64_t>& dims,
                  const std::string& what) {
  ASSERT_EQ(got.shape(), Shape(dims)) << what;
  std::vector<float> g = got.to_vector<float>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(g[i], want[i], 2e-5 * std::max(1.0, std::abs(want[i]))) << what << " " << i;
}

void set_attr_int(::onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

void set_attr_float(::onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void set_attr_strings(::onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRINGS);
  for (const std::string& s : v) a->add_strings(s);
}

// The node of `ref` with every input it has fed at run time (absent ones
// ""), outputs named in `outputs` ("" for absent ones); runs it and checks
// the present outputs against the reference.
void check_recurrent(RecurrentRef& ref, int opset, const std::vector<std::string>& outputs,
                     const std::function<void(::onnx::NodeProto*)>& attrs) {
  using TP = ::onnx::TensorProto;
  ref.run();
  const int64_t gh = ref.gates() * ref.hidden, S = ref.seq, N = ref.batch, D = ref.dirs, H = ref.hidden;
  const std::vector<int64_t> xd =
      ref.batch_major ? std::vector<int64_t>{N, S, ref.in} : std::vector<int64_t>{S, N, ref.in};
  const std::vector<int64_t> sd = ref.batch_major ? std::vector<int64_t>{N, D, H} : std::vector<int64_t>{D, N, H};
  const std::vector<int64_t> yd = ref.batch_major ? std::vector<int64_t>{N, S, D, H} : std::vector<int64_t>{S, D, N, H};
  std::vector<ValueSpec> in{{"X", TP::FLOAT, xd}, {"W", TP::FLOAT, {D, gh, ref.in}}, {"R", TP::FLOAT, {D, gh, H}}};
  std::vector<NDArray> feed{f32(ref.x, xd), f32(ref.w, {D, gh, ref.in}), f32(ref.r, {D, gh, H})};
  std::vector<std::string> names{"X", "W", "R", "", "", "", "", ""};
  auto optional = [&](size_t slot, const std::string& name, const std::vector<double>& v, std::vector<int64_t> dims) {
    if (v.empty()) return;
    in.push_back({name, TP::FLOAT, dims});
    feed.push_back(f32(v, dims));
    names[slot] = name;
  };
  optional(3, "B", ref.b, {D, 2 * gh});
  if (!ref.lens.empty()) {
    in.push_back({"lens", TP::INT32, {N}});
    feed.push_back(nd::array(ref.lens, Shape{N}));
    names[4] = "lens";
  }
  optional(5, "initial_h", ref.h0, sd);
  optional(6, "initial_c", ref.c0, sd);
  optional(7, "P", ref.p, {D, 3 * H});
  while (!names.empty() && names.back().empty()) names.pop_back();
  std::vector<ValueSpec> outs;
  const std::vector<std::vector<int64_t>> out_dims{yd, sd, sd};
  for (size_t k = 0; k < outputs.size(); ++k)
    if (!outputs[k].empty()) outs.push_back({outputs[k], TP::FLOAT, out_dims[k]});
  ::onnx::ModelProto m = node_model(ref.op, opset, in, {}, names, outs);
  auto* node = m.mutable_graph()->mutable_node(0);
  node->clear_output();
  for (const std::string& o : outputs) node->add_output(o);
  set_attr_int(node, "hidden_size", H);
  attrs(node);
  // Through Model::run (its small inputs known at import: W, R, sequence_lens
  // as constants) and through a graph whose inputs are all bound at run time.
  onnx::Model model = onnx::Model::parse(m.SerializeAsString(), "recurrent.onnx");
  std::vector<TensorType> types;
  for (const NDArray& a : feed) types.push_back({a.shape(), a.dtype()});
  onnx::Imported im = model.to_graph(types);
  for (const std::vector<NDArray>& got : {model.run(feed), eval_graph(im.graph, model.bind(im, feed))}) {
    ASSERT_EQ(got.size(), outs.size());
    size_t at = 0;
    const std::vector<double>* want[] = {&ref.y, &ref.yh, &ref.yc};
    for (size_t k = 0; k < outputs.size(); ++k)
      if (!outputs[k].empty()) expect_close(got[at++], *want[k], out_dims[k], ref.op + " " + outputs[k]);
  }
}

// Bidirectional LSTM with initial states, biases, peepholes and clip (ONNX's
// node tests have one direction, no clip, no initial c).
TEST(OnnxImportRecurrent, BidirectionalLstmWithInitialStatesPeepholesAndClip) {
  RecurrentRef ref{.op = "LSTM", .seq = 5, .batch = 3, .in = 5, .hidden = 4, .dirs = 2, .clip = 0.6};
  ref.acts = {sigmoid, tanh_, tanh_, sigmoid, tanh_, tanh_};
  const size_t gh = 16;
  ref.x = wave(75, 0.1, 1.0), ref.w = wave(2 * gh * 5, 0.2, 0.6), ref.r = wave(2 * gh * 4, 0.3, 0.6);
  ref.b = wave(2 * 2 * gh, 0.4, 0.3), ref.h0 = wave(24, 0.5, 0.8), ref.c0 = wave(24, 0.6, 1.5),
  ref.p = wave(24, 0.7, 0.5);
  check_recurrent(ref, 14, {"Y", "Y_h", "Y_c"}, [](::onnx::NodeProto* n) {
    set_attr(n, "direction", "bidirectional");
    set_attr_float(n, "clip", 0.6f);
  });
  // input_forget: f = 1 - i; reverse; Y_c alone.
  RecurrentRef coupled{.op = "LSTM", .seq = 6, .batch = 2, .in = 7, .hidden = 3, .reverse = true, .input_forget = true};
  coupled.acts = {sigmoid, tanh_, tanh_};
  coupled.x = wave(84, 0.9, 1.0), coupled.w = wave(12 * 7, 1.0, 0.6), coupled.r = wave(12 * 3, 1.1, 0.6);
  coupled.c0 = wave(6, 1.2, 1.0);
  check_recurrent(coupled, 14, {"", "", "Y_c"}, [](::onnx::NodeProto* n) {
    set_attr(n, "direction", "reverse");
    set_attr_int(n, "input_forget", 1);
  });
}

// sequence_lens shorter than X's time steps (known at import, and bound at
// run time): past its length an entry keeps its state and outputs zeros;
// the reverse direction starts at each entry's own last step.
TEST(OnnxImportRecurrent, SequenceLensMaskShorterSequences) {
  RecurrentRef lstm{.op = "LSTM", .seq = 5, .batch = 3, .in = 5, .hidden = 4, .dirs = 2};
  lstm.acts = {sigmoid, tanh_, tanh_, sigmoid, tanh_, tanh_};
  lstm.x = wave(75, 5.1, 1.0), lstm.w = wave(2 * 16 * 5, 5.2, 0.6), lstm.r = wave(2 * 16 * 4, 5.3, 0.6);
  lstm.h0 = wave(24, 5.4, 0.8), lstm.c0 = wave(24, 5.5, 1.0), lstm.lens = {5, 2, 0};
  check_recurrent(lstm, 14, {"Y", "Y_h", "Y_c"},
                  [](::onnx::NodeProto* n) { set_attr(n, "direction", "bidirectional"); });
  RecurrentRef gru{.op = "GRU", .seq = 6, .batch = 2, .in = 7, .hidden = 3, .batch_major = true};
  gru.acts = {sigmoid, tanh_};
  gru.x = wave(84, 6.1, 1.0), gru.w = wave(9 * 7, 6.2, 0.5), gru.r = wave(9 * 3, 6.3, 0.5), gru.lens = {3, 6};
  check_recurrent(gru, 14, {"Y", "Y_h"}, [](::onnx::NodeProto* n) { set_attr_int(n, "layout", 1); });
}

// layout=1 (batch-major X, states and Y) with GRU's linear_before_reset
// (once with Y absent); and a reverse GRU in the default layout with only Y.
TEST(OnnxImportRecurrent, GruBatchMajorLinearBeforeResetAndReverse) {
  for (bool lbr : {false, true}) {
    RecurrentRef ref{.op = "GRU",
                     .seq = 4,
                     .batch = 3,
                     .in = 6,
                     .hidden = 5,
                     .dirs = 2,
                     .batch_major = true,
                     .linear_before_reset = lbr};
    ref.acts = {sigmoid, tanh_, sigmoid, tanh_};
    ref.x = wave(72, 1.1, 1.0), ref.w = wave(2 * 15 * 6, 1.2, 0.5), ref.r = wave(2 * 15 * 5, 1.3, 0.5);
    ref.b = wave(2 * 30, 1.4, 0.4), ref.h0 = wave(30, 1.5, 0.9);
    check_recurrent(ref, 14, {lbr ? "Y" : "", "Y_h"}, [lbr](::onnx::NodeProto* n) {
      set_attr(n, "direction", "bidirectional");
      set_attr_int(n, "layout", 1);
      set_attr_int(n, "linear_before_reset", lbr ? 1 : 0);
    });
  }
  RecurrentRef rev{.op = "GRU", .seq = 6, .batch = 2, .in = 7, .hidden = 3, .reverse = true};
  rev.acts = {sigmoid, tanh_};
  rev.x = wave(84, 2.1, 1.0), rev.w = wave(9 * 7, 2.2, 0.5), rev.r = wave(9 * 3, 2.3, 0.5);
  check_recurrent(rev, 7, {"Y"}, [](::onnx::NodeProto* n) { set_attr(n, "direction", "reverse"); });
}

// RNN with clip and activations that take alpha and beta (HardSigmoid,
// LeakyRelu), one per direction; opset 7 (no layout attribute).
TEST(OnnxImportRecurrent, RnnClipAndActivationsWithAlphaBeta) {
  RecurrentRef ref{.op = "RNN", .seq = 7, .batch = 2, .in = 5, .hidden = 4, .dirs = 2, .clip = 1.2};
  ref.acts = {[](double v) { return std::clamp(0.3 * v + 0.4, 0.0, 1.0); },
              [](double v) { return v > 0 ? v : 0.2 * v; }};
  ref.x = wave(70, 3.1, 2.0), ref.w = wave(2 * 4 * 5, 3.2, 0.8), ref.r = wave(2 * 4 * 4, 3.3, 0.8);
  ref.b = wave(2 * 8, 3.4, 0.5);
  check_recurrent(ref, 7, {"Y", "Y_h"}, [](::onnx::NodeProto* n) {
    set_attr(n, "direction", "bidirectional");
    set_attr_float(n, "clip", 1.2f);
    set_attr_strings(n, "activations", {"HardSigmoid", "LeakyRelu"});
    auto* a = n->add_attribute();
    a->set_name("activation_alpha");
    a->set_type(::onnx::AttributeProto::FLOATS);
    a->add_floats(0.3f);
    a->add_floats(0.2f);
    auto* b = n->add_attribute();
    b->set_name("activation_beta");
    b->set_type(::onnx::AttributeProto::FLOATS);
    b->add_floats(0.4f);
  });
}

// Every activation ONNX lists, by name in any case, with and without
// alpha / beta (their defaults otherwise), in a forward RNN.
TEST(OnnxImportRecurrent, RnnActivationsByName) {
  struct Case {
    std::string name;
    std::vector<float> alpha, beta;
    std::function<double(double)> f;
  };
  const std::vector<Case> cases{
      {"Relu", {}, {}, [](double v) { return std::max(v, 0.0); }},
      {"sigmoid", {}, {}, sigmoid},
      {"Affine", {0.5f}, {-0.2f}, [](double v) { return 0.5 * v - 0.2; }},
      {"LeakyRelu", {}, {}, [](double v) { return v > 0 ? v : 0.01 * v; }},
      {"ThresholdedRelu", {0.1f}, {}, [](double v) { return v > 0.1 ? v : 0.0; }},
      {"ThresholdedRelu", {}, {}, [](double v) { return v > 1.0 ? v : 0.0; }},
      {"ScaledTanh", {1.5f}, {0.7f}, [](double v) { return 1.5 * std::tanh(0.7 * v); }},
      {"HardSigmoid", {}, {}, [](double v) { return std::clamp(0.2 * v + 0.5, 0.0, 1.0); }},
      {"Elu", {0.5f}, {}, [](double v) { return v > 0 ? v : 0.5 * (std::exp(v) - 1); }},
      {"Softsign", {}, {}, [](double v) { return v / (1 + std::abs(v)); }},
      {"Softplus", {}, {}, [](double v) { return std::log1p(std::exp(v)); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RecurrentRef ref{.op = "RNN", .seq = 5, .batch = 3, .in = 5, .hidden = 4};
    ref.acts = {c.f};
    ref.x = wave(75, 4.1, 2.0), ref.w = wave(20, 4.2, 0.8), ref.r = wave(16, 4.3, 0.4), ref.b = wave(8, 4.4, 0.5);
    check_recurrent(ref, 14, {"Y", "Y_h"}, [&](::onnx::NodeProto* n) {
      set_attr_strings(n, "activations", {c.name});
      for (const auto& [name, values] :
           {std::pair{"activation_alpha", c.alpha}, std::pair{"activation_beta", c.beta}}) {
        if (values.empty()) continue;
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(::onnx::AttributeProto::FLOATS);
        for (float v : values) a->add_floats(v);
      }
    });
  }
}

TEST(OnnxImportErrors, RecurrentOpsNameTheBadActivationAndLengthsOutOfRange) {
  using TP = ::onnx::TensorProto;
  auto lstm = [](std::vector<std::string> inputs, std::vector<ValueSpec> fed, std::vector<::onnx::TensorProto> inits) {
    fed.insert(fed.begin(), {{"X", TP::FLOAT, {3, 2, 4}}, {"W", TP::FLOAT, {1, 8, 4}}, {"R", TP::FLOAT, {1, 8, 2}}});
    ::onnx::ModelProto m = node_model("LSTM", 14, fed, inits, inputs, {{"Y", TP::FLOAT, {3, 1, 2, 2}}});
    set_attr_int(m.mutable_graph()->mutable_node(0), "hidden_size", 2);
    return m;
  };
  const std::vector<TensorType> types{
      {Shape{3, 2, 4}, DType::kFloat32}, {Shape{1, 8, 4}, DType::kFloat32}, {Shape{1, 8, 2}, DType::kFloat32}};
  ::onnx::ModelProto bad = lstm({"X", "W", "R"}, {}, {});
  set_attr_strings(bad.mutable_graph()->mutable_node(0), "activations", {"Sigmoid", "Gelu", "Tanh"});
  EXPECT_CONTAINS(
      error_of<NotSupported>([&] { onnx::Model::parse(bad.SerializeAsString(), "lstm.onnx").to_graph(types); }),
      "lstm.onnx: ONNX node 'node0' (LSTM, opset 14): activation 'Gelu' (supported: Relu, Tanh, Sigmoid");
  // Known lengths outside [0, seq].
  ::onnx::ModelProto longer = lstm({"X", "W", "R", "", "lens"}, {}, {tensor<int32_t>("lens", TP::INT32, {2}, {4, 2})});
  EXPECT_CONTAINS(
      error_of<ValueError>([&] { onnx::Model::parse(longer.SerializeAsString(), "lstm.onnx").to_graph(types); }),
      "lstm.onnx: ONNX node 'node0' (LSTM, opset 14): sequence_lens [4,2] must lie in [0, 3]");
  ::onnx::ModelProto full = lstm({"X", "W", "R", "", "lens"}, {}, {tensor<int32_t>("lens", TP::INT32, {2}, {3, 3})});
  EXPECT_NO_THROW(onnx::Model::parse(full.SerializeAsString(), "lstm.onnx").to_graph(types));
}

// An imported LSTM (weights as initializers) runs in a SymbolBlock,
// hybridizes, and exports back to ONNX as the Kiln ops it is composed of:
// the re-imported model gives the same outputs.
TEST(OnnxImportRecurrent, LstmHybridizesAndRoundTripsThroughExport) {
  using TP = ::onnx::TensorProto;
  const int64_t S = 4, N = 2, I = 3, H = 5;
  auto floats = [](size_t count, double phase) {
    std::vector<double> d = wave(count, phase, 0.5);
    return std::vector<float>(d.begin(), d.end());
  };
  ::onnx::ModelProto m =
      node_model("LSTM", 14, {{"X", TP::FLOAT, {S, N, I}}},
                 {tensor<float>("W", TP::FLOAT, {1, 4 * H, I}, floats(4 * H * I, 0.1)),
                  tensor<float>("R", TP::FLOAT, {1, 4 * H, H}, floats(4 * H * H, 0.2)),
                  tensor<float>("B", TP::FLOAT, {1, 8 * H}, floats(8 * H, 0.3))},
                 {"X", "W", "R", "B"}, {{"Y", TP::FLOAT, {S, 1, N, H}}, {"Y_h", TP::FLOAT, {1, N, H}}});
  set_attr_int(m.mutable_graph()->mutable_node(0), "hidden_size", H);
  TempDir dir;
  const fs::path in_path = dir.path() / "lstm.onnx", out_path = dir.path() / "lstm_back.onnx";
  write_bytes(in_path, m.SerializeAsString());
  auto net = nn::SymbolBlock::imports(in_path.string(), {"X"});
  NDArray x = f32(wave(static_cast<size_t>(S * N * I), 0.4, 1.0), {S, N, I});
  std::vector<NDArray> in{x};
  std::vector<NDArray> eager = net(std::span<const NDArray>(in));
  net.hybridize();
  std::vector<NDArray> hybrid = net(std::span<const NDArray>(in));
  ASSERT_EQ(hybrid.size(), 2u);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(hybrid[k].to_vector<float>(), eager[k].to_vector<float>()) << k;
  nn::export_onnx(net, out_path.string());
  onnx::Model back = onnx::Model::load(out_path.string());
  EXPECT_EQ(back.op_counts().count("LSTM"), 0u);
  std::vector<NDArray> again = back.run(in);
  ASSERT_EQ(again.size(), 2u);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(again[k].to_vector<float>(), hybrid[k].to_vector<float>()) << k;
}

}  // namespace
}  // namespace kiln
