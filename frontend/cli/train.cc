// kiln train: the main job, training a model on Fashion-MNIST, or a
// byte-level GPT on Debian's fortunes.
//
//   kiln train                     # LeNet, 3 epochs: a few minutes on a 2-core machine
//   kiln train --model lenet --epochs 10 --batch-size 256 --lr 0.2 --devices cpu:0 --seed 0
//   kiln train --optimizer adamw --lr 0.003 --wd 0.01 --lr-schedule cosine --warmup-steps 50 --clip-grad-norm 1
//   kiln train --model gpt --layers 4 --heads 4 --width 256 --context 128 --hybridize --save gpt
//
// --model gpt changes the defaults of the options not given to its recipe:
// batch 32, AdamW at lr 1e-3 with wd 0.1, 100 warmup steps, a cosine
// schedule, gradient clipping at 1; it prints held-out bits per byte per
// epoch, and --save also writes PREFIX.json (the configuration `kiln
// generate` reads).
//
// Defaults are the chapter's setting (LeNet, batch 256, lr 0.2) with 3
// epochs instead of 10, so that the command without arguments finishes
// quickly; pass --epochs 10 for the chapter's run.
// Prints per epoch: loss, train accuracy, test accuracy, seconds, images/s; a
// progress bar while an epoch runs on a terminal (nothing on pipes); --log
// writes one JSON object per epoch; --plot FILE.svg redraws the training
// curves (as `kiln plot` draws them) after every epoch, atomically, so a
// browser showing the file can be refreshed while training runs; with --log
// too, the curves are the whole log's (a resumed run's earlier epochs
// included). --save writes PREFIX.params at the end.
//
//   kiln train --checkpoint ckpt --checkpoint-every 100 --keep 3 --resume
//
// --checkpoint DIR writes the whole training state there crash-safely (every
// --checkpoint-every steps and at each epoch's end), keeping the newest
// --keep; --resume continues from the newest usable one (or starts fresh when
// there is none), so a pre-empted job is restarted with the same command.
// Lines about checkpoints go to stderr, prefixed "kiln: ".
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "backends/cpu/cpu_features.h"
#include "frontend/atomic_file.h"
#include "frontend/kvstore.h"
#include "frontend/viz/svg_plot.h"
#include "ir/device.h"
#include "models/train_job.h"
#include "models/train_task.h"

