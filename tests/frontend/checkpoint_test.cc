// Checkpoints: the file format (round trip; foreign, truncated, corrupt and
// newer files refused with the file and byte named), the training state
// (every piece restored: a resumed loop ends bit-identical to an uninterrupted
// one), the directory (keep-last-K, manifest, fallback to an older checkpoint).
// The SIGKILL test of `kiln train` is checkpoint_kill_test.cc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "frontend/autograd.h"
#include "frontend/data/dataloader.h"
#include "frontend/nd.h"
#include "frontend/nn/nn.h"
#include "frontend/train/checkpoint.h"
#include "frontend/train/checkpoint_dir.h"
#include "frontend/train/loss.h"
#include "frontend/train/train_state.h"
#include "frontend/train/trainer.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::error_of;

std::span<const std::byte> as_span(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kiln_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string bytes_of(const NDArray& a) {
  NDArray h = a.copy_to(Device::cpu(0));
  h.wait_to_read();
  return {static_cast<const char*>(h.data()), h.nbytes()};
}

train::Checkpoint small_checkpoint() {
  train::Checkpoint c;
  c.add("params", {{"0.weight", nd::array(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})},
                   {"0.bias", nd::array(std::vector<float>{-1, 0.5f})}});
  c.add("trainer", {{"step", train::scalar_i64(42)}, {"learning_rate", train::scalar_f64(0.125)}});
  c.add("extra", {{"none", NDArray()}}, /*required=*/false);
  return c;
}

// ---- the file format

TEST(CheckpointFormat, RoundTripsSectionsFlagsAndArrays) {
  train::Checkpoint c = small_checkpoint();
  std::string bytes = train::serialize_checkpoint(c);
  train::Checkpoint back = train::parse_checkpoint(as_span(bytes), "mem.kiln");
  EXPECT_EQ(back.version, train::kCheckpointVersion);
  ASSERT_EQ(back.sections.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(back.sections[s].name, c.sections[s].name);
    EXPECT_EQ(back.sections[s].required, c.sections[s].required);
    ASSERT_EQ(back.sections[s].arrays.size(), c.sections[s].arrays.size());
    for (size_t i = 0; i < c.sections[s].arrays.size(); ++i) {
      const auto& [n0, a0] = c.sections[s].arrays[i];
      const auto& [n1, a1] = back.sections[s].arrays[i];
      EXPECT_EQ(n0, n1);
      ASSERT_EQ(a0.is_none(), a1.is_none());
      if (a0.is_none()) continue;
      EXPECT_EQ(a0.shape(), a1.shape());
      EXPECT_EQ(a0.dtype(), a1.dtype());
      EXPECT_EQ(bytes_of(a0), bytes_of(a1));
    }
  }
  EXPECT_EQ(train::serialize_checkpoint(back), bytes);  // byte-stable
  EXPECT_EQ(train::read_i64(back.section("trainer"), "step", "t"), 42);
  EXPECT_CONTAINS(error_of<IOError>([&] { back.section("rng", "mem.kiln"); }),
                  "mem.kiln: no section 'rng' (the file has: params, trainer, extra)");
}

// Version 1 as committed (tests/data/checkpoint/v1-small.kiln, written by
// this test's small_checkpoint()): a later Kiln must still read it, through an
// upgrade function if the layout changes.
TEST(CheckpointFormat, ReadsTheVersion1GoldenFile) {
  fs::path golden = fs::path(KILN_TEST_DATA_DIR) / "checkpoint" / "v1-small.kiln";
  if (std::getenv("KILN_WRITE_GOLDEN")) write_bytes(golden, train::serialize_checkpoint(small_checkpoint()));
  train::Checkpoint c = train::read_checkpoint(golden.string());
  EXPECT_EQ(c.version, 1u);
  ASSERT_EQ(c.sections.size(), 3u);
  EXPECT_EQ(c.sections[2].name, "extra");
  EXPECT_FALSE(c.sections[2].required);
  EXPECT_TRUE(c.sections[2].arrays.at(0).second.is_none());
  const NamedArrays& p = c.section("params");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].first, "0.weight");
  EXPECT_EQ(p[0].second.shape(), (Shape{2, 3}));
  EXPECT_EQ(p[0].second.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(p[1].second.to_vector<float>(), (std::vector<float>{-1, 0.5f}));
  EXPECT_EQ(train::read_i64(c.section("trainer"), "step", "golden"), 42);
  EXPECT_EQ(train::read_f64(c.section("trainer"), "learning_rate", "golden"), 0.125);
  // Today's writer still writes exactly these bytes.
  EXPECT_TRUE(train::serialize_checkpoint(small_checkpoint()) == read_bytes(golden));
}

