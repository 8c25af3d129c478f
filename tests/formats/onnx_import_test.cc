// ONNX import (frontend/formats/onnx/model.h): models exported from PyTorch
// (tests/data/onnx, written by scripts/make_onnx_fixtures.py) against
// PyTorch's outputs, at two batch sizes of one file; single ops against
// ONNX's documented examples; and bad input, each a clear error. RNN, GRU
// and LSTM are in onnx_recurrent_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "frontend/formats/onnx/model.h"
#include "frontend/nd_init.h"
#include "frontend/nn/symbol_block.h"
#include "frontend/npy.h"
#include "tests/formats/onnx_test_models.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::node_model;
using test::read_bytes;
using test::set_attr;
using test::set_attr_int;
using test::tensor;
using test::TempDir;
using test::ValueSpec;
using test::write_bytes;

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

// y = OP(x) for x f32[2,3], at `opset`.
::onnx::ModelProto one_node_model(const std::string& op, int opset) {
  using TP = ::onnx::TensorProto;
  return node_model(op, opset, {{"x", TP::FLOAT, {2, 3}}}, {}, {"x"}, {{"y", TP::FLOAT, {2, 3}}});
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

// An array of `dtype` holding `v`'s bytes (T has the dtype's size), and back.
template <typename T>
NDArray raw_array(const std::vector<T>& v, DType dtype) {
  NDArray t = NDArray::empty(Shape{static_cast<int64_t>(v.size())}, {dtype, Device::cpu(0)});
  std::memcpy(t.data(), v.data(), v.size() * sizeof(T));
  return t;
}
template <typename T>
std::vector<T> raw_values(const NDArray& a) {
  a.wait_to_read();
  EXPECT_EQ(dtype_size(a.dtype()), sizeof(T));
  std::vector<T> v(static_cast<size_t>(a.size()));
  std::memcpy(v.data(), a.data(), v.size() * sizeof(T));
  return v;
}

// uint64 Mod (fmod 0 and 1 agree for unsigned values) of dividends and
// divisors >= 2^63 and of neighbours float64 would round together; a zero
// divisor gives 0.
TEST(OnnxImport, ModOfUint64IsExactOverTheWholeRange) {
  using TP = ::onnx::TensorProto;
  const uint64_t top = ~uint64_t{0}, half = uint64_t{1} << 63;
  std::vector<uint64_t> a{top, half + 5, half, (uint64_t{1} << 53) + 1, 7, 123, top - 1};
  std::vector<uint64_t> b{3, half - 1, top, 2, 0, top - 1, half + 1};
  std::vector<uint64_t> want(a.size());
  for (size_t i = 0; i < a.size(); ++i) want[i] = b[i] == 0 ? 0 : a[i] % b[i];
  for (int fmod : {0, 1}) {
    ::onnx::ModelProto m = node_model("Mod", 13, {{"a", TP::UINT64, {7}}, {"b", TP::UINT64, {7}}}, {}, {"a", "b"},
                                      {{"y", TP::UINT64, {7}}});
    set_attr_int(m.mutable_graph()->mutable_node(0), "fmod", fmod);
    std::vector<NDArray> y = onnx::Model::parse(m.SerializeAsString(), "mod.onnx")
                                 .run(std::vector<NDArray>{raw_array(a, DType::kUint64), raw_array(b, DType::kUint64)});
    ASSERT_EQ(y[0].dtype(), DType::kUint64);
    EXPECT_EQ(raw_values<uint64_t>(y[0]), want) << "fmod " << fmod;
  }
}

// BitShift of each unsigned width, both directions, against C++'s shifts:
// amounts of 0, inside the width, the width itself and beyond (0 then),
// and for uint64 values and amounts of 2^63 and more.
template <typename T>
void check_bitshift(int onnx_type, DType dtype) {
  const T top = static_cast<T>(~T{0}), high = static_cast<T>(T{1} << (sizeof(T) * 8 - 1));
  const uint64_t bits = sizeof(T) * 8;
  std::vector<T> x{top, high, static_cast<T>(high + 5), 1, 0x5a, top, 200, 77, top, top};
  std::vector<T> s{0, 1, 3, static_cast<T>(bits - 1), 4, static_cast<T>(bits), 2, static_cast<T>(bits + 1), 63, top};
  if constexpr (sizeof(T) == 8) s.back() = high + 7;
  for (const char* direction : {"LEFT", "RIGHT"}) {
    std::vector<T> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const bool left = std::string_view(direction) == "LEFT";
      want[i] = s[i] >= bits ? T{0} : static_cast<T>(left ? x[i] << s[i] : x[i] >> s[i]);
    }
    const int64_t count = static_cast<int64_t>(x.size());
    ::onnx::ModelProto m = node_model("BitShift", 11, {{"x", onnx_type, {count}}, {"s", onnx_type, {count}}}, {},
                                      {"x", "s"}, {{"y", onnx_type, {count}}});
    set_attr(m.mutable_graph()->mutable_node(0), "direction", direction);
    std::vector<NDArray> y = onnx::Model::parse(m.SerializeAsString(), "bitshift.onnx")
                                 .run(std::vector<NDArray>{raw_array(x, dtype), raw_array(s, dtype)});
    ASSERT_EQ(y[0].dtype(), dtype);
    EXPECT_EQ(raw_values<T>(y[0]), want) << dtype_name(dtype) << " " << direction;
  }
}

