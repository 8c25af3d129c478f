// nn::Parameter, ParameterDict, initializers, and the params file
// (save_ndarrays/load_ndarrays, Block::save_parameters/load_parameters).
#include <gtest/gtest.h>

#include "tests/test_util.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "frontend/kiln.h"
#include "frontend/nn/nn.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using test::error_of;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / fmt::format("kiln_nn_params_{}_{}", ::getpid(),
                                                    ::testing::UnitTest::GetInstance()->random_seed() + counter_++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// ---- Parameter and initializers

TEST(NnParameter, InitializeAndData) {
  nn::Parameter p("w", Shape{2, 3}, {.init = init::Constant(1.5)});
  EXPECT_FALSE(p.is_initialized());
  p.initialize(init::Zero(), {Device::cpu(0)});
  EXPECT_TRUE(p.is_initialized());
  EXPECT_EQ(p.data().to_vector<float>(), std::vector<float>(6, 1.5f));  // its own initializer wins
  EXPECT_EQ(p.grad().to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(p.to_string(), "Parameter w (shape=[2,3], dtype=float32)");

  // initialize again: nothing changes unless forced; forced keeps the arrays.
  NDArray before = p.data();
  p.set_init(init::One());
  p.initialize();
  EXPECT_EQ(p.data().to_vector<float>(), std::vector<float>(6, 1.5f));
  p.initialize(init::Zero(), {Device::cpu(0)}, true);
  EXPECT_EQ(before.to_vector<float>(), std::vector<float>(6, 1.0f));
}

TEST(NnParameter, GlobalInitializerByName) {
  nd::random::seed(5);
  nn::Parameter w("layer.weight", Shape{50, 40}), b("layer.bias", Shape{50}), g("bn.gamma", Shape{4}),
      beta("bn.beta", Shape{4});
  for (auto* p : {&w, &b, &g, &beta}) p->initialize(init::Uniform(0.1));
  auto wv = w.data().to_vector<float>();
  EXPECT_LE(*std::max_element(wv.begin(), wv.end()), 0.1f);
  EXPECT_GE(*std::min_element(wv.begin(), wv.end()), -0.1f);
  EXPECT_GT(*std::max_element(wv.begin(), wv.end()), 0.09f);  // spread over the range
  EXPECT_EQ(b.data().to_vector<float>(), std::vector<float>(50, 0.0f));
  EXPECT_EQ(g.data().to_vector<float>(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(beta.data().to_vector<float>(), std::vector<float>(4, 0.0f));
}

TEST(NnParameter, RandomInitializersAreSeededAndScaled) {
  auto draw = [](const init::Initializer& i) {
    nd::random::seed(9);
    nn::Parameter p("weight", Shape{200, 300});
    p.initialize(i);
    return p.data().to_vector<double>();
  };
  auto n1 = draw(init::Normal(0.02)), n2 = draw(init::Normal(0.02));
  EXPECT_EQ(n1, n2);
  double mean = std::accumulate(n1.begin(), n1.end(), 0.0) / n1.size(), var = 0;
  for (double v : n1) var += (v - mean) * (v - mean);
  EXPECT_NEAR(std::sqrt(var / n1.size()), 0.02, 0.001);

  // Xavier uniform, avg: scale = sqrt(3 / ((300 + 200) / 2)).
  auto x = draw(init::Xavier());
  double scale = std::sqrt(3.0 / 250.0);
  EXPECT_LE(*std::max_element(x.begin(), x.end()), scale);
  EXPECT_GT(*std::max_element(x.begin(), x.end()), 0.95 * scale);
  // Xavier gaussian, fan in, magnitude 2 (He): std = sqrt(2 / 300).
  auto he = draw(init::Xavier("gaussian", "in", 2));
  double m2 = 0;
  for (double v : he) m2 += v * v;
  EXPECT_NEAR(std::sqrt(m2 / he.size()), std::sqrt(2.0 / 300), 0.002);
  // Conv weights: fan includes the kernel area.
  nn::Parameter conv("weight", Shape{8, 4, 3, 3});
  conv.initialize(init::Xavier("uniform", "out", 1));
  auto cv = conv.data().to_vector<double>();
  EXPECT_LE(*std::max_element(cv.begin(), cv.end()), std::sqrt(1.0 / 72));

  nn::Parameter vec("weight", Shape{5});
  EXPECT_CONTAINS(error_of<ValueError>([&] { vec.initialize(init::Xavier()); }), "at least 2 dims");
  EXPECT_THROW(init::Xavier("bad"), ValueError);
  EXPECT_THROW(init::Xavier("uniform", "sideways"), ValueError);
  EXPECT_EQ(init::Normal(0.01).to_string(), "Normal(sigma=0.01)");
}

TEST(NnParameter, CustomInitializerAndDtypes) {
  init::Initializer halves("Halves",
                           [](const Shape& s, ArrayOptions o, std::string_view) { return nd::full(s, 0.5, o); });
  nn::Parameter p("weight", Shape{3}, {.dtype = DType::kFloat64});
  p.initialize(halves);
  EXPECT_EQ(p.data().dtype(), DType::kFloat64);
  EXPECT_EQ(p.data().to_vector<double>(), std::vector<double>(3, 0.5));
  nn::Parameter q("weight", Shape{3}, {.dtype = DType::kInt32});
  q.initialize(init::Uniform(0.07));  // drawn in float32, converted
  EXPECT_EQ(q.data().dtype(), DType::kInt32);
}

TEST(NnParameter, DeferredShapeCompletion) {
  nn::Parameter p("weight", Shape{4, 0});
  p.initialize(init::One());
  EXPECT_TRUE(p.is_deferred());
  EXPECT_CONTAINS(error_of<ValueError>([&] { p.data(); }), "first forward");
  EXPECT_CONTAINS(error_of<ShapeError>([&] { p.complete_shape(Shape{5, 3}); }), "does not match");
  EXPECT_THROW(p.complete_shape(Shape{4}), ShapeError);
  p.complete_shape(Shape{4, 3});
  EXPECT_FALSE(p.is_deferred());
  EXPECT_EQ(p.data().to_vector<float>(), std::vector<float>(12, 1.0f));
}

TEST(NnParameter, SetData) {
  nn::Parameter p("weight", Shape{2, 0});
  // Not initialized: set_data initializes from the value (a copy).
  NDArray v = nd::array(std::vector<float>{1, 2, 3, 4}, {2, 2});
  p.set_data(v);
  EXPECT_EQ(p.shape(), (Shape{2, 2}));
  EXPECT_EQ(p.data().to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  v += 1.0;
  EXPECT_EQ(p.data().to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  // Initialized: copies into the existing array (handles others hold see it).
  NDArray held = p.data();
  p.set_data(nd::full({2, 2}, 7.0, {.dtype = DType::kFloat64}));
  EXPECT_EQ(held.to_vector<float>(), std::vector<float>(4, 7.0f));
  EXPECT_CONTAINS(error_of<ShapeError>([&] { p.set_data(nd::ones({3})); }), "'weight'");
}

TEST(NnParameter, GradReqAndAux) {
  nn::Parameter aux("running_mean", Shape{3}, {.is_aux = true});
  EXPECT_EQ(aux.grad_req(), GradReq::kNull);
  aux.initialize();
  EXPECT_CONTAINS(error_of<ValueError>([&] { aux.grad(); }), "auxiliary");
  EXPECT_THROW(aux.set_grad_req(GradReq::kWrite), ValueError);
  nn::Parameter w("weight", Shape{2});
  w.initialize(init::One());
  EXPECT_TRUE(w.data().requires_grad());
  w.set_grad_req(GradReq::kNull);
  EXPECT_FALSE(w.data().requires_grad());
  w.set_grad_req(GradReq::kAdd);
  EXPECT_EQ(w.data().grad_req(), GradReq::kAdd);
  EXPECT_THROW(nn::Parameter().name(), ValueError);
}

TEST(NnParameter, CopiesPerDevice) {
  std::vector<Device> devices{Device::cpu(0), Device::cpu(1)};
  nn::Dense d(2, "", true, true, 3);
  d.initialize(init::Uniform(), devices);
  nn::Parameter w = d.weight();
  EXPECT_EQ(w.list_devices(), devices);
  EXPECT_EQ(w.data(Device::cpu(0)).to_vector<float>(), w.data(Device::cpu(1)).to_vector<float>());
  EXPECT_EQ(w.data(Device::cpu(1)).device(), Device::cpu(1));
  EXPECT_CONTAINS(error_of<ValueError>([&] { w.data(); }), "several devices");
  EXPECT_CONTAINS(error_of<DeviceError>([&] { w.data(Device::cpu(2)); }), "cpu(2)");
  // Each input is served by the copy on its device.
  auto y0 = d(nd::ones({1, 3}));
  auto y1 = d(nd::ones({1, 3}, {.device = Device::cpu(1)}));
  EXPECT_EQ(y1.device(), Device::cpu(1));
  EXPECT_EQ(y0.to_vector<float>(), y1.to_vector<float>());
  EXPECT_EQ(w.list_grad().size(), 2u);
  EXPECT_THROW(w.initialize(init::One(), {Device::cpu(0), Device::cpu(0)}, true), ValueError);
}

TEST(NnParameterDict, Basics) {
  nn::HybridSequential net;
  net.add(nn::Dense(4, "", true, true, 3), nn::Dense(2, "", false));
  auto params = net.collect_params();
  EXPECT_EQ(params.size(), 3u);
  EXPECT_EQ(params.total_size(), 4 * 3 + 4 + 0);  // 1.weight is [2, 0] until the first call
  EXPECT_TRUE(params.contains("1.weight"));
  EXPECT_CONTAINS(error_of<ValueError>([&] { params["2.weight"]; }), "0.weight, 0.bias, 1.weight");
  nn::ParameterDict d;
  d.insert("a", nn::Parameter("a", Shape{1}));
  EXPECT_THROW(d.insert("a", nn::Parameter("a", Shape{1})), ValueError);
  net.initialize();
  net(nd::ones({1, 3}));
  EXPECT_EQ(net.collect_params().total_size(), 12 + 4 + 8);
  EXPECT_EQ(params.to_string(),
            "ParameterDict(\n  Parameter 0.weight (shape=[4,3], dtype=float32)\n"
            "  Parameter 0.bias (shape=[4], dtype=float32)\n  Parameter 1.weight (shape=[2,4], dtype=float32)\n)");
}

// ---- the params file

TEST(NnParamsFile, GoldenBytes) {
  std::string want;
  put<uint64_t>(want, 0x112);
  put<uint64_t>(want, 0);
  put<uint64_t>(want, 2);
  // "w": float32 [2] {1, -2}
  put<uint32_t>(want, 0xF993FAC9);
  put<int32_t>(want, 0);
  put<int32_t>(want, 1);
  put<int64_t>(want, 2);
  put<int32_t>(want, 1);
  put<int32_t>(want, 0);
  put<int32_t>(want, 0);
  put<float>(want, 1.0f);
  put<float>(want, -2.0f);
  // "s": an int64 scalar (V3 record: ndim 0 is a scalar there)
  put<uint32_t>(want, 0xF993FACA);
  put<int32_t>(want, 0);
  put<int32_t>(want, 0);
  put<int32_t>(want, 1);
  put<int32_t>(want, 0);
  put<int32_t>(want, 6);
  put<int64_t>(want, 42);
  put<uint64_t>(want, 2);
  put<uint64_t>(want, 1);
  want += "w";
  put<uint64_t>(want, 1);
  want += "s";
  NamedArrays arrays{{"w", nd::array(std::vector<float>{1, -2})},
                         {"s", nd::array(std::vector<int64_t>{42}, Shape{})}};
  EXPECT_EQ(mxnet::serialize_ndarrays(arrays), want);
  auto back = mxnet::parse_ndarrays(want, "golden");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].first, "s");
  EXPECT_EQ(back[1].second.shape(), Shape{});
  EXPECT_EQ(back[1].second.item<int64_t>(), 42);
}

TEST(NnParamsFile, RoundTripEveryDtypeBitExact) {
  TempDir dir;
  nd::random::seed(1);
  NamedArrays arrays;
  arrays.emplace_back("f32", nd::random::normal({3, 4, 5}));
  arrays.emplace_back("f64", nd::random::normal({7}, 0, 1, {.dtype = DType::kFloat64}));
  arrays.emplace_back("f16", nd::random::normal({2, 3}, 0, 1, {.dtype = DType::kFloat16}));
  arrays.emplace_back("i32", nd::arange(-5, 5, 1, {.dtype = DType::kInt32}));
  arrays.emplace_back("u8", nd::arange(0, 255, 7, {.dtype = DType::kUint8}));
  arrays.emplace_back("empty", nd::zeros({0, 3}));
  arrays.emplace_back("none", NDArray());
  std::string path = dir.file("a.params");
  mxnet::save_ndarrays(path, arrays);
  auto back = mxnet::load_ndarrays(path);
  ASSERT_EQ(back.size(), arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    EXPECT_EQ(back[i].first, arrays[i].first);
    const NDArray &a = arrays[i].second, &b = back[i].second;
    ASSERT_EQ(a.is_none(), b.is_none()) << arrays[i].first;
    if (a.is_none()) continue;
    EXPECT_EQ(a.shape(), b.shape());
    EXPECT_EQ(a.dtype(), b.dtype());
    a.wait_to_read();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << arrays[i].first;
  }
  // Written atomically: only the final file is left.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator{}), 1);
  // Unnamed (list) files: a name count of 0.
  auto list = mxnet::parse_ndarrays(mxnet::serialize_ndarrays({{"", nd::ones({1})}}), "list");
  EXPECT_EQ(list[0].first, "");
}

TEST(NnParamsFile, LegacyRecords) {
  // Pre-V1 (no magic, u32 dims) and V1 (magic, i64 dims, no storage type).
  std::string s;
  put<uint64_t>(s, 0x112);
  put<uint64_t>(s, 0);
  put<uint64_t>(s, 2);
  put<uint32_t>(s, 2);  // v0: ndim
  put<uint32_t>(s, 1);
  put<uint32_t>(s, 2);
  put<int32_t>(s, 1);
  put<int32_t>(s, 0);
  put<int32_t>(s, 0);
  put<float>(s, 3);
  put<float>(s, 4);
  put<uint32_t>(s, 0xF993FAC8);  // V1
  put<uint32_t>(s, 1);
  put<int64_t>(s, 1);
  put<int32_t>(s, 2);  // a GPU context: loads on the CPU anyway
  put<int32_t>(s, 3);
  put<int32_t>(s, 1);
  put<double>(s, 2.5);
  put<uint64_t>(s, 0);
  auto a = mxnet::parse_ndarrays(s, "legacy");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].second.shape(), (Shape{1, 2}));
  EXPECT_EQ(a[0].second.to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(a[1].second.dtype(), DType::kFloat64);
  EXPECT_EQ(a[1].second.device(), Device::cpu(0));
  EXPECT_EQ(a[1].second.to_vector<double>(), (std::vector<double>{2.5}));
}

TEST(NnParamsFile, TruncatedAndCorruptFilesThrowIOError) {
  TempDir dir;
  std::string bytes = mxnet::serialize_ndarrays({{"0.weight", nd::ones({3, 2})}, {"0.bias", nd::zeros({3})}});
  std::string path = dir.file("t.params");
  // Every proper prefix fails with the source name and a byte offset (a few
  // through files, all in memory).
  for (size_t n : {size_t{0}, size_t{20}, bytes.size() / 2, bytes.size() - 1}) {
    write_bytes(path, bytes.substr(0, n));
    std::string e = error_of<IOError>([&] { mxnet::load_ndarrays(path); });
    EXPECT_CONTAINS(e, path);
    EXPECT_CONTAINS(e, "byte");
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string e = error_of<IOError>([&] { mxnet::parse_ndarrays(std::string_view(bytes).substr(0, n), "cut.params"); });
    EXPECT_CONTAINS(e, "cut.params");
    EXPECT_CONTAINS(e, "byte");
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "prefix of " << n << " bytes";
      break;
    }
  }
  auto corrupt = [&](size_t offset, auto value) {
    std::string b = bytes;
    std::memcpy(b.data() + offset, &value, sizeof value);
    return error_of<IOError>([&] { mxnet::parse_ndarrays(b, "corrupt.params"); });
  };
  EXPECT_CONTAINS(corrupt(0, uint64_t{0x113}), "not an MXNet NDArray-list file");
  EXPECT_CONTAINS(corrupt(16, uint64_t{1} << 60), "array count");
  EXPECT_CONTAINS(corrupt(32, int32_t{9}), "9 dims");           // ndim of record 0
  EXPECT_CONTAINS(corrupt(36, int64_t{1} << 40), "truncated");  // a huge dim
  EXPECT_CONTAINS(corrupt(36, int64_t{-4}), "negative dim");
  EXPECT_CONTAINS(corrupt(60, int32_t{99}), "dtype");  // type flag of record 0
  EXPECT_CONTAINS(corrupt(bytes.size() - 8 - 6 - 8 - 8 - 8, uint64_t{5}), "5 names for 2 arrays");
  EXPECT_CONTAINS(corrupt(bytes.size() - 8 - 6, uint64_t{1} << 50), "name 1");
  std::string sparse = bytes;
  int32_t one = 1;
  std::memcpy(sparse.data() + 28, &one, 4);
  EXPECT_CONTAINS(error_of<NotSupported>([&] { mxnet::parse_ndarrays(sparse, "s.params"); }), "sparse");
  std::string zip = "PK\x03\x04 and more";
  EXPECT_CONTAINS(error_of<NotSupported>([&] { mxnet::parse_ndarrays(zip, "z.params"); }), "npz");
  EXPECT_CONTAINS(error_of<IOError>([&] { mxnet::load_ndarrays(dir.file("absent.params")); }), "absent.params");
}

nn::HybridSequential small_net() {
  nn::HybridSequential net;
  net.add(nn::Dense(4, "relu", true, true, 3), nn::Dense(2));
  return net;
}

TEST(NnParamsFile, SaveLoadParametersBitExact) {
  TempDir dir;
  nd::random::seed(21);
  auto a = small_net();
  a.initialize(init::Normal(1.0));
  NDArray x = nd::random::normal({5, 3});
  NDArray ya = a(x);
  std::string path = dir.file("net.params");
  a.save_parameters(path);
  auto names = mxnet::load_ndarrays(path);
  ASSERT_EQ(names.size(), 4u);
  EXPECT_EQ(names[0].first, "0.weight");
  EXPECT_EQ(names[3].first, "1.bias");

  // Into an uninitialized (deferred) net: the shapes come from the file.
  auto b = small_net();
  b.load_parameters(path);
  for (auto& [name, p] : a.collect_params()) {
    EXPECT_EQ(p.data().to_vector<float>(), b.collect_params()[name].data().to_vector<float>()) << name;
  }
  EXPECT_EQ(ya.to_vector<float>(), b(x).to_vector<float>());
  // Into an initialized net: the values are copied into its arrays.
  auto c = small_net();
  c.initialize();
  c(x);
  NDArray held = c.collect_params()["1.weight"].data();
  c.load_parameters(path);
  EXPECT_EQ(held.to_vector<float>(), a.collect_params()["1.weight"].data().to_vector<float>());
  EXPECT_TRUE(c.collect_params()["1.weight"].data().requires_grad());
}

TEST(NnParamsFile, LoadParametersListsEveryProblem) {
  TempDir dir;
  std::string path = dir.file("bad.params");
  mxnet::save_ndarrays(path, {{"0.weight", nd::ones({4, 3})},
                           {"0.bias", nd::ones({5})},                              // mis-shaped
                           {"1.bias", nd::ones({2}, {.dtype = DType::kFloat64})},  // wrong dtype
                           {"2.weight", nd::ones({1})},                            // extra
                           {"extra.thing", nd::ones({1})}});                       // extra
  auto net = small_net();
  std::string e = error_of<ValueError>([&] { net.load_parameters(path); });
  EXPECT_CONTAINS(e, path);
  EXPECT_CONTAINS(e, "1 missing from the file: 1.weight");
  EXPECT_CONTAINS(e, "2 extra in the file (not in the block): 2.weight, extra.thing");
  EXPECT_CONTAINS(e, "0.bias (expected shape [4], file has [5])");
  EXPECT_CONTAINS(e, "1.bias (expected dtype float32, file has float64)");
  EXPECT_FALSE(net.collect_params()["0.weight"].is_initialized());  // nothing loaded

  // allow_missing and ignore_extra relax those two lists only.
  mxnet::save_ndarrays(path, {{"arg:0.weight", nd::ones({4, 3})}, {"aux:0.bias", nd::ones({4})}, {"zzz", nd::ones({1})}});
  EXPECT_CONTAINS(error_of<ValueError>([&] { net.load_parameters(path, Device::cpu(0), true); }), "zzz");
  EXPECT_CONTAINS(error_of<ValueError>([&] { net.load_parameters(path, Device::cpu(0), false, true); }),
                  "1.weight, 1.bias");
  net.load_parameters(path, Device::cpu(0), true, true);  // "arg:"/"aux:" prefixes are stripped
  EXPECT_EQ(net.collect_params()["0.bias"].data().to_vector<float>(), std::vector<float>(4, 1.0f));
  EXPECT_FALSE(net.collect_params()["1.weight"].is_initialized());

  EXPECT_CONTAINS(error_of<ValueError>([&] { small_net().save_parameters(dir.file("x.params")); }),
                  "has not been initialized");
}

// A file written by MXNet 1.4.1 (Gluon export), when the shared fixtures are
// present: it loads, and writing it back gives the same bytes.
TEST(NnParamsFile, ReadsMxnetFileByteCompatibly) {
  const char* root = std::getenv("KILN_MXNET_MODELS");
  std::string dir = root ? root : "/work/shared/mxnet-models";
  std::string path = dir + "/gluon-lenet-1.4.1/lenet-0001.params";
  if (!fs::exists(path)) GTEST_SKIP() << "no MXNet fixtures at " << dir << " (set KILN_MXNET_MODELS)";
  auto arrays = mxnet::load_ndarrays(path);
  ASSERT_EQ(arrays.size(), 8u);
  EXPECT_EQ(arrays[0].second.shape(), (Shape{5, 1, 5, 5}));
  EXPECT_TRUE(arrays[0].first.starts_with("arg:"));
  EXPECT_EQ(mxnet::serialize_ndarrays(arrays), read_bytes(path));
  // The oldest layout (pre-V1 records) loads too.
  auto legacy = mxnet::load_ndarrays(dir + "/mtcnn-det1-legacy/det1-0001.params");
  EXPECT_FALSE(legacy.empty());
}

}  // namespace
}  // namespace kiln