TEST(CheckpointFormat, ForeignFilesNameWhatWasFound) {
  std::string params = mxnet::serialize_ndarrays({{"w", nd::ones({2})}});
  std::string msg = error_of<IOError>([&] { train::parse_checkpoint(as_span(params), "net.params"); });
  EXPECT_CONTAINS(msg, "net.params: not a Kiln checkpoint: expected the magic \"KILNCKPT\", found \"\\x12\\x01");
  EXPECT_CONTAINS(msg, "at byte 0");
  EXPECT_CONTAINS(error_of<IOError>([&] { train::parse_checkpoint(as_span(std::string()), "empty.kiln"); }),
                  "shorter than the magic");
  std::string newer = train::serialize_checkpoint(small_checkpoint());
  newer[8] = 2;  // the version
  EXPECT_CONTAINS(error_of<IOError>([&] { train::parse_checkpoint(as_span(newer), "new.kiln"); }),
                  "new.kiln: format version 2: this Kiln reads versions 1 to 1 (written by a newer Kiln?) (at byte 8");
}

TEST(CheckpointFormat, EveryTruncationIsAnIOErrorNamingTheFile) {
  std::string bytes = train::serialize_checkpoint(small_checkpoint());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string cut = bytes.substr(0, n);
    std::string msg = error_of<IOError>([&] { train::parse_checkpoint(as_span(cut), "cut.kiln"); });
    ASSERT_TRUE(msg.starts_with("cut.kiln: ")) << "length " << n << ": " << msg;
  }
  std::string cut = bytes.substr(0, bytes.size() - 10);
  EXPECT_CONTAINS(error_of<IOError>([&] { train::parse_checkpoint(as_span(cut), "cut.kiln"); }), "truncated");
  std::string longer = bytes + "x";
  EXPECT_CONTAINS(error_of<IOError>([&] { train::parse_checkpoint(as_span(longer), "long.kiln"); }),
                  "1 unexpected bytes after the end");
}

TEST(CheckpointFormat, EveryFlippedByteIsDetected) {
  std::string bytes = train::serialize_checkpoint(small_checkpoint());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x40);
    std::string msg = error_of<IOError>([&] { train::parse_checkpoint(as_span(bad), "flip.kiln"); });
    ASSERT_TRUE(msg.starts_with("flip.kiln: ")) << "byte " << i << ": " << msg;
  }
  // A flipped value in the params payload: the section's checksum, with offsets.
  std::string bad = bytes;
  size_t at = bytes.find("0.weight") - 40;
  bad[at] = static_cast<char>(bad[at] ^ 1);
  std::string msg = error_of<IOError>([&] { train::parse_checkpoint(as_span(bad), "flip.kiln"); });
  EXPECT_CONTAINS(msg, "section 'params' is corrupt: crc32 0x");
  EXPECT_CONTAINS(msg, "bytes give 0x");
}

TEST(CheckpointFormat, HugeLengthsAreRefusedBeforeAllocating) {
  std::string bytes = train::serialize_checkpoint(small_checkpoint());
  std::string bad = bytes;
  uint32_t count = 1u << 30;
  std::memcpy(bad.data() + 12, &count, 4);
  EXPECT_CONTAINS(error_of<IOError>([&] { train::parse_checkpoint(as_span(bad), "f"); }),
                  "1073741824 sections; expected at most 256 (at byte 12");
  bad = bytes;
  size_t payload_len_at = 16 + 4 + 6 + 4;  // first section "params": name length, name, flags
  uint64_t huge = uint64_t{1} << 62;
  std::memcpy(bad.data() + payload_len_at, &huge, 8);
  EXPECT_CONTAINS(error_of<IOError>([&] { train::parse_checkpoint(as_span(bad), "f"); }),
                  "truncated: section 'params' holds 4611686018427387904 bytes");
}

// ---- the training state

