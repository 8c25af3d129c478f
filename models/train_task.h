// What a training job trains: the model, its data, its loss and its metric,
// chosen by model name. The job's loop (models/train_job.h) is the same for
// every task.
//
//   models::TrainTask t = models::make_task(cfg);   // cfg.model: mlp, lenet, resnet18, ..., gpt
//   NDArray out = (*t.net)(batch.data);
//   NDArray l = t.loss(out, batch.label);          // [N]: one value per row
//   NDArray c = t.correct(out, batch.label);       // scalar: correct predictions
//
// Image models train on Fashion-MNIST: a row is an image, an item is an
// image, the loss is softmax cross-entropy, correct counts argmax == label.
// "gpt" trains models::Gpt (cfg.gpt) on byte-level text: Debian's fortunes
// (data::ByteCorpus::fortunes, or cfg.data_dir), the last 10% held out,
// seeded random windows of cfg.gpt.context bytes; a row is a window, an item
// a predicted byte; the loss of a row is its mean next-byte cross-entropy
// (so the test loss divided by ln 2 is bits per byte); correct counts
// next-byte hits. train_limit / test_limit cut the training / held-out set
// to its first N rows.
#pragma once

#include <memory>
#include <string>

#include "frontend/data/dataset.h"
#include "frontend/nn/block.h"
#include "models/train_job.h"

namespace kiln::models {

struct TrainTask {
  std::string data_name;  // "Fashion-MNIST", "fortunes"
  std::string item;       // what throughput counts: "images" or "tokens"
  bool text = false;      // a byte-level language model: report bits per byte
  std::shared_ptr<const data::Dataset> train, test;
  std::shared_ptr<nn::HybridBlock> net;
  std::string default_init;  // the weight initializer when TrainConfig::init is empty

  NDArray loss(const NDArray& out, const NDArray& label) const;     // [N]
  NDArray correct(const NDArray& out, const NDArray& label) const;  // scalar count, float32
};

// ValueError naming the model for an unknown name (and listing the known ones).
TrainTask make_task(const TrainConfig& config);

// The task's own recipe: a TrainConfig with `model` set and the batch size,
// optimizer, learning rate, weight decay, schedule, warmup and clipping its
// task trains with. Image models: the chapter's setting (TrainConfig's
// defaults: batch 256, SGD at lr 0.2). "gpt": batch 32, AdamW at lr 1e-3
// with weight decay 0.1, 100 warmup steps into a cosine schedule, clipping
// at 1. `kiln train --model M` starts from it. ValueError for an unknown model.
TrainConfig recipe_for(const std::string& model);

}  // namespace kiln::models
