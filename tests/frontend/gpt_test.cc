// The sequence-model stack above the ops: byte-level text windows,
// MultiHeadAttention (with its KV cache), TransformerBlock and models::Gpt
// (shapes, errors, hybridized == imperative, cached decoding == the full
// forward, configuration round trip). The fused attention op itself is
// checked against its decomposition in attention_test.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "frontend/data/byte_text.h"
#include "frontend/kiln.h"
#include "frontend/nn/export_onnx.h"
#include "models/gpt.h"
#include "models/gpt_generate.h"
#include "models/train_job.h"
#include "models/train_task.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

// A fresh folder under the system's temp directory, per test and process.
std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / fmt::format("kiln_{}_{}", name, ::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string alphabet(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>('a' + i % 26);
  return s;
}

TEST(ByteWindows, LabelIsTheNextByteAndWindowsStayInside) {
  data::ByteCorpus text(alphabet(1000));
  data::ByteWindows w(text, 16, {.seed = 3});
  EXPECT_EQ(w.size(), 999 / 16);
  std::vector<int64_t> all(static_cast<size_t>(w.size()));
  for (int64_t i = 0; i < w.size(); ++i) all[static_cast<size_t>(i)] = i;
  data::Batch b = w.batch(all);
  EXPECT_EQ(b.data.shape(), (Shape{w.size(), 16}));
  EXPECT_EQ(b.data.dtype(), DType::kInt32);
  auto x = b.data.to_vector<int32_t>(), y = b.label.to_vector<int32_t>();
  for (int64_t i = 0; i < w.size(); ++i) {
    const int64_t s = w.start(i);
    EXPECT_GE(s, i * 16);
    EXPECT_LT(s, (i + 1) * 16);
    EXPECT_LE(s + 17, 1000);
    for (int t = 0; t < 16; ++t) {
      EXPECT_EQ(x[static_cast<size_t>(i * 16 + t)], 'a' + (s + t) % 26);
      EXPECT_EQ(y[static_cast<size_t>(i * 16 + t)], 'a' + (s + t + 1) % 26);
    }
  }
}

TEST(ByteWindows, SeedsDecideTheOffsetsAndJitterOffTilesExactly) {
  data::ByteCorpus text(alphabet(5000));
  data::ByteWindows a(text, 32, {.seed = 1}), b(text, 32, {.seed = 1}), c(text, 32, {.seed = 2});
  data::ByteWindows tiles(text, 32, {.jitter = false});
  int differ = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a.start(i), b.start(i));
    differ += a.start(i) != c.start(i) ? 1 : 0;
    EXPECT_EQ(tiles.start(i), 32 * i);
  }
  EXPECT_GT(differ, a.size() / 2);
}

TEST(ByteWindows, SplitHoldsOutTheTailAndBadArgumentsAreErrors) {
  data::ByteCorpus text(alphabet(1000));
  auto [train, held] = text.split(0.1);
  EXPECT_EQ(train.size(), 900);
  EXPECT_EQ(held.size(), 100);
  EXPECT_EQ(held.bytes()[0], 'a' + 900 % 26);
  EXPECT_THROW(text.split(0), ValueError);
  EXPECT_THROW(data::ByteWindows(data::ByteCorpus("abc"), 3), ValueError);
  data::ByteWindows w(text, 10);
  EXPECT_THROW(w.start(w.size()), IndexError);
}

TEST(ByteCorpus, FortunesAreTheExtensionlessFilesInOrder) {
  const std::string dir = data::ByteCorpus::fortunes_dir();
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << dir << " missing (Debian's fortunes package)";
  data::ByteCorpus text = data::ByteCorpus::fortunes(dir);
  EXPECT_GT(text.size(), 2'000'000);  // about 2.6 MB
  EXPECT_LT(text.size(), 4'000'000);
  EXPECT_THROW(data::ByteCorpus::fortunes("/nonexistent-fortunes"), IOError);
}