struct TinyRun {
  nn::HybridSequential net;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<data::DataLoader> loader;
  loss::SoftmaxCrossEntropy ce;
  int64_t step = 0;

  explicit TinyRun(bool adam) {
    nd::random::seed(5);
    net.add(nn::Dense(8, "relu"), nn::Dropout(0.3), nn::Dense(3));
    net.initialize(init::Xavier());
    if (adam) {
      trainer = std::make_unique<Trainer>(net.collect_params(), optim::Adam({.lr = 0.01}));
    } else {
      trainer = std::make_unique<Trainer>(net.collect_params(), optim::SGD({.lr = 0.1, .momentum = 0.9}));
    }
    std::vector<float> x = test::uniform(50 * 4, -1, 1, 11), y(50);
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i % 3);
    loader = std::make_unique<data::DataLoader>(data::ArrayDataset(x, Shape{4}, y), 8,
                                                data::LoaderOptions{.shuffle = true, .seed = 9, .prefetch = 1});
  }
  // Runs `steps` steps, the first pass starting `done` batches in (after a
  // seek); calls after_step(batches done in the pass) after each. Returns
  // the batches done in the last pass.
  int64_t train(int64_t steps, int64_t done = 0, const std::function<void(int64_t)>& after_step = {}) {
    while (steps > 0) {
      for (const data::Batch& b : *loader) {
        NDArray l;
        {
          autograd::Record r;
          // Input noise: nd::random's stream is state to restore too.
          l = ce(net(b.data + nd::random::normal(b.data.shape(), 0, 0.1)), b.label);
        }
        autograd::backward({l});
        trainer->step(b.label.size());
        ++step;
        ++done;
        if (after_step) after_step(done);
        if (--steps == 0) return done;
      }
      done = 0;
    }
    return done;
  }
  std::string params_bytes() {
    std::string out;
    for (const auto& [n, p] : net.collect_params()) out += bytes_of(p.data());
    return out;
  }
};

// Trains 19 steps, checkpointing after 9 (one pass of 7 batches, then 2); a
// second run restored from the checkpoint must end with the same bytes.
void expect_resume_is_bit_identical(bool adam) {
  TinyRun a(adam);
  std::string bytes;
  a.train(19, 0, [&](int64_t done) {
    if (a.step != 9) return;
    train::Checkpoint c = train::capture_training(
        a.net.collect_params(), *a.trainer, {.step = a.step, .epoch = 2, .data = a.loader->position(done)}, *a.loader);
    bytes = train::serialize_checkpoint(c);
  });

  TinyRun b(adam);
  b.net(nd::zeros({1, 4}));  // shapes complete, so the parameters are initialized (other values)
  train::Checkpoint back = train::parse_checkpoint(as_span(bytes), "mem.kiln");
  train::TrainingState s = train::decode_training(back, "mem.kiln", b.net.collect_params(), *b.trainer, *b.loader);
  EXPECT_EQ(s.position.step, 9);
  EXPECT_EQ(s.position.epoch, 2);
  EXPECT_EQ(s.position.data.batch, 2);
  EXPECT_EQ(s.position.data.epoch, 1u);
  train::apply_training(s, b.net.collect_params(), *b.trainer, *b.loader);
  b.step = s.position.step;
  EXPECT_EQ(b.trainer->optimizer().num_update(), 9);
  b.train(10, s.position.data.batch);
  EXPECT_TRUE(a.params_bytes() == b.params_bytes()) << "resumed parameters differ from the uninterrupted run's";
  EXPECT_EQ(nd::random::get_state().streams.size(), 1u);
}

TEST(CheckpointTraining, ResumedSgdMomentumRunIsBitIdentical) { expect_resume_is_bit_identical(false); }
TEST(CheckpointTraining, ResumedAdamRunIsBitIdentical) { expect_resume_is_bit_identical(true); }