TEST(OnnxImport, BitShiftIsExactForEveryUnsignedWidth) {
  using TP = ::onnx::TensorProto;
  check_bitshift<uint8_t>(TP::UINT8, DType::kUint8);
  check_bitshift<uint16_t>(TP::UINT16, DType::kUint16);
  check_bitshift<uint32_t>(TP::UINT32, DType::kUint32);
  check_bitshift<uint64_t>(TP::UINT64, DType::kUint64);
}

// Reduction 'mul' multiplies every update into its cell, duplicates included
// (ONNX's node test has none), for ScatterND (a negative index too) and
// ScatterElements.
TEST(OnnxImport, ScatterMulMultipliesDuplicateIndices) {
  using TP = ::onnx::TensorProto;
  ::onnx::ModelProto nd = node_model("ScatterND", 16, {{"data", TP::FLOAT, {4, 2}}, {"u", TP::FLOAT, {3, 2}}},
                                     {tensor<int64_t>("idx", TP::INT64, {3, 1}, {1, -1, 1})}, {"data", "idx", "u"},
                                     {{"y", TP::FLOAT, {4, 2}}});
  set_attr(nd.mutable_graph()->mutable_node(0), "reduction", "mul");
  std::vector<NDArray> y =
      onnx::Model::parse(nd.SerializeAsString(), "scatternd.onnx")
          .run(std::vector<NDArray>{nd::array(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, Shape{4, 2}),
                                    nd::array(std::vector<float>{2, 3, 4, 5, 6, 7}, Shape{3, 2})});
  EXPECT_EQ(y[0].to_vector<float>(), (std::vector<float>{1, 2, 3 * 2 * 6, 4 * 3 * 7, 5, 6, 7 * 4, 8 * 5}));

  ::onnx::ModelProto el = node_model("ScatterElements", 16, {{"data", TP::FLOAT, {2, 3}}, {"u", TP::FLOAT, {2, 2}}},
                                     {tensor<int64_t>("idx", TP::INT64, {2, 2}, {0, 0, 2, -2})}, {"data", "idx", "u"},
                                     {{"y", TP::FLOAT, {2, 3}}});
  auto* node = el.mutable_graph()->mutable_node(0);
  set_attr(node, "reduction", "mul");
  set_attr_int(node, "axis", 1);
  y = onnx::Model::parse(el.SerializeAsString(), "scatterelements.onnx")
          .run(std::vector<NDArray>{nd::array(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3}),
                                    nd::array(std::vector<float>{2, -3, 4, 0.5f}, Shape{2, 2})});
  EXPECT_EQ(y[0].to_vector<float>(), (std::vector<float>{1 * 2 * -3, 2, 3, 4, 5 * 0.5f, 6 * 4}));
}