NDArray random_ids(Shape s, int64_t vocab, uint64_t seed) {
  std::vector<float> u = test::uniform(s.size(), 0, static_cast<double>(vocab) - 1e-3, seed);
  std::vector<int32_t> v;
  for (float f : u) v.push_back(static_cast<int32_t>(f));
  return nd::array(v, s);
}

TEST(MultiHeadAttention, CachedDecodingEqualsTheFullSequence) {
  nd::random::seed(1);
  nn::MultiHeadAttention attn(24, 3);
  attn.initialize(init::Normal(0.3));
  NDArray x = nd::array(test::uniform(2 * 7 * 24, 5), Shape{2, 7, 24});
  NDArray full = attn(x);
  EXPECT_EQ(full.shape(), (Shape{2, 7, 24}));
  nn::AttentionCache cache;
  NDArray first = attn.forward(nd::slice_axis(x, 1, 0, 4), cache);
  EXPECT_EQ(cache.length(), 4);
  NDArray rest = attn.forward(nd::slice_axis(x, 1, 4, 6), cache);
  NDArray last = attn.forward(nd::slice_axis(x, 1, 6, 7), cache);
  EXPECT_EQ(cache.length(), 7);
  test::expect_close(nd::concat({first, rest, last}, 1), full, 1e-5, "cached vs full");
}

TEST(MultiHeadAttention, CausalMeansEarlierOutputsIgnoreLaterInputs) {
  nd::random::seed(2);
  nn::MultiHeadAttention attn(16, 2);
  attn.initialize(init::Normal(0.3));
  std::vector<float> v = test::uniform(1 * 5 * 16, 7);
  NDArray a = attn(nd::array(v, Shape{1, 5, 16}));
  for (size_t i = 4 * 16; i < v.size(); ++i) v[i] += 1.0f;  // change only the last position
  NDArray b = attn(nd::array(v, Shape{1, 5, 16}));
  test::expect_close(nd::slice_axis(a, 1, 0, 4), nd::slice_axis(b, 1, 0, 4), 1e-6, "earlier positions");
  EXPECT_THROW(nn::MultiHeadAttention(10, 3), ValueError);
  EXPECT_THROW(attn(nd::ones({1, 5, 8})), ShapeError);
}

models::GptConfig tiny() { return {.vocab = 32, .layers = 2, .heads = 2, .width = 16, .context = 12}; }

TEST(Gpt, LogitsShapeAndHybridizedEqualsImperative) {
  nd::random::seed(3);
  models::Gpt net(tiny());
  net.initialize(init::Normal(0.1));
  NDArray ids = random_ids({3, 10}, 32, 11);
  NDArray imperative = net(ids);
  EXPECT_EQ(imperative.shape(), (Shape{3, 10, 32}));
  net.hybridize();
  test::expect_close(net(ids), imperative, 1e-5, "hybridized");
  // The structural names a checkpoint or `kiln generate` relies on.
  auto names = net.collect_params().names();
  std::set<std::string> got(names.begin(), names.end());
  for (const char* n : {"embed.weight", "pos_weight", "blocks.0.attn.qkv.weight", "blocks.1.proj.bias", "ln_f.gamma",
                        "head.weight"})
    EXPECT_TRUE(got.count(n)) << n;
}

TEST(Gpt, CachedDecodingEqualsTheFullForward) {
  nd::random::seed(4);
  models::Gpt net(tiny());
  net.initialize(init::Normal(0.1));
  NDArray ids = random_ids({2, 9}, 32, 12);
  NDArray full = net(ids);
  models::GptCache cache;
  std::vector<NDArray> parts{net.forward(nd::slice_axis(ids, 1, 0, 5), cache)};
  for (int64_t t = 5; t < 9; ++t) parts.push_back(net.forward(nd::slice_axis(ids, 1, t, t + 1), cache));
  test::expect_close(nd::concat(parts, 1), full, 1e-5, "cached decoding");
}

