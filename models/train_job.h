// The main job: train a model and report per-epoch figures.
//
//   models::TrainConfig cfg{.model = "lenet", .epochs = 10, .batch_size = 256, .lr = 0.2};
//   auto history = models::train(cfg, [](const models::EpochStats& s) { ... });
//
//   models::TrainConfig gpt = models::recipe_for("gpt");  // models/train_task.h: AdamW, cosine, warmup, clipping
//   gpt.epochs = 2;
//   models::train(gpt);                            // a byte-level GPT on Debian's fortunes
//
// Runs the d2l chapter's loop for every task (models/train_task.h: the image
// models on Fashion-MNIST, "gpt" on byte-level text): the optimizer on the
// task's loss, train loss and accuracy accumulated on the device (read once
// per epoch, so the engine runs ahead), test loss and accuracy in predict
// mode after every epoch. `kiln train` wraps it.
//
// Checkpoints (checkpoint_dir set): every `checkpoint_every` steps and at the
// end of each epoch the whole state (frontend/train/train_state.h, plus the
// partial epoch's running sums) is written crash-safely to the directory,
// keeping the newest `keep`. With `resume`, the run continues from the newest
// checkpoint that loads (falling back to older ones, and saying so on
// stderr), or starts fresh when there is none: a pre-empted job is restarted
// with the same command line. With the same seed, devices and thread count a
// resumed run ends with the parameters of an uninterrupted one, bit for bit
// (the checkpoint records the threads per CPU device; a resume with another
// count continues, saying that it will not be bit-identical).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <optional>
#include <vector>

#include "ir/device.h"
#include "ir/dtype.h"
#include "models/gpt.h"

namespace kiln::models {

struct TrainConfig {
  std::string model = "lenet";  // mlp, lenet, resnet18, resnet18_v1, mlp_chapter, mlp_wide, gpt
  GptConfig gpt;                 // layers, heads, width, context, dropout of "gpt" (vocab: 256 bytes)
  // Weight initializer: "xavier" or "normal:SIGMA" (d2l 12.5: normal:0.01);
  // empty: the task's default (xavier; gpt: normal:0.02).
  std::string init;
  int epochs = 10;
  int64_t batch_size = 256;
  double lr = 0.2;
  double momentum = 0;
  double wd = 0;
  std::string optimizer = "sgd";         // sgd, adam, adamw (models/train_recipe.h)
  std::string lr_schedule = "constant";  // constant, cosine, step:N:F
  int64_t warmup_steps = 0;              // linear warmup from 0 over the first N steps
  double clip_grad_norm = 0;             // global-norm gradient clipping (0: off)
  std::vector<Device> devices{Device::cpu(0)};
  uint64_t seed = 0;
  std::string data_dir;          // empty: the task's default folder (Fashion-MNIST's, the fortunes')
  int64_t train_limit = 0;       // use only the first N training rows: images or windows (0: all)
  int64_t test_limit = 0;        // evaluate on the first N test rows (0: all)
  std::string log_path;          // one JSON object per epoch
  std::string save_prefix;       // write PREFIX.params at the end (gpt: and PREFIX.json, its configuration)
  bool hybridize = false;
  std::string export_prefix;     // with hybridize: PREFIX-symbol.json + PREFIX-0000.params at the end
  std::string checkpoint_dir;    // write checkpoints there (empty: none)
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: at the end of each epoch only)
  int keep = 3;                  // checkpoints kept
  bool resume = false;           // continue from the newest usable checkpoint in checkpoint_dir
  // Mixed precision (frontend/amp.h): float16 or bfloat16 compute, float32
  // parameters; float16 adds dynamic loss scaling (frontend/train/loss_scaler.h).
  std::optional<DType> amp;
};

struct EpochStats {
  int epoch = 0;
  double loss = 0;       // mean training loss per row
  double train_acc = 0;  // per item
  double test_acc = 0;
  double test_loss = 0;
  double seconds = 0;
  double items_per_sec = 0;  // training items (images, tokens) per second
  std::string item = "images";
  bool text = false;  // bits per byte apply: loss / ln 2
};

// The line TrainConfig::log_path gets per epoch: one JSON object with epoch,
// loss, train_acc, test_acc, test_loss, seconds and images_per_sec (text:
// train_bits_per_byte, test_bits_per_byte and tokens_per_sec), no newline:
// the format `kiln plot` reads (frontend/viz/train_log.h).
std::string epoch_log_line(const EpochStats& s);

// Called with (batches done, batches per epoch) while an epoch runs.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;
// Called with one line about checkpoints (resuming from, falling back, ...).
using NoteFn = std::function<void(const std::string& line)>;

std::vector<EpochStats> train(const TrainConfig& config, const std::function<void(const EpochStats&)>& on_epoch = {},
                              const ProgressFn& progress = {}, const NoteFn& note = {});

}  // namespace kiln::models