// QuantizeLinear rounds halves to even and saturates, per tensor (float32
// and int32 x) and per axis; DynamicQuantizeLinear of zeros has scale 1/255.
TEST(OnnxImport, QuantizeLinearRoundsHalvesToEvenAndSaturates) {
  using TP = ::onnx::TensorProto;
  auto run = [](const ::onnx::ModelProto& m, NDArray x) {
    return onnx::Model::parse(m.SerializeAsString(), "quantize.onnx").run(std::vector<NDArray>{std::move(x)});
  };
  ::onnx::ModelProto u8 =
      node_model("QuantizeLinear", 13, {{"x", TP::FLOAT, {7}}},
                 {tensor<float>("scale", TP::FLOAT, {}, {2}), tensor<uint8_t>("zp", TP::UINT8, {}, {128})},
                 {"x", "scale", "zp"}, {{"y", TP::UINT8, {7}}});
  std::vector<NDArray> y = run(u8, nd::array(std::vector<float>{1, 3, 5, -1, -3, 600, -600}, Shape{7}));
  ASSERT_EQ(y[0].dtype(), DType::kUint8);
  EXPECT_EQ(raw_values<uint8_t>(y[0]), (std::vector<uint8_t>{128, 130, 130, 128, 126, 255, 0}));

  ::onnx::ModelProto s8 =
      node_model("QuantizeLinear", 13, {{"x", TP::INT32, {5}}},
                 {tensor<float>("scale", TP::FLOAT, {}, {2}), tensor<int8_t>("zp", TP::INT8, {}, {-1})},
                 {"x", "scale", "zp"}, {{"y", TP::INT8, {5}}});
  y = run(s8, nd::array(std::vector<int32_t>{3, 5, -3, 1000, -1000}, Shape{5}).astype(DType::kInt32));
  ASSERT_EQ(y[0].dtype(), DType::kInt8);
  EXPECT_EQ(raw_values<int8_t>(y[0]), (std::vector<int8_t>{1, 1, -3, 127, -128}));

  ::onnx::ModelProto axis = node_model("QuantizeLinear", 13, {{"x", TP::FLOAT, {2, 3}}},
                                       {tensor<float>("scale", TP::FLOAT, {3}, {1, 2, 4}),
                                        tensor<uint8_t>("zp", TP::UINT8, {3}, {0, 10, 250})},
                                       {"x", "scale", "zp"}, {{"y", TP::UINT8, {2, 3}}});
  y = run(axis, nd::array(std::vector<float>{2.5f, 5, 10, -7, 9, 40}, Shape{2, 3}));
  EXPECT_EQ(raw_values<uint8_t>(y[0]), (std::vector<uint8_t>{2, 12, 252, 0, 14, 255}));

  ::onnx::ModelProto dynamic = node_model("DynamicQuantizeLinear", 11, {{"x", TP::FLOAT, {3}}}, {}, {"x"},
                                          {{"y", TP::UINT8, {3}}, {"scale", TP::FLOAT, {}}, {"zp", TP::UINT8, {}}});
  y = run(dynamic, nd::array(std::vector<float>{0, 0, 0}, Shape{3}));
  ASSERT_EQ(y.size(), 3u);
  EXPECT_EQ(raw_values<uint8_t>(y[0]), (std::vector<uint8_t>{0, 0, 0}));
  EXPECT_EQ(y[1].to_vector<float>(), (std::vector<float>{1.0f / 255.0f}));
  EXPECT_EQ(raw_values<uint8_t>(y[2]), (std::vector<uint8_t>{0}));
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

// Composed ops build constants from the shapes and attributes of untrusted
// files: each is bounded before anything is allocated.
TEST(OnnxImportErrors, ComposedOpsBoundTheConstantsTheyBuild) {
  using TP = ::onnx::TensorProto;
  auto import = [](const ::onnx::ModelProto& m, const std::vector<TensorType>& types) {
    onnx::Model::parse(m.SerializeAsString(), "big.onnx").to_graph(types);
  };
  // CumSum over 2^13 elements would need a 2^13 x 2^13 matrix.
  ::onnx::ModelProto cumsum = node_model("CumSum", 14, {{"x", TP::FLOAT, {1, 8192}}},
                                         {tensor<int64_t>("axis", TP::INT64, {}, {1})}, {"x", "axis"},
                                         {{"y", TP::FLOAT, {1, 8192}}});
  EXPECT_CONTAINS(error_of<ValueError>([&] { import(cumsum, {{Shape{1, 8192}, DType::kFloat32}}); }),
                  "needs a 8192x8192 matrix, too large");
  // An Einsum diagonal over 2^13 needs the same mask.
  ::onnx::ModelProto einsum =
      node_model("Einsum", 12, {{"a", TP::FLOAT, {8192, 8192}}}, {}, {"a"}, {{"y", TP::FLOAT, {8192}}});
  set_attr(einsum.mutable_graph()->mutable_node(0), "equation", "ii->i");
  EXPECT_CONTAINS(error_of<ValueError>([&] { import(einsum, {{Shape{8192, 8192}, DType::kFloat32}}); }),
                  "the diagonal of 'i' needs a 8192x8192 mask, too large");
  // MaxUnpool's geometry from attributes: a zero stride is refused.
  ::onnx::ModelProto unpool = node_model("MaxUnpool", 11, {{"x", TP::FLOAT, {1, 1, 2, 2}}, {"i", TP::INT64, {1, 1, 2, 2}}},
                                         {}, {"x", "i"}, {{"y", TP::FLOAT, {1, 1, 4, 4}}});
  auto* node = unpool.mutable_graph()->mutable_node(0);
  auto* kernel = node->add_attribute();
  kernel->set_name("kernel_shape");
  kernel->set_type(::onnx::AttributeProto::INTS);
  kernel->add_ints(2);
  kernel->add_ints(2);
  auto* strides = node->add_attribute();
  strides->set_name("strides");
  strides->set_type(::onnx::AttributeProto::INTS);
  strides->add_ints(0);
  strides->add_ints(2);
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    import(unpool, {{Shape{1, 1, 2, 2}, DType::kFloat32}, {Shape{1, 1, 2, 2}, DType::kInt64}});
                  }),
                  "strides [0,2] must lie in [1,");
}

