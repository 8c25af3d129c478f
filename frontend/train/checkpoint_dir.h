// A directory of checkpoints written crash-safely, keeping the newest K.
//
//   train::CheckpointDir dir("runs/a", {.keep = 3});
//   dir.save(step, checkpoint);                  // runs/a/ckpt-0000000100.kiln, then runs/a/MANIFEST
//   auto loaded = dir.load_newest([](const std::string& msg) { std::fprintf(stderr, "%s\n", msg.c_str()); });
//   if (loaded) ... loaded->checkpoint ...       // nullopt: no checkpoint yet, start fresh
//
// save: the file is written under a temporary name, fsync'ed, renamed to
// ckpt-<step, 10 digits>.kiln and the directory fsync'ed; then MANIFEST (the
// complete checkpoints, newest first) is written and renamed the same way;
// only then are checkpoints beyond the newest `keep`, and temporary files left
// by an interrupted save, deleted. A SIGKILL or power loss at any moment
// leaves the previous manifest or the new one, each naming complete files.
//
// load_newest tries the manifest's checkpoints newest first (or, when the
// manifest is missing or unreadable, the ckpt-*.kiln files found, newest
// first); a file that does not parse, or that `accept` rejects by throwing a
// kiln::Error, is reported through `warn` ("unusable checkpoint: <error
// naming the file>; falling back to <the next>") and the next older one is tried. None at all: nullopt. Some,
// but none usable: IOError listing why each was refused (starting over would
// silently discard the run).
//
// Manifest (text): the line "kiln checkpoint manifest 1", then one file name
// per line. Names that are not ckpt-<digits>.kiln are refused (the manifest
// cannot point outside the directory).
//
// One writer per directory; not thread safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "frontend/train/checkpoint.h"

namespace kiln::train {

struct CheckpointDirOptions {
  int keep = 3;  // complete checkpoints kept (>= 1)
};

class CheckpointDir {
 public:
  explicit CheckpointDir(std::string dir, CheckpointDirOptions options = {});

  const std::string& dir() const { return dir_; }
  static std::string file_name(int64_t step);  // "ckpt-0000000100.kiln"

  // Returns the new file's path. Creates the directory when missing.
  std::string save(int64_t step, const Checkpoint& checkpoint);

  // Complete checkpoints, newest first (paths). `note` hears why the manifest
  // was not used, when it was not.
  std::vector<std::string> list(const std::function<void(const std::string&)>& note = {}) const;

  struct Loaded {
    std::string path;
    Checkpoint checkpoint;
  };
  using Accept = std::function<void(const Checkpoint&, const std::string& path)>;
  std::optional<Loaded> load_newest(const std::function<void(const std::string&)>& warn,
                                    const Accept& accept = {}) const;

 private:
  std::string dir_;
  CheckpointDirOptions options_;
};

}  // namespace kiln::train
