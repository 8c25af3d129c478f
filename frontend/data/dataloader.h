// DataLoader: batches of a Dataset, shuffled by seed, prefetched in the background.
//
//   data::DataLoader loader(data::FashionMNIST::train(), 256, {.shuffle = true, .seed = 1});
//   for (const data::Batch& b : loader) { ... b.data, b.label ... }   // one epoch
//
// Each pass over the loader is one epoch. A background thread prepares the
// next `prefetch` batches (decoding, conversion to float, the copy into
// NDArrays) while the caller computes, so loading overlaps compute. Shuffling
// uses std::mt19937_64 seeded with (seed, epoch number): reproducible, and
// every sample appears exactly once per epoch. `last_batch` decides what
// happens to a final partial batch: kKeep yields it, kDiscard drops it,
// kRollover carries its samples over to the start of the next epoch (as Gluon).
// Leaving a loop early stops the background thread. An error while loading
// is rethrown by the iterator at the batch that failed.
//
// Checkpoints: `position(b)` inside a pass says where the loader stands after
// that pass's first b batches (the pass number, the rollover samples the pass
// started with, b); `seek(position)` makes the next pass that pass again,
// starting at batch b, with the same order. Only these numbers are saved:
// the order is a function of (seed, pass number, carry).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "frontend/data/dataset.h"

namespace kiln::data {

enum class LastBatch { kKeep, kDiscard, kRollover };

struct LoaderPosition {
  uint64_t epoch = 0;           // the pass number (the shuffle's second seed)
  std::vector<int64_t> carry;   // rollover samples that start the pass
  int64_t batch = 0;            // batches of the pass already consumed
};

struct LoaderOptions {
  bool shuffle = false;
  LastBatch last_batch = LastBatch::kKeep;
  uint64_t seed = 0;
  int prefetch = 2;  // batches prepared ahead; 0 loads synchronously in the caller
  Device device = Device::cpu(0);
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, int64_t batch_size, LoaderOptions options = {});
  template <typename D, typename = std::enable_if_t<std::is_base_of_v<Dataset, D>>>
  DataLoader(D dataset, int64_t batch_size, LoaderOptions options = {})
      : DataLoader(std::make_shared<const D>(std::move(dataset)), batch_size, options) {}

  int64_t batch_size() const { return batch_size_; }
  const Dataset& dataset() const { return *dataset_; }
  // Index lists of the next epoch's batches (advances the epoch, as iterating does).
  std::vector<std::vector<int64_t>> next_epoch_plan();
  uint64_t seed() const { return options_.seed; }

  // After `batches_done` batches of the pass begun last (see the file comment).
  LoaderPosition position(int64_t batches_done) const;
  // The next begin() replays `p.epoch`'s pass from batch `p.batch`.
  void seek(const LoaderPosition& p);

  struct Epoch;  // the state of one pass (prefetch thread and queue)
  class Iterator {
   public:
    const Batch& operator*() const { return current_; }
    const Batch* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator==(const Iterator& o) const { return done_ == o.done_; }

   private:
    friend class DataLoader;
    Iterator() = default;
    explicit Iterator(std::shared_ptr<Epoch> epoch);
    std::shared_ptr<Epoch> epoch_;
    Batch current_;
    bool done_ = true;
  };
  Iterator begin();
  Iterator end() { return Iterator(); }

 private:
  std::shared_ptr<const Dataset> dataset_;
  int64_t batch_size_;
  LoaderOptions options_;
  uint64_t epoch_ = 0;
  std::vector<int64_t> carry_;  // rollover samples for the next epoch
  LoaderPosition pass_start_;   // epoch_ and carry_ when the last pass was planned
  int64_t skip_ = 0;            // batches the next pass leaves out (seek)
};

}  // namespace kiln::data