TEST(CheckpointTraining, EveryPieceOfStateRoundTrips) {
  TinyRun a(true);
  int64_t done = a.train(3);
  nd::dropout_seed(77);
  nd::dropout(nd::ones({5}), 0.5).wait_to_read();  // dropout only draws in train mode or kAlways
  nd::dropout(nd::ones({5}), 0.5, {}, DropoutMode::kAlways).wait_to_read();
  nd::random::normal({3}, 0, 1, {.device = Device::cpu(1)}).wait_to_read();
  auto random = nd::random::get_state();
  auto dropout = nd::dropout_state();
  ASSERT_EQ(random.streams.size(), 2u);
  train::Checkpoint c = train::capture_training(a.net.collect_params(), *a.trainer,
                                                {.step = 3, .epoch = 1, .data = a.loader->position(done)}, *a.loader);
  train::Checkpoint back = train::parse_checkpoint(as_span(train::serialize_checkpoint(c)), "m");
  TinyRun b(true);
  train::TrainingState s = train::decode_training(back, "m", b.net.collect_params(), *b.trainer, *b.loader);
  EXPECT_EQ(s.random.global_seed, random.global_seed);
  ASSERT_EQ(s.random.streams.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(s.random.streams[i].device, random.streams[i].device);
    EXPECT_EQ(s.random.streams[i].seed, random.streams[i].seed);
    EXPECT_EQ(s.random.streams[i].offset, random.streams[i].offset);
  }
  EXPECT_EQ(s.dropout.seed, 77u);
  EXPECT_EQ(s.dropout.drawn, dropout.drawn);
  EXPECT_EQ(s.position.data.batch, 3);
  EXPECT_EQ(s.learning_rate, 0.01);
  NamedArrays opt = a.trainer->optimizer().state_arrays();
  ASSERT_EQ(s.optimizer.size(), opt.size());
  ASSERT_EQ(opt.size(), 1u + 4 * 3);  // type; per parameter a count and two moments
  for (size_t i = 0; i < opt.size(); ++i) {
    EXPECT_EQ(s.optimizer[i].first, opt[i].first);
    EXPECT_EQ(bytes_of(s.optimizer[i].second), bytes_of(opt[i].second));
  }
  TinyRun fresh(true);  // its loader's first pass: the one the checkpoint was inside
  std::vector<std::vector<int64_t>> first_pass = fresh.loader->next_epoch_plan();
  nd::random::seed(1);
  nd::dropout_seed(1);
  train::apply_training(s, b.net.collect_params(), *b.trainer, *b.loader);
  nd::random::GeneratorState now = nd::random::get_state();
  EXPECT_EQ(now.global_seed, random.global_seed);
  ASSERT_EQ(now.streams.size(), random.streams.size());
  for (size_t i = 0; i < now.streams.size(); ++i) {
    EXPECT_EQ(now.streams[i].device, random.streams[i].device);
    EXPECT_EQ(now.streams[i].seed, random.streams[i].seed);
    EXPECT_EQ(now.streams[i].offset, random.streams[i].offset);
  }
  EXPECT_EQ(nd::dropout_state().drawn, dropout.drawn);
  EXPECT_EQ(b.loader->next_epoch_plan(), first_pass);
  for (const auto& [name, p] : a.net.collect_params()) {
    EXPECT_EQ(bytes_of(p.data()), bytes_of(b.net.collect_params().at(name).data())) << name;
  }
}

TEST(CheckpointTraining, LoaderPositionReplaysTheSameOrder) {
  std::vector<float> x(20), y(20);
  for (size_t i = 0; i < 20; ++i) x[i] = y[i] = static_cast<float>(i);
  auto make = [&] {
    return data::DataLoader(data::ArrayDataset(x, Shape{1}, y), 3,
                            {.shuffle = true, .last_batch = data::LastBatch::kRollover, .seed = 4, .prefetch = 0});
  };
  data::DataLoader a = make();
  for (const data::Batch& b : a) (void)b;  // pass 0 leaves 2 samples to carry
  std::vector<std::vector<float>> rest;
  int64_t i = 0;
  data::LoaderPosition at;
  for (const data::Batch& b : a) {
    if (++i == 2) at = a.position(2);
    if (i > 2) rest.push_back(b.label.to_vector<float>());
  }
  EXPECT_EQ(at.epoch, 1u);
  EXPECT_EQ(at.carry.size(), 2u);
  data::DataLoader b = make();
  b.seek(at);
  std::vector<std::vector<float>> replay;
  for (const data::Batch& batch : b) replay.push_back(batch.label.to_vector<float>());
  EXPECT_EQ(replay, rest);
}

