// `kiln train --checkpoint DIR --resume` killed with SIGKILL at random
// moments, during steps and during checkpoint writes, then restarted with the
// same command line until it finishes: after every kill the newest checkpoint
// the manifest names must load, and the final parameters must equal, byte for
// byte, those of a run that was never interrupted.
//
// Runs the `kiln` program (KILN_CLI_PATH) on 384 Fashion-MNIST images (an MLP,
// 2 epochs of 12 steps); skipped when the dataset is not installed.
// KILN_CKPT_KILL_TRIALS (default 10) sets the number of trials and
// KILN_CKPT_KILL_SEED the random moments; a failure prints both.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "frontend/data/fashion_mnist.h"
#include "frontend/train/checkpoint_dir.h"

extern char** environ;

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

pid_t spawn_kiln(const std::vector<std::string>& args, const fs::path& output) {
  std::vector<std::string> argv_s{KILN_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << KILN_CLI_PATH;
  return pid;
}

// The exit status, or -signal when killed.
int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

std::optional<int> exited(pid_t pid) {
  int status = 0;
  pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == 0) return std::nullopt;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Names of temporary files (a checkpoint or manifest write in progress).
std::set<std::string> temporary_files(const fs::path& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string n = e.path().filename().string();
    if (n.find(".tmp-") != std::string::npos) out.insert(n);
  }
  return out;
}

const std::vector<std::string> kTrain = {"train", "--model",      "mlp", "--train-limit", "384", "--test-limit",
                                         "64",    "--batch-size", "32",  "--epochs",      "2",   "--lr",
                                         "0.1",   "--momentum",   "0.9", "--seed",        "3"};

TEST(CheckpointKill, ResumedRunsEndBitIdenticalAndTheNewestCheckpointAlwaysLoads) {
  if (!fs::exists(data::FashionMNIST::default_dir() + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  const char* trials_env = std::getenv("KILN_CKPT_KILL_TRIALS");
  const char* seed_env = std::getenv("KILN_CKPT_KILL_SEED");
  int trials = trials_env ? std::atoi(trials_env) : 10;
  uint64_t seed =
      seed_env ? std::strtoull(seed_env, nullptr, 10) : static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  std::string repro = fmt::format("reproduce: KILN_CKPT_KILL_SEED={} KILN_CKPT_KILL_TRIALS={}", seed, trials);
  std::mt19937_64 rng(seed);

  fs::path root = fs::temp_directory_path() / fmt::format("kiln_ckpt_kill_{}", ::getpid());
  fs::remove_all(root);
  fs::create_directories(root);

  // The uninterrupted reference, without checkpoints at all.
  std::vector<std::string> ref_args = kTrain;
  ref_args.insert(ref_args.end(), {"--save", (root / "reference").string()});
  auto t0 = Clock::now();
  ASSERT_EQ(wait_for(spawn_kiln(ref_args, root / "reference.log")), 0) << read_bytes(root / "reference.log");
  double ref_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::string reference = read_bytes(root / "reference.params");
  ASSERT_FALSE(reference.empty());

  int kills = 0, kills_in_writes = 0, write_aimed = 0, resumes = 0;
  for (int trial = 0; trial < trials; ++trial) {
    fs::path dir = root / fmt::format("trial{}", trial), log = root / fmt::format("trial{}.log", trial);
    fs::path out = root / fmt::format("trial{}", trial);
    std::vector<std::string> args = kTrain;
    args.insert(args.end(), {"--checkpoint", dir.string(), "--checkpoint-every", "1", "--keep", "2", "--resume",
                             "--save", out.string()});
    int planned = std::uniform_int_distribution<int>(1, 4)(rng);
    std::optional<int> status;
    for (int k = 0; k < planned && !status; ++k) {
      std::set<std::string> tmp_before = temporary_files(dir);
      std::string manifest_before = read_bytes(dir / "MANIFEST");
      auto deadline = Clock::now() + std::chrono::duration<double>(3 * ref_seconds + 10);
      // This process has taken a step once it has written a checkpoint.
      auto stepped = [&] { return read_bytes(dir / "MANIFEST") != manifest_before; };
      pid_t pid = spawn_kiln(args, log);
      int mode = std::uniform_int_distribution<int>(0, 2)(rng);
      auto sleep_us = [&](int max_us) {
        std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, max_us)(rng)));
      };
      if (mode == 0) {  // anywhere, start-up and loading included
        double s = std::uniform_real_distribution<double>(0.0, 1.2)(rng) * ref_seconds;
        auto until = Clock::now() + std::chrono::duration<double>(s);
        while (!(status = exited(pid)) && Clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      } else {
        // Into the training loop first.
        while (!(status = exited(pid)) && !stepped() && Clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        if (mode == 1) {  // during steps (and whatever they write)
          sleep_us(800000);
        } else {  // during a checkpoint write: one in progress, then a little more
          ++write_aimed;
          auto is_writing = [&] {
            for (const std::string& n : temporary_files(dir)) {
              if (!tmp_before.contains(n)) return true;
            }
            return false;
          };
          while (!status && !(status = exited(pid)) && !is_writing() && Clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::microseconds(20));
          }
          sleep_us(1500);
        }
      }
      if (!status) status = exited(pid);
      if (status) break;  // finished before the kill
      ::kill(pid, SIGKILL);
      const int killed = wait_for(pid);
      if (killed == 0) {  // it finished between the last look and the kill
        status = 0;
        break;
      }
      ASSERT_EQ(killed, -SIGKILL);
      ++kills;
      for (const std::string& n : temporary_files(dir)) {
        if (!tmp_before.contains(n)) {  // this process's write, cut short
          ++kills_in_writes;
          break;
        }
      }
      // The newest complete checkpoint loads, without falling back.
      std::vector<std::string> listed = train::CheckpointDir(dir.string()).list();
      if (!listed.empty()) {
        try {
          train::read_checkpoint(listed.front());
        } catch (const Error& e) {
          FAIL() << "trial " << trial << ", after kill " << k + 1
                 << ": the newest checkpoint does not load: " << e.what() << "\n"
                 << repro;
        }
      }
    }
    if (!status) {
      status = wait_for(spawn_kiln(args, log));
    }
    ASSERT_EQ(*status, 0) << "trial " << trial << " failed:\n" << read_bytes(log) << repro;
    std::string text = read_bytes(log);
    for (size_t at = 0; (at = text.find("resuming from", at)) != std::string::npos; ++at) ++resumes;
    ASSERT_TRUE(read_bytes(out.string() + ".params") == reference)
        << "trial " << trial << ": the resumed run's parameters differ from the uninterrupted run's\n"
        << text << repro;
  }
  std::printf(
      "%d trials: %d kills (%d aimed at a checkpoint write; %d cut one short), %d resumes; %.1f s per "
      "uninterrupted run\n",
      trials, kills, write_aimed, kills_in_writes, resumes, ref_seconds);
  // With enough trials some kills must have hit a write in progress, or the test does not test that.
  if (write_aimed >= 4) {
    EXPECT_GE(kills_in_writes, 1) << repro;
  }
  fs::remove_all(root);
}

