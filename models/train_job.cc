#include "models/train_job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "frontend/amp.h"
#include "frontend/autograd.h"
#include "frontend/data/dataloader.h"
#include "frontend/atomic_file.h"
#include "frontend/kvstore.h"
#include "frontend/nd.h"
#include "frontend/split.h"
#include "frontend/train/checkpoint_dir.h"
#include "frontend/train/loss.h"
#include "frontend/train/loss_scaler.h"
#include "frontend/train/train_state.h"
#include "frontend/train/trainer.h"
#include "models/train_recipe.h"
#include "models/train_task.h"
#include "runtime/engine.h"

namespace kiln::models {

namespace {

init::Initializer make_initializer(const std::string& spec) {
  if (spec == "xavier") return init::Xavier();
  if (spec.rfind("normal:", 0) == 0) {
    double sigma = 0;
    try {
      sigma = std::stod(spec.substr(7));
    } catch (const std::exception&) {
      sigma = -1;
    }
    KILN_CHECK(sigma > 0, ValueError, "--init {}: expected normal:SIGMA with SIGMA > 0", spec);
    return init::Normal(sigma);
  }
  throw ValueError(fmt::format("--init {}: expected 'xavier' or 'normal:SIGMA'", spec));
}

}  // namespace
namespace {

using Clock = std::chrono::steady_clock;

struct Evaluation {
  double accuracy = 0;  // per item
  double loss = 0;      // per row
};

Evaluation evaluate(nn::Block& net, const TrainTask& task, data::DataLoader& loader) {
  autograd::PredictMode predict;
  NDArray hits, losses;
  int64_t rows = 0, items = 0;
  for (const data::Batch& b : loader) {
    NDArray out = net(b.data);
    NDArray c = task.correct(out, b.label), l = nd::sum(task.loss(out, b.label));
    hits = hits.is_none() ? c : hits + c;
    losses = losses.is_none() ? l : losses + l;
    rows += b.label.shape()[0];
    items += b.label.size();
  }
  if (rows == 0) return {};
  return {hits.item<double>() / static_cast<double>(items), losses.item<double>() / static_cast<double>(rows)};
}

}  // namespace

std::string epoch_log_line(const EpochStats& s) {
  nlohmann::ordered_json j{{"epoch", s.epoch},   {"loss", s.loss},           {"train_acc", s.train_acc},
                           {"test_acc", s.test_acc}, {"test_loss", s.test_loss}};
  if (s.text) {
    j["train_bits_per_byte"] = s.loss / std::log(2.0);
    j["test_bits_per_byte"] = s.test_loss / std::log(2.0);
  }
  j["seconds"] = s.seconds;
  j[s.item + "_per_sec"] = s.items_per_sec;
  return j.dump();
}

std::vector<EpochStats> train(const TrainConfig& cfg, const std::function<void(const EpochStats&)>& on_epoch,
                              const ProgressFn& progress, const NoteFn& note) {
  KILN_CHECK(cfg.epochs >= 1, ValueError, "train: epochs must be >= 1, got {}", cfg.epochs);
  KILN_CHECK(!cfg.devices.empty(), ValueError, "train: no devices given");
  Device dev = cfg.devices[0];  // where batches are loaded and the model is evaluated
  const kv::ProcessGroup group = kv::launched_process_group();  // mpirun -np N: N > 1
  nd::random::seed(cfg.seed);
  const TrainTask task = make_task(cfg);
  const std::shared_ptr<const data::Dataset> train_set = task.train, test_set = task.test;
  nn::HybridBlock& net = *task.net;
  net.initialize(make_initializer(cfg.init.empty() ? task.default_init : cfg.init), cfg.devices);
  KILN_CHECK(cfg.export_prefix.empty() || cfg.hybridize, ValueError,
             "--export needs --hybridize (export writes the traced graph)");
  if (cfg.hybridize) net.hybridize({.amp = cfg.amp});
  std::optional<amp::LossScaler> scaler;
  if (cfg.amp == DType::kFloat16) scaler.emplace();
  int64_t batches = (train_set->size() + cfg.batch_size - 1) / cfg.batch_size;
  const Recipe recipe{.optimizer = cfg.optimizer,
                      .lr = cfg.lr,
                      .momentum = cfg.momentum,
                      .wd = cfg.wd,
                      .lr_schedule = cfg.lr_schedule,
                      .warmup_steps = cfg.warmup_steps,
                      .clip_grad_norm = cfg.clip_grad_norm};
  Trainer trainer(net.collect_params(), make_optimizer(recipe, batches * cfg.epochs));
  trainer.set_max_grad_norm(recipe.clip_grad_norm);

  data::DataLoader train_loader(train_set, cfg.batch_size,
                                {.shuffle = true, .seed = cfg.seed, .prefetch = 2, .device = dev});
  data::DataLoader test_loader(test_set, cfg.batch_size, {.prefetch = 2, .device = dev});

  // Checkpoints: where the loop starts, and the partial epoch's running sums.
  nn::ParameterDict params = net.collect_params();
  std::optional<train::CheckpointDir> checkpoints;
  KILN_CHECK(!cfg.resume || !cfg.checkpoint_dir.empty(), ValueError, "--resume needs --checkpoint DIR");
  KILN_CHECK(cfg.checkpoint_every >= 0, ValueError, "--checkpoint-every must be >= 0, got {}", cfg.checkpoint_every);
  if (!cfg.checkpoint_dir.empty()) {
    KILN_CHECK(group.size == 1, NotSupported, "--checkpoint: not supported with several processes (mpirun) yet");
    checkpoints.emplace(cfg.checkpoint_dir, train::CheckpointDirOptions{.keep = cfg.keep});
  }
  // Kernels split work by thread count, so results are bit-identical only
  // for the same count: recorded, and a resume with another says so.
  const int64_t cpu_threads = dev.is_cpu() ? engine::get().cpu_threads(dev) : 0;
  int64_t saved_threads = -1;
  int first_epoch = 1;
  int64_t step = 0, last_saved = -1;
  NDArray resumed_loss, resumed_correct;
  int64_t resumed_seen = 0, resumed_items = 0, resumed_done = 0;
  std::optional<amp::LossScaler::State> resumed_scaler;
  if (cfg.resume) {
    train::TrainingState state;
    auto loaded = checkpoints->load_newest(note, [&](const train::Checkpoint& c, const std::string& path) {
      state = train::decode_training(c, path, params, trainer, train_loader);
      std::string src = fmt::format("{}: section 'metrics'", path);
      const NamedArrays& m = c.section("metrics", path);
      for (const char* entry : {"loss_sum", "correct_sum"}) {
        const NDArray& a = train::read_entry(m, entry, src);
        KILN_CHECK(a.is_none() || (is_floating(a.dtype()) && a.size() == 1), IOError,
                   "{}: entry '{}': expected none or one floating-point value, found {} {}", src, entry, a.dtype(),
                   a.shape());
      }
      resumed_loss = train::read_entry(m, "loss_sum", src);
      resumed_correct = train::read_entry(m, "correct_sum", src);
      resumed_seen = train::read_i64(m, "seen", src);
      // Items (tokens) differ from rows only for text; older checkpoints have rows only.
      const bool has_items = std::any_of(m.begin(), m.end(), [](const auto& e) { return e.first == "items"; });
      resumed_items = has_items ? train::read_i64(m, "items", src) : resumed_seen;
      if (scaler && c.has("loss_scaler")) {
        const NamedArrays& ls = c.section("loss_scaler", path);
        const std::string ls_src = fmt::format("{}: section 'loss_scaler'", path);
        resumed_scaler = amp::LossScaler::State{train::read_f64(ls, "scale", ls_src),
                                                train::read_i64(ls, "clean_steps", ls_src),
                                                train::read_i64(ls, "skipped", ls_src)};
        KILN_CHECK(resumed_scaler->scale > 0 && std::isfinite(resumed_scaler->scale) &&
                       resumed_scaler->clean_steps >= 0 && resumed_scaler->skipped >= 0,
                   IOError, "{}: expected a positive finite scale and counts >= 0, found scale {}, counts {} and {}",
                   ls_src, resumed_scaler->scale, resumed_scaler->clean_steps, resumed_scaler->skipped);
      }
      saved_threads =
          c.has("run") ? train::read_i64(c.section("run", path), "cpu_threads", fmt::format("{}: section 'run'", path))
                       : -1;
      KILN_CHECK(state.position.epoch >= 1 && state.position.epoch <= cfg.epochs, IOError,
                 "{}: epoch {} is outside this run's epochs 1 to {}", path, state.position.epoch, cfg.epochs);
      KILN_CHECK(state.position.data.batch <= batches, IOError, "{}: batch {} is past the epoch's {} batches", path,
                 state.position.data.batch, batches);
    });
    if (loaded) {
      train::apply_training(state, params, trainer, train_loader);
      if (resumed_scaler) scaler->set_state(*resumed_scaler);
      first_epoch = static_cast<int>(state.position.epoch);
      step = last_saved = state.position.step;
      resumed_done = state.position.data.batch;
      auto to_dev = [dev](const NDArray& x) { return x.is_none() ? x : x.copy_to(dev); };
      resumed_loss = to_dev(resumed_loss);
      resumed_correct = to_dev(resumed_correct);
      if (note) {
        note(fmt::format("resuming from {} (epoch {}, batch {}, step {})", loaded->path, first_epoch, resumed_done,
                         step));
      }
      if (note && saved_threads >= 0 && saved_threads != cpu_threads) {
        note(
            fmt::format("the checkpoint was written with {} threads per CPU device, this run has {}: it continues, "
                        "but not bit-identically to an uninterrupted run (KILN_CPU_THREADS sets the count)",
                        saved_threads, cpu_threads));
      }
    } else if (note) {
      note(fmt::format("no checkpoint in {}: starting fresh", cfg.checkpoint_dir));
    }
  }

  std::ofstream log;
  if (!cfg.log_path.empty()) {
    log.open(cfg.log_path, step > 0 ? std::ios::app : std::ios::trunc);
    KILN_CHECK(log.good(), IOError, "{}: cannot open the log file for writing", cfg.log_path);
  }

  std::vector<EpochStats> history;
  for (int epoch = first_epoch; epoch <= cfg.epochs; ++epoch) {
    auto start = Clock::now();
    NDArray loss_sum, correct_sum;
    int64_t seen = 0, items = 0, done = 0;  // rows and items (images or tokens) of this epoch
    if (epoch == first_epoch) {
      loss_sum = resumed_loss;
      correct_sum = resumed_correct;
      seen = resumed_seen;
      items = resumed_items;
      done = resumed_done;
    }
    auto save_checkpoint = [&] {
      if (!checkpoints || step == last_saved) return;
      train::Checkpoint c = train::capture_training(
          params, trainer, {.step = step, .epoch = epoch, .data = train_loader.position(done)}, train_loader);
      c.add("metrics",
            {{"loss_sum", loss_sum},
             {"correct_sum", correct_sum},
             {"seen", train::scalar_i64(seen)},
             {"items", train::scalar_i64(items)}},
            /*required=*/false);
      c.add("run", {{"cpu_threads", train::scalar_i64(cpu_threads)}}, /*required=*/false);
      if (scaler) {
        const amp::LossScaler::State st = scaler->state();
        c.add("loss_scaler",
              {{"scale", train::scalar_f64(st.scale)},
               {"clean_steps", train::scalar_i64(st.clean_steps)},
               {"skipped", train::scalar_i64(st.skipped)}},
              /*required=*/false);
      }
      checkpoints->save(step, c);
      last_saved = step;
    };
    for (const data::Batch& b : train_loader) {
      // Data parallel: under mpirun each process takes its share of the batch
      // (the loaders shuffle alike); then one shard per device (one device:
      // the batch itself). Gradients are summed over all shards of all
      // processes, so step rescales by the global batch size.
      NDArray X = b.data, y = b.label;
      if (group.size > 1) {
        std::vector<int64_t> sizes = split_sizes(y.shape()[0], group.size);
        if (static_cast<int>(sizes.size()) < group.size) continue;  // fewer rows than processes: skipped
        int64_t begin = 0;
        for (int r = 0; r < group.rank; ++r) begin += sizes[static_cast<size_t>(r)];
        X = nd::slice_axis(X, 0, begin, begin + sizes[static_cast<size_t>(group.rank)]);
        y = nd::slice_axis(y, 0, begin, begin + sizes[static_cast<size_t>(group.rank)]);
      }
      auto [xs, ys] = split_batch(X, y, cfg.devices);
      std::vector<NDArray> ls(xs.size()), logits(xs.size());
      {
        // Imperative mixed precision: a scope around the forward (a
        // hybridized net compiles with the option above instead).
        std::optional<amp::Autocast> autocast;
        if (cfg.amp) autocast.emplace(*cfg.amp);
        autograd::Record record;
        for (size_t i = 0; i < xs.size(); ++i) {
          logits[i] = net(xs[i]);
          ls[i] = task.loss(logits[i], ys[i]);
        }
      }
      if (scaler) {
        std::vector<NDArray> scaled;
        for (const NDArray& l : ls) scaled.push_back(scaler->scale_loss(l));
        autograd::backward(scaled);
        scaler->step(trainer, b.label.shape()[0]);
      } else {
        autograd::backward(ls);
        trainer.step(b.label.shape()[0]);  // rescaled by the global batch size
      }
      // Running sums stay on the devices; nothing here waits for the engine.
      for (size_t i = 0; i < xs.size(); ++i) {
        auto to_dev = [dev](const NDArray& x) { return x.device() == dev ? x : x.copy_to(dev); };
        NDArray lsum = to_dev(nd::sum(ls[i].detach())), csum = to_dev(task.correct(logits[i].detach(), ys[i]));
        loss_sum = loss_sum.is_none() ? lsum : loss_sum + lsum;
        correct_sum = correct_sum.is_none() ? csum : correct_sum + csum;
      }
      seen += y.shape()[0];
      items += y.size();
      ++step;
      ++done;  // counted with or without a progress callback: checkpoints record it
      if (progress) progress(done, batches);
      if (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0) save_checkpoint();
    }
    save_checkpoint();  // the epoch's end
    EpochStats s;
    s.epoch = epoch;
    s.loss = loss_sum.item<double>() / static_cast<double>(seen);
    s.train_acc = correct_sum.item<double>() / static_cast<double>(items);
    s.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    s.items_per_sec = static_cast<double>(items) / s.seconds;
    s.item = task.item;
    s.text = task.text;
    {
      std::optional<amp::Autocast> autocast;
      if (cfg.amp) autocast.emplace(*cfg.amp);
      Evaluation e = evaluate(net, task, test_loader);
      s.test_acc = e.accuracy;
      s.test_loss = e.loss;
    }
    history.push_back(s);
    if (log.is_open()) {
      log << epoch_log_line(s) << "\n" << std::flush;
    }
    if (on_epoch) on_epoch(s);
  }
  if (!cfg.save_prefix.empty()) {
    net.save_parameters(cfg.save_prefix + ".params");
    if (const auto* gpt = dynamic_cast<const Gpt*>(&net))
      write_file_atomically(cfg.save_prefix + ".json", gpt->config().to_json() + "\n");
  }
  if (!cfg.export_prefix.empty()) {
    net.export_model(cfg.export_prefix);
  }
  return history;
}

}  // namespace kiln::models