TEST(CheckpointTraining, ForeignStateIsRefusedNamingWhatDiffers) {
  TinyRun a(false);
  a.train(2);
  train::Checkpoint c = train::capture_training(a.net.collect_params(), *a.trainer,
                                                {.step = 2, .epoch = 1, .data = a.loader->position(2)}, *a.loader);
  // Another model: shapes differ.
  nn::HybridSequential other;
  other.add(nn::Dense(5, "relu"), nn::Dropout(0.3), nn::Dense(3));
  other.initialize(init::Xavier());
  other(nd::zeros({1, 4}));
  Trainer sgd(other.collect_params(), optim::SGD({.lr = 0.1, .momentum = 0.9}));
  std::string msg =
      error_of<IOError>([&] { train::decode_training(c, "ck.kiln", other.collect_params(), sgd, *a.loader); });
  EXPECT_CONTAINS(msg,
                  "ck.kiln: section 'params': does not fit this model: '0.weight': expected float32 [5,4], "
                  "found float32 [8,4]");
  // Another optimizer.
  Trainer adam(a.net.collect_params(), optim::Adam());
  EXPECT_CONTAINS(
      error_of<IOError>([&] { train::decode_training(c, "ck.kiln", a.net.collect_params(), adam, *a.loader); }),
      "ck.kiln: section 'optimizer': expected the state of 'adam', found 'optimizer:sgd'");
  // Another shuffle seed.
  data::DataLoader l(data::ArrayDataset(std::vector<float>(8), Shape{4}, {0, 1}), 1, {.seed = 10});
  EXPECT_CONTAINS(
      error_of<IOError>([&] { train::decode_training(c, "ck.kiln", a.net.collect_params(), *a.trainer, l); }),
      "the data was shuffled with seed 9, this run's loader has seed 10");
  data::DataLoader other_batch(data::ArrayDataset(std::vector<float>(50 * 4), Shape{4}, std::vector<float>(50)), 16,
                               {.shuffle = true, .seed = 9});
  EXPECT_CONTAINS(
      error_of<IOError>([&] { train::decode_training(c, "ck.kiln", a.net.collect_params(), *a.trainer, other_batch); }),
      "ck.kiln: section 'data': saved for batches of 8 from 50 samples, this run's loader has batches of 16 from 50 "
      "samples");
  // A required section this Kiln does not know; unknown optional ones are fine.
  train::Checkpoint opt = c;
  opt.add("amp_loss_scaler", {{"scale", train::scalar_f64(65536)}}, /*required=*/false);
  train::decode_training(opt, "ck.kiln", a.net.collect_params(), *a.trainer, *a.loader);
  train::Checkpoint req = c;
  req.add("amp_loss_scaler", {{"scale", train::scalar_f64(65536)}});
  EXPECT_CONTAINS(
      error_of<IOError>([&] { train::decode_training(req, "ck.kiln", a.net.collect_params(), *a.trainer, *a.loader); }),
      "ck.kiln: section 'amp_loss_scaler' is required to resume but this Kiln does not know it");
  // A scalar of the wrong type.
  train::Checkpoint bad;
  for (const auto& s : c.sections) {
    if (s.name == "trainer") {
      bad.add("trainer", {{"step", train::scalar_f64(2)}, {"learning_rate", train::scalar_f64(0.1)}});
    } else {
      bad.add(s.name, s.arrays);
    }
  }
  EXPECT_CONTAINS(
      error_of<IOError>([&] { train::decode_training(bad, "ck.kiln", a.net.collect_params(), *a.trainer, *a.loader); }),
      "ck.kiln: section 'trainer': entry 'step': expected one int64, found float64 [1]");
}

// ---- the directory

train::Checkpoint tagged(int64_t step) {
  train::Checkpoint c;
  c.add("trainer", {{"step", train::scalar_i64(step)}});
  return c;
}

int64_t step_of(const train::Checkpoint& c) { return train::read_i64(c.section("trainer"), "step", "t"); }