// --resume past damaged checkpoints: the newest truncated, the next with a
// flipped byte; the run says it falls back, resumes from the third and still
// ends with the uninterrupted run's parameters. All damaged: an error, not a
// silent fresh start.
TEST(CheckpointKill, ResumeFallsBackPastDamagedCheckpoints) {
  if (!fs::exists(data::FashionMNIST::default_dir() + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  fs::path root = fs::temp_directory_path() / fmt::format("kiln_ckpt_fallback_{}", ::getpid());
  fs::remove_all(root);
  fs::create_directories(root);
  fs::path dir = root / "ckpt";
  std::vector<std::string> args = kTrain;
  args.insert(args.end(), {"--checkpoint", dir.string(), "--checkpoint-every", "5", "--keep", "3", "--resume", "--save",
                           (root / "out").string()});
  ASSERT_EQ(wait_for(spawn_kiln(args, root / "first.log")), 0) << read_bytes(root / "first.log");
  std::string reference = read_bytes(root / "out.params");
  std::vector<std::string> listed = train::CheckpointDir(dir.string()).list();
  ASSERT_EQ(listed.size(), 3u);  // steps 24 (the end), 20, 15
  std::string newest = read_bytes(listed[0]), second = read_bytes(listed[1]);
  std::ofstream(listed[0], std::ios::binary | std::ios::trunc) << newest.substr(0, newest.size() - 100);
  second[second.size() / 2] = static_cast<char>(second[second.size() / 2] ^ 0x10);
  std::ofstream(listed[1], std::ios::binary | std::ios::trunc) << second;
  fs::remove(root / "out.params");

  ASSERT_EQ(wait_for(spawn_kiln(args, root / "second.log")), 0) << read_bytes(root / "second.log");
  std::string log = read_bytes(root / "second.log");
  EXPECT_NE(log.find("kiln: unusable checkpoint: " + listed[0] + ": truncated"), std::string::npos) << log;
  EXPECT_NE(log.find("; falling back to " + listed[1]), std::string::npos) << log;
  EXPECT_NE(log.find("kiln: unusable checkpoint: " + listed[1] + ": section 'optimizer' is corrupt: crc32"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("kiln: resuming from " + listed[2] + " (epoch 2, batch 3, step 15)"), std::string::npos) << log;
  EXPECT_TRUE(read_bytes(root / "out.params") == reference) << "parameters differ after the fallback\n" << log;

  // Every checkpoint damaged (the resumed run rewrote them: damage them again).
  for (const std::string& p : train::CheckpointDir(dir.string()).list()) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << "KILNCKPT";
  }
  EXPECT_EQ(wait_for(spawn_kiln(args, root / "third.log")), 1);
  EXPECT_NE(read_bytes(root / "third.log").find("none of the 3 checkpoints can be resumed from"), std::string::npos)
      << read_bytes(root / "third.log");
  fs::remove_all(root);
}

}  // namespace
}  // namespace kiln