// The conversions composed for ScatterND 'mul', QuantizeLinear,
// DynamicQuantizeLinear and BitShift refuse what they do not handle, naming it.
TEST(OnnxImportErrors, ComposedOpsNameWhatTheyRefuse) {
  using TP = ::onnx::TensorProto;
  auto import = [](const ::onnx::ModelProto& m, const std::vector<TensorType>& types) {
    onnx::Model::parse(m.SerializeAsString(), "op.onnx").to_graph(types);
  };
  // ScatterND 'mul' builds a [updates, rows, row length] block: 2 x 4096 x 4096 is too many.
  ::onnx::ModelProto scatter = node_model(
      "ScatterND", 16, {{"data", TP::FLOAT, {4096, 4096}}, {"u", TP::FLOAT, {2, 4096}}},
      {tensor<int64_t>("idx", TP::INT64, {2, 1}, {0, 1})}, {"data", "idx", "u"}, {{"y", TP::FLOAT, {4096, 4096}}});
  set_attr(scatter.mutable_graph()->mutable_node(0), "reduction", "mul");
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    import(scatter, {{Shape{4096, 4096}, DType::kFloat32}, {Shape{2, 4096}, DType::kFloat32}});
                  }),
                  "reduction 'mul' of 2 updates into 4096 rows of 4096 needs a block of more than 16777216 elements");
  auto quantize = [](int x_type, int zp_type) {
    return node_model("QuantizeLinear", 13, {{"x", x_type, {2}}, {"s", TP::FLOAT, {}}, {"zp", zp_type, {}}}, {},
                      {"x", "s", "zp"}, {{"y", zp_type, {2}}});
  };
  EXPECT_CONTAINS(error_of<NotSupported>([&] {
                    import(quantize(TP::FLOAT, TP::INT32),
                           {{Shape{2}, DType::kFloat32}, {Shape{}, DType::kFloat32}, {Shape{}, DType::kInt32}});
                  }),
                  "quantizing to int32 is not supported");
  EXPECT_CONTAINS(error_of<NotSupported>([&] {
                    import(quantize(TP::INT8, TP::UINT8),
                           {{Shape{2}, DType::kInt8}, {Shape{}, DType::kFloat32}, {Shape{}, DType::kUint8}});
                  }),
                  "x must be floating or int32, got int8");
  ::onnx::ModelProto dynamic = node_model("DynamicQuantizeLinear", 11, {{"x", TP::DOUBLE, {3}}}, {}, {"x"},
                                          {{"y", TP::UINT8, {3}}, {"scale", TP::FLOAT, {}}, {"zp", TP::UINT8, {}}});
  EXPECT_CONTAINS(error_of<NotSupported>([&] { import(dynamic, {{Shape{3}, DType::kFloat64}}); }),
                  "x must be float32, got float64");
  auto shift = [](int type, const std::string& direction) {
    ::onnx::ModelProto m =
        node_model("BitShift", 11, {{"x", type, {2}}, {"s", type, {2}}}, {}, {"x", "s"}, {{"y", type, {2}}});
    set_attr(m.mutable_graph()->mutable_node(0), "direction", direction);
    return m;
  };
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    import(shift(TP::UINT8, "UP"), {{Shape{2}, DType::kUint8}, {Shape{2}, DType::kUint8}});
                  }),
                  "direction must be LEFT or RIGHT, got 'UP'");
  EXPECT_CONTAINS(error_of<NotSupported>([&] {
                    import(shift(TP::INT8, "LEFT"), {{Shape{2}, DType::kInt8}, {Shape{2}, DType::kInt8}});
                  }),
                  "BitShift takes uint8, uint16, uint32 or uint64, got int8");
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

}  // namespace
}  // namespace kiln
