#include "frontend/train/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "frontend/atomic_file.h"
#include "ir/error.h"

namespace kiln::train {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kManifest = "MANIFEST";
constexpr std::string_view kManifestHeader = "kiln checkpoint manifest 1";
constexpr std::string_view kPrefix = "ckpt-";
constexpr std::string_view kSuffix = ".kiln";
constexpr size_t kMaxManifestBytes = 1 << 20;

bool is_checkpoint_name(std::string_view n) {
  if (!n.starts_with(kPrefix) || !n.ends_with(kSuffix)) return false;
  std::string_view digits = n.substr(kPrefix.size(), n.size() - kPrefix.size() - kSuffix.size());
  return !digits.empty() && digits.size() <= 19 &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

CheckpointDir::CheckpointDir(std::string dir, CheckpointDirOptions options) : dir_(std::move(dir)), options_(options) {
  KILN_CHECK(!dir_.empty(), ValueError, "CheckpointDir: no directory given");
  KILN_CHECK(options_.keep >= 1, ValueError, "CheckpointDir: keep must be >= 1, got {}", options_.keep);
}

std::string CheckpointDir::file_name(int64_t step) {
  KILN_CHECK(step >= 0, ValueError, "CheckpointDir: step must be >= 0, got {}", step);
  return fmt::format("{}{:010d}{}", kPrefix, step, kSuffix);
}

std::string CheckpointDir::save(int64_t step, const Checkpoint& checkpoint) {
  std::string name = file_name(step);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  KILN_CHECK(!ec, IOError, "{}: cannot create the checkpoint directory: {}", dir_, ec.message());
  std::string path = (fs::path(dir_) / name).string();
  write_file_atomically(path, [&](const ByteSink& put) { write_checkpoint(checkpoint, put); });

  // The manifest: the new file first, then the previous entries, at most `keep`.
  std::vector<std::string> entries{name};
  for (const std::string& p : list()) {
    std::string n = fs::path(p).filename().string();
    bool present = fs::exists(p, ec);  // the manifest may name files deleted since
    if (n != name && present && entries.size() < static_cast<size_t>(options_.keep)) entries.push_back(n);
  }
  std::string text = std::string(kManifestHeader) + "\n";
  for (const std::string& n : entries) text += n + "\n";
  write_file_atomically((fs::path(dir_) / kManifest).string(), text);

  // Only now: files the manifest no longer names, and interrupted writes.
  std::set<std::string> kept(entries.begin(), entries.end());
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::string n = entry.path().filename().string();
    bool stale = is_checkpoint_name(n) && !kept.contains(n);
    bool tmp = n.find(kTempMarker) != std::string::npos &&
               (n.starts_with(kPrefix) || n.starts_with(std::string(kManifest) + std::string(kTempMarker)));
    if (stale || tmp) fs::remove(entry.path(), ec);
  }
  return path;
}

std::vector<std::string> CheckpointDir::list(const std::function<void(const std::string&)>& note) const {
  std::vector<std::string> names;
  std::string manifest = (fs::path(dir_) / kManifest).string();
  std::error_code ec;
  std::string why;
  if (!fs::exists(dir_, ec)) return {};
  if (fs::exists(manifest, ec)) {
    try {
      std::ifstream in(manifest);
      KILN_CHECK(in.good(), IOError, "{}: cannot open: {}", manifest, std::strerror(errno));
      std::string text(kMaxManifestBytes + 1, '\0');
      in.read(text.data(), static_cast<std::streamsize>(text.size()));
      text.resize(static_cast<size_t>(in.gcount()));
      KILN_CHECK(text.size() <= kMaxManifestBytes, IOError, "{}: larger than {} bytes", manifest, kMaxManifestBytes);
      std::istringstream lines(text);
      std::string line;
      std::getline(lines, line);
      KILN_CHECK(line == kManifestHeader, IOError, "{}: expected the first line \"{}\", found \"{}\"", manifest,
                 kManifestHeader, line.substr(0, 80));
      for (int n = 2; std::getline(lines, line); ++n) {
        KILN_CHECK(is_checkpoint_name(line), IOError, "{}: line {}: expected a ckpt-<digits>.kiln name, found \"{}\"",
                   manifest, n, line.substr(0, 80));
        names.push_back(line);
      }
      std::vector<std::string> paths;
      for (const std::string& n : names) paths.push_back((fs::path(dir_) / n).string());
      return paths;
    } catch (const Error& e) {
      why = fmt::format("{}; using the checkpoint files found instead", e.what());
      names.clear();
    }
  } else {
    why = fmt::format("{}: no manifest; using the checkpoint files found", manifest);
  }
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::string n = entry.path().filename().string();
    if (is_checkpoint_name(n)) names.push_back(n);
  }
  if (names.empty()) return {};  // a fresh directory: nothing to say
  if (note) note(why);
  // Equal-length digit strings: newest (largest step) first.
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() > b.size() : a > b;
  });
  std::vector<std::string> paths;
  for (const std::string& n : names) paths.push_back((fs::path(dir_) / n).string());
  return paths;
}

std::optional<CheckpointDir::Loaded> CheckpointDir::load_newest(const std::function<void(const std::string&)>& warn,
                                                                const Accept& accept) const {
  std::vector<std::string> paths = list(warn);
  std::vector<std::string> refused;
  for (size_t i = 0; i < paths.size(); ++i) {
    try {
      Loaded l{paths[i], read_checkpoint(paths[i])};
      if (accept) accept(l.checkpoint, l.path);
      return l;
    } catch (const Error& e) {
      refused.push_back(e.what());
      if (warn) {
        warn(i + 1 < paths.size() ? fmt::format("unusable checkpoint: {}; falling back to {}", e.what(), paths[i + 1])
                                  : fmt::format("unusable checkpoint: {}; no older checkpoint is left", e.what()));
      }
    }
  }
  if (paths.empty()) return std::nullopt;
  std::string all;
  for (const std::string& r : refused) all += "\n  " + r;
  throw IOError(fmt::format("{}: none of the {} checkpoints can be resumed from:{}", dir_, paths.size(), all));
}

}  // namespace kiln::train