TEST(CheckpointDir, KeepsTheNewestKAndDeletesOnlyAfterTheManifest) {
  fs::path d = fresh_dir("keep");
  train::CheckpointDir dir(d.string(), {.keep = 2});
  write_bytes(d / "ckpt-0000000001.kiln.tmp-1-0", "half a file");  // left by a killed save
  for (int64_t s = 1; s <= 5; ++s) dir.save(s * 10, tagged(s * 10));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(d)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"MANIFEST", "ckpt-0000000040.kiln", "ckpt-0000000050.kiln"}));
  EXPECT_EQ(read_bytes(d / "MANIFEST"), "kiln checkpoint manifest 1\nckpt-0000000050.kiln\nckpt-0000000040.kiln\n");
  auto loaded = dir.load_newest({});
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(step_of(loaded->checkpoint), 50);
  EXPECT_EQ(fs::path(loaded->path).filename(), "ckpt-0000000050.kiln");
  // A file deleted by hand leaves the manifest at the next save.
  fs::remove(d / "ckpt-0000000050.kiln");
  dir.save(60, tagged(60));
  EXPECT_EQ(read_bytes(d / "MANIFEST"), "kiln checkpoint manifest 1\nckpt-0000000060.kiln\nckpt-0000000040.kiln\n");
}

TEST(CheckpointDir, EmptyOrMissingDirectoryMeansStartFresh) {
  fs::path d = fresh_dir("empty");
  EXPECT_FALSE(train::CheckpointDir(d.string()).load_newest({}).has_value());
  EXPECT_FALSE(train::CheckpointDir((d / "not-yet").string()).load_newest({}).has_value());
}

TEST(CheckpointDir, FallsBackToThePreviousCheckpointAndSaysSo) {
  fs::path d = fresh_dir("fallback");
  train::CheckpointDir dir(d.string(), {.keep = 3});
  for (int64_t s = 1; s <= 3; ++s) dir.save(s, tagged(s));
  std::string newest = read_bytes(d / "ckpt-0000000003.kiln");
  write_bytes(d / "ckpt-0000000003.kiln", newest.substr(0, newest.size() / 2));
  std::vector<std::string> warnings;
  auto loaded = dir.load_newest([&](const std::string& w) { warnings.push_back(w); });
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(step_of(loaded->checkpoint), 2);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_CONTAINS(warnings[0], "unusable checkpoint: " + (d / "ckpt-0000000003.kiln").string() + ": ");
  EXPECT_CONTAINS(warnings[0], "truncated");
  EXPECT_CONTAINS(warnings[0], "; falling back to " + (d / "ckpt-0000000002.kiln").string());

  // A checkpoint that parses but that `accept` refuses (another model) falls back too.
  warnings.clear();
  loaded = dir.load_newest([&](const std::string& w) { warnings.push_back(w); },
                           [](const train::Checkpoint& c, const std::string& path) {
                             if (step_of(c) == 2) throw IOError(path + ": does not fit");
                           });
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(step_of(loaded->checkpoint), 1);
  EXPECT_EQ(warnings.size(), 2u);

  // None usable: an error listing each, never a silent fresh start.
  fs::remove(d / "ckpt-0000000001.kiln");
  std::string msg = error_of<IOError>([&] {
    dir.load_newest({}, [](const train::Checkpoint& c, const std::string& path) {
      if (step_of(c) == 2) throw IOError(path + ": does not fit");
    });
  });
  EXPECT_CONTAINS(msg, "none of the 3 checkpoints can be resumed from");
  EXPECT_CONTAINS(msg, "ckpt-0000000001.kiln: cannot open for reading");
}

TEST(CheckpointDir, BadOrMissingManifestFallsBackToTheFilesFound) {
  fs::path d = fresh_dir("manifest");
  train::CheckpointDir dir(d.string(), {.keep = 3});
  dir.save(7, tagged(7));
  dir.save(12, tagged(12));
  write_bytes(d / "MANIFEST", "kiln checkpoint manifest 1\n../../etc/passwd\n");
  std::vector<std::string> notes;
  auto loaded = dir.load_newest([&](const std::string& n) { notes.push_back(n); });
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(step_of(loaded->checkpoint), 12);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_CONTAINS(notes[0], "MANIFEST: line 2: expected a ckpt-<digits>.kiln name, found \"../../etc/passwd\"");
  fs::remove(d / "MANIFEST");
  notes.clear();
  EXPECT_EQ(dir.list([&](const std::string& n) { notes.push_back(n); }).size(), 2u);
  EXPECT_CONTAINS(notes.at(0), "no manifest");
}

}  // namespace
}  // namespace kiln