TEST(Gpt, TooLongSequencesAndBadConfigurationsAreNamed) {
  models::Gpt net(tiny());
  net.initialize(init::Normal(0.1));
  try {
    net(random_ids({1, 13}, 32, 1));
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("13"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("context of 12"), std::string::npos) << e.what();
  }
  models::GptCache cache;
  net.forward(random_ids({1, 10}, 32, 2), cache);
  EXPECT_THROW(net.forward(random_ids({1, 3}, 32, 3), cache), ShapeError);
  try {
    net(nd::array(std::vector<int32_t>{1, 40}, Shape{1, 2})).wait_to_read();
    FAIL() << "expected an IndexError";
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("40"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
  }
  {
    models::GptConfig c = tiny();
    c.heads = 3;
    EXPECT_THROW(models::Gpt{c}, ValueError);
  }
}

TEST(GptConfig, JsonRoundTripAndBadFields) {
  models::GptConfig c = tiny();
  models::GptConfig d = models::GptConfig::from_json(c.to_json(), "cfg");
  EXPECT_EQ(d.to_json(), c.to_json());
  EXPECT_THROW(models::GptConfig::from_json("{\"vocab\": 3}", "cfg"), ValueError);
  EXPECT_THROW(models::GptConfig::from_json("not json", "cfg"), ValueError);
  EXPECT_THROW(models::GptConfig::from_json(
                   "{\"vocab\":256,\"layers\":0,\"heads\":1,\"width\":8,\"context\":8}", "cfg"),
               ValueError);
}

TEST(Gpt, ExportsToMxnetAndOnnxAndReloadsWithEqualOutputs) {
  nd::random::seed(5);
  models::Gpt net(tiny());
  net.initialize(init::Normal(0.1));
  net.hybridize();
  NDArray ids = random_ids({2, 12}, 32, 13);
  NDArray want = net(ids);
  const std::string dir = temp_dir("gpt_export");
  net.export_model(dir + "/gpt");
  auto mx = nn::SymbolBlock::imports(dir + "/gpt-symbol.json", {"data"}, dir + "/gpt-0000.params");
  test::expect_close(mx(ids), want, 1e-6, "MXNet export reloaded");
  nn::export_onnx(net, dir + "/gpt.onnx");
  auto ox = nn::SymbolBlock::imports(dir + "/gpt.onnx", {"data"});
  test::expect_close(ox(ids), want, 1e-5, "ONNX export reloaded");
}

TEST(Gpt, SamplingIsReproducibleBySeedAndTheCacheChangesNothing) {
  const std::string kPrompt = "\x03\x05";  // ids below the tiny vocabulary of 32
  nd::random::seed(6);
  models::Gpt net(tiny());
  net.initialize(init::Normal(0.5));
  models::SampleOptions o{.tokens = 9, .temperature = 1.0, .top_k = 5, .seed = 7};
  const std::string a = models::generate(net, kPrompt, o);
  EXPECT_EQ(a.size(), 9u);
  EXPECT_EQ(models::generate(net, kPrompt, o), a);
  o.use_cache = false;
  EXPECT_EQ(models::generate(net, kPrompt, o), a) << "the cache must not change the text";
  o.seed = 8;
  o.use_cache = true;
  EXPECT_NE(models::generate(net, kPrompt, o), a);
  // Past the context (12): the cache restarts and sampling goes on.
  o.tokens = 30;
  EXPECT_EQ(models::generate(net, kPrompt, o).size(), 30u);
  EXPECT_THROW(models::generate(net, kPrompt, {.tokens = -1}), ValueError);
}

// The main job's text task: a small GPT on a short text learns it (CI's
// stand-in for fortunes), hybridized or not, in bfloat16 too, and resumes
// from a checkpoint with the parameters of an uninterrupted run.
class GptJob : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir("gpt_job");
    std::filesystem::create_directories(dir_ + "/text");
    std::string text;
    for (int i = 0; i < 60; ++i) text += "the quick brown fox jumps over the lazy dog. ";
    std::ofstream(dir_ + "/text/fox") << text;
    std::ofstream(dir_ + "/text/fox.dat") << "ignored";
  }
  models::TrainConfig config() const {
    models::TrainConfig c{.model = "gpt", .epochs = 3, .batch_size = 8, .lr = 3e-3, .optimizer = "adamw",
                          .seed = 1, .data_dir = dir_ + "/text"};
    c.gpt = {.layers = 2, .heads = 2, .width = 32, .context = 16};
    return c;
  }
  std::string dir_;
};

