// A training run's state as a checkpoint, and back.
//
//   train::RunPosition pos{.step = 1200, .epoch = 3, .data = loader.position(batches_done)};
//   train::Checkpoint c = train::capture_training(net.collect_params(), trainer, pos);
//   c.add("metrics", {...}, /*required=*/false);        // the caller's own extra state
//   dir.save(pos.step, c);
//   ...
//   train::TrainingState s = train::decode_training(c, path, net.collect_params(), trainer);  // validates only
//   train::apply_training(s, net.collect_params(), trainer, loader);                          // cannot fail on content
//
// What a checkpoint holds, one section each (checkpoint.h has the file format):
//   params     every parameter, aux states included, by name (the first copy:
//              copies are equal after each step)
//   optimizer  Optimizer::state_arrays: its type, the step counter the
//              learning-rate schedule reads, per-key update counts (Adam's bias
//              correction) and state arrays (momentum, Adam's moments)
//   trainer    "step" (Trainer steps taken), "learning_rate" (the optimizer's
//              base rate; restored unless a schedule decides it)
//   rng        nd::random's generator (global seed; per device: stream seed and
//              values drawn) and the dropout streams (seed; per device: mask
//              elements drawn)
//   data       the loop's epoch, the loader's shuffle seed, batch size and
//              dataset size (checked, not restored), its pass number, the
//              pass's rollover samples and the batch index within the pass
// The loop's own extras (running sums of a partial epoch) go in further
// sections the caller adds and reads.
//
// decode_training checks everything against the live objects before anything
// changes (names, shapes and dtypes of parameters, the optimizer type, the
// shuffle seed, the layout of every scalar, unknown required sections) and
// throws IOError naming `source` and the entry; apply_training then overwrites
// parameters (in place, so hybridized graphs keep seeing them), optimizer
// state, generators and the loader's position. Restoring the generators after
// the model is built and initialized makes the resumed draws those of an
// uninterrupted run.
#pragma once

#include <cstdint>
#include <string_view>

#include "frontend/data/dataloader.h"
#include "frontend/nd_init.h"
#include "frontend/nd_nn.h"
#include "frontend/nn/parameter.h"
#include "frontend/train/checkpoint.h"
#include "frontend/train/trainer.h"

namespace kiln::train {

struct RunPosition {
  int64_t step = 0;   // Trainer steps taken
  int64_t epoch = 0;  // the loop's epoch number (the caller's convention)
  data::LoaderPosition data;
};

Checkpoint capture_training(const nn::ParameterDict& params, const Trainer& trainer, const RunPosition& position,
                            const data::DataLoader& loader);

struct TrainingState {
  RunPosition position;
  NamedArrays params;  // in the ParameterDict's order, checked
  NamedArrays optimizer;
  double learning_rate = 0;
  nd::random::GeneratorState random;
  nd::DropoutState dropout;
};

TrainingState decode_training(const Checkpoint& checkpoint, std::string_view source, const nn::ParameterDict& params,
                              const Trainer& trainer, const data::DataLoader& loader);
void apply_training(const TrainingState& state, const nn::ParameterDict& params, Trainer& trainer,
                    data::DataLoader& loader);

// Section names, for callers adding their own beside them.
inline constexpr std::string_view kTrainingSections[] = {"params", "optimizer", "trainer", "rng", "data"};

// Helpers for scalar entries (one-element arrays), shared with callers'
// sections: IOError naming `source`, the entry, what was expected and found.
NDArray scalar_i64(int64_t v);
NDArray scalar_f64(double v);
int64_t read_i64(const NamedArrays& arrays, std::string_view entry, std::string_view source);
double read_f64(const NamedArrays& arrays, std::string_view entry, std::string_view source);
// The array named `entry` (may be none); IOError when absent.
const NDArray& read_entry(const NamedArrays& arrays, std::string_view entry, std::string_view source);

}  // namespace kiln::train