namespace kiln::cli {
namespace {

void draw_progress(int epoch, int64_t done, int64_t total) {
  constexpr int kWidth = 30;
  int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total, 1));
  std::fprintf(stderr, "\repoch %d [%.*s%*s] %lld/%lld", epoch, filled, "##############################",
               kWidth - filled, "", static_cast<long long>(done), static_cast<long long>(total));
  if (done == total) std::fprintf(stderr, "\r%*s\r", kWidth + 40, "");
  std::fflush(stderr);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto cfg = std::make_shared<models::TrainConfig>();
  cfg->epochs = 3;  // see the file comment
  auto devices = std::make_shared<std::string>("cpu:0");
  auto plot_path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model on Fashion-MNIST, or a byte-level GPT on fortunes");
  cmd->add_option("--model", cfg->model, "mlp, lenet, resnet18, resnet18_v1, mlp_chapter, mlp_wide or gpt")
      ->capture_default_str();
  cmd->add_option("--layers", cfg->gpt.layers, "gpt: transformer blocks")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--heads", cfg->gpt.heads, "gpt: attention heads")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--width", cfg->gpt.width, "gpt: model width")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--context", cfg->gpt.context, "gpt: context length in bytes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--dropout", cfg->gpt.dropout, "gpt: dropout rate")->capture_default_str()->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--epochs", cfg->epochs, "Passes over the training set")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--batch-size", cfg->batch_size, "Images per step")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--lr", cfg->lr, "Learning rate (the schedule's base rate)")->capture_default_str();
  cmd->add_option("--init", cfg->init,
                  "Weight initializer: xavier or normal:SIGMA (default xavier, gpt normal:0.02; d2l 12.5 uses "
                  "normal:0.01)");
  cmd->add_option("--momentum", cfg->momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--wd", cfg->wd, "Weight decay (AdamW's decoupled decay with --optimizer adamw)")
      ->capture_default_str();
  cmd->add_option("--optimizer", cfg->optimizer, "sgd, adam or adamw")->capture_default_str();
  cmd->add_option("--lr-schedule", cfg->lr_schedule,
                  "constant, cosine (to 0 over the run) or step:N:F (times F every N steps)")
      ->capture_default_str();
  cmd->add_option("--warmup-steps", cfg->warmup_steps, "Linear learning-rate warmup from 0 over the first N steps")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--clip-grad-norm", cfg->clip_grad_norm,
                  "Clip the gradients' global L2 norm to this value before each update (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--devices", *devices, "Comma-separated devices (several: data parallel)")->capture_default_str();
  cmd->add_option("--seed", cfg->seed, "Seed for initialization and shuffling")->capture_default_str();
  cmd->add_option("--data", cfg->data_dir, "Directory with the Fashion-MNIST IDX files (gpt: the fortune texts)");
  cmd->add_option("--train-limit", cfg->train_limit, "Train on the first N images (gpt: windows) only");
  cmd->add_option("--test-limit", cfg->test_limit, "Evaluate on the first N test images (gpt: windows) only");
  cmd->add_option("--log", cfg->log_path, "Write one JSON object per epoch to FILE");
  cmd->add_option("--plot", *plot_path, "Redraw the training curves as an SVG FILE after every epoch");
  cmd->add_option("--save", cfg->save_prefix, "Write the parameters to PREFIX.params at the end");
  cmd->add_option("--checkpoint", cfg->checkpoint_dir, "Write checkpoints (the whole training state) to DIR");
  cmd->add_option("--checkpoint-every", cfg->checkpoint_every,
                  "Steps between checkpoints (0: at the end of each epoch only)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--keep", cfg->keep, "Checkpoints kept (older ones are deleted)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--resume", cfg->resume,
                "Continue from the newest usable checkpoint in --checkpoint DIR; start fresh when there is none");
  cmd->add_flag("--hybridize", cfg->hybridize, "Train through the compiled path (hybridize)");
  auto amp = std::make_shared<std::string>();
  cmd->add_option("--amp", *amp,
                  "Mixed precision: bf16 or fp16 compute with float32 parameters (fp16 adds loss scaling)")
      ->check(CLI::IsMember({"bf16", "bfloat16", "fp16", "float16"}));
  cmd->add_option("--export", cfg->export_prefix,
                  "With --hybridize: write PREFIX-symbol.json and PREFIX-0000.params (MXNet's format) at the end");
  cmd->callback([cmd, cfg, devices, amp, plot_path] {
    {
      // The model's recipe (models/train_task.h) for what the command line left unset.
      const models::TrainConfig r = models::recipe_for(cfg->model);
      auto unset = [cmd](const char* flag) { return cmd->count(flag) == 0; };
      if (unset("--batch-size")) cfg->batch_size = r.batch_size;
      if (unset("--optimizer")) cfg->optimizer = r.optimizer;
      if (unset("--lr")) cfg->lr = r.lr;
      if (unset("--wd")) cfg->wd = r.wd;
      if (unset("--warmup-steps")) cfg->warmup_steps = r.warmup_steps;
      if (unset("--lr-schedule")) cfg->lr_schedule = r.lr_schedule;
      if (unset("--clip-grad-norm")) cfg->clip_grad_norm = r.clip_grad_norm;
    }
    const bool text = cfg->model == "gpt";
    if (!amp->empty()) {
      cfg->amp = (*amp == "bf16" || *amp == "bfloat16") ? DType::kBfloat16 : DType::kFloat16;
      if (!cpu::native_low_precision(*cfg->amp))
        std::fprintf(stderr, "kiln: --amp %s: %s\n", amp->c_str(), cpu::low_precision_support(*cfg->amp).c_str());
    }
    cfg->devices.clear();
    std::string_view rest = *devices;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      cfg->devices.push_back(parse_device(rest.substr(0, comma)));
      rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
    }
    KILN_CHECK(plot_path->empty() || cfg->log_path.empty() ||
                   std::filesystem::weakly_canonical(*plot_path) != std::filesystem::weakly_canonical(cfg->log_path),
               ValueError, "--plot {} is the --log file: the picture would replace the log", *plot_path);
    bool tty = isatty(STDERR_FILENO) != 0;
    int epoch = 1;
    // Under `mpirun -np N` only rank 0 prints (figures are that process's share).
    const kv::ProcessGroup group = kv::launched_process_group();
    if (group.rank != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return;
    if (group.rank != 0) tty = false;
    const std::string what =
        text ? fmt::format("gpt ({} layers, {} heads, width {}, context {}) on fortunes", cfg->gpt.layers,
                           cfg->gpt.heads, cfg->gpt.width, cfg->gpt.context)
             : cfg->model + " on Fashion-MNIST";
    std::printf("training %s: %d epochs, batch %lld, %s lr %g, %s%s\n", what.c_str(), cfg->epochs,
                static_cast<long long>(cfg->batch_size), cfg->optimizer.c_str(), cfg->lr, devices->c_str(),
                group.size > 1 ? fmt::format(" x {} processes (dist_sync)", group.size).c_str() : "");
    if (text) {
      std::printf("%5s %8s %9s %8s %9s %8s %10s\n", "epoch", "loss", "train acc", "test acc", "test bpb", "sec",
                  "tokens/s");
    } else {
      std::printf("%5s %8s %9s %8s %8s %10s\n", "epoch", "loss", "train acc", "test acc", "sec", "img/s");
    }
    std::fflush(stdout);
    std::string plot_lines;  // the log's lines of this run, for --plot without --log
    auto redraw = [&](const models::EpochStats& s) {
      plot_lines += models::epoch_log_line(s) + "\n";
      viz::TrainLog run =
          cfg->log_path.empty() ? viz::parse_train_log(plot_lines, "--plot") : viz::read_train_log(cfg->log_path);
      run.label = cfg->model;
      std::string title = fmt::format("kiln train: {} on {}, batch {}, lr {}{}", cfg->model,
                                      text ? "fortunes" : "Fashion-MNIST", cfg->batch_size, cfg->lr,
                                      cfg->hybridize ? ", hybridized" : "");
      write_file_atomically(*plot_path, viz::training_curves_svg({&run, 1}, {.title = title}));
    };
    models::train(
        *cfg,
        [&](const models::EpochStats& s) {
          if (s.text) {
            std::printf("%5d %8.4f %9.4f %8.4f %9.4f %8.1f %10.0f\n", s.epoch, s.loss, s.train_acc, s.test_acc,
                        s.test_loss / std::log(2.0), s.seconds, s.items_per_sec);
          } else {
            std::printf("%5d %8.4f %9.4f %8.4f %8.1f %10.0f\n", s.epoch, s.loss, s.train_acc, s.test_acc, s.seconds,
                        s.items_per_sec);
          }
          std::fflush(stdout);
          if (!plot_path->empty() && group.rank == 0) redraw(s);
          epoch = s.epoch + 1;
        },
        [&](int64_t done, int64_t total) {
          if (tty) draw_progress(epoch, done, total);
        },
        [&](const std::string& line) {
          if (tty) std::fprintf(stderr, "\r%*s\r", 70, "");
          std::fprintf(stderr, "kiln: %s\n", line.c_str());
          std::fflush(stderr);
        });
    if (!cfg->save_prefix.empty())
      std::printf("parameters written to %s.params%s\n", cfg->save_prefix.c_str(),
                  text ? fmt::format(" (configuration: {}.json)", cfg->save_prefix).c_str() : "");
    if (!cfg->export_prefix.empty())
      std::printf("exported %s-symbol.json and %s-0000.params\n", cfg->export_prefix.c_str(),
                  cfg->export_prefix.c_str());
  });
}

}  // namespace kiln::cli