TEST_F(GptJob, ASmallGptLearnsAShortText) {
  for (bool hybridize : {false, true}) {
    models::TrainConfig c = config();
    c.hybridize = hybridize;
    auto history = models::train(c);
    ASSERT_EQ(history.size(), 3u);
    EXPECT_TRUE(history[0].text);
    EXPECT_EQ(history[0].item, "tokens");
    // A uniform guess is 8 bits per byte; the text repeats every 45 bytes.
    EXPECT_LT(history[2].test_loss / std::log(2.0), 2.0) << "hybridize " << hybridize;
    EXPECT_GT(history[2].test_acc, 0.5) << "hybridize " << hybridize;
    EXPECT_NE(models::epoch_log_line(history[2]).find("test_bits_per_byte"), std::string::npos);
  }
  models::TrainConfig c = config();
  c.amp = DType::kBfloat16;
  auto history = models::train(c);
  EXPECT_LT(history[2].test_loss, history[0].test_loss) << "bfloat16";
}

TEST(GptRecipe, TheTaskOwnsItsRecipeAndUnknownModelsAreNamed) {
  models::TrainConfig g = models::recipe_for("gpt");
  EXPECT_EQ(g.model, "gpt");
  EXPECT_EQ(g.optimizer, "adamw");
  EXPECT_EQ(g.batch_size, 32);
  EXPECT_DOUBLE_EQ(g.lr, 1e-3);
  EXPECT_DOUBLE_EQ(g.wd, 0.1);
  EXPECT_EQ(g.lr_schedule, "cosine");
  EXPECT_EQ(g.warmup_steps, 100);
  EXPECT_DOUBLE_EQ(g.clip_grad_norm, 1.0);
  models::TrainConfig lenet = models::recipe_for("lenet");
  EXPECT_EQ(lenet.optimizer, "sgd");
  EXPECT_EQ(lenet.batch_size, 256);
  std::string msg = test::error_of<ValueError>([] { (void)models::recipe_for("gtp"); });
  EXPECT_CONTAINS(msg, "--model gtp: unknown");
}

TEST_F(GptJob, ResumesFromACheckpointBitForBit) {
  models::TrainConfig c = config();
  c.epochs = 2;
  c.save_prefix = dir_ + "/whole";
  models::train(c);
  models::TrainConfig first = config();
  first.epochs = 1;
  first.checkpoint_dir = dir_ + "/ckpt";
  models::train(first);
  models::TrainConfig rest = config();
  rest.epochs = 2;
  rest.checkpoint_dir = dir_ + "/ckpt";
  rest.resume = true;
  rest.save_prefix = dir_ + "/resumed";
  // No progress callback here: the loop must count batches without one.
  models::train(rest);
  models::Gpt a(models::GptConfig::from_json(read_file(dir_ + "/whole.json"), "whole.json"));
  models::Gpt b(models::GptConfig::from_json(read_file(dir_ + "/resumed.json"), "resumed.json"));
  a.load_parameters(dir_ + "/whole.params");
  b.load_parameters(dir_ + "/resumed.params");
  for (const auto& name : a.collect_params().names()) {
    EXPECT_EQ(a.collect_params().at(name).data().to_vector<float>(),
              b.collect_params().at(name).data().to_vector<float>())
        << name;
  }
}

}  // namespace
}  // namespace kiln
