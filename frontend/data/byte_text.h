// Byte-level text for language models: a corpus of bytes, split into a
// training part and a held-out tail, served as windows of next-byte
// prediction.
//
//   data::ByteCorpus text = data::ByteCorpus::fortunes();         // Debian's fortunes, ~2.6 MB
//   auto [train, heldout] = text.split(0.1);                        // the last 10% held out
//   data::ByteWindows windows(train, 128, {.seed = 1});             // one window per 128 bytes
//   data::Batch b = windows.batch({0, 5});                          // data, label: [2, 128] int32
//
// A window of length T starting at s gives data = bytes[s, s+T) and label =
// bytes[s+1, s+T+1): the label is the next byte of every position. Windows
// tile the corpus with stride T; with `jitter` (the default) each window
// starts at a seeded random offset within its stride slot, so the windows of
// two seeds differ while every window stays inside the corpus. Held-out
// evaluation uses jitter off: every byte predicted once.
//
// Byte values are token ids 0..255 (vocabulary 256); ids and labels are
// int32 on the requested device.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "frontend/data/dataset.h"

namespace kiln::data {

class ByteCorpus {
 public:
  static constexpr int64_t kVocab = 256;

  // KILN_FORTUNES_DIR, else /usr/share/games/fortunes (Debian's `fortunes`).
  static std::string fortunes_dir();
  // The extension-less regular files of `dir` (the fortune texts; not the
  // .dat indexes or .u8 links), in sorted name order, concatenated. IOError
  // naming the folder when it is missing or holds no such file, or naming a
  // file that cannot be read; total size limited to 1 GiB.
  static ByteCorpus fortunes(const std::string& dir = fortunes_dir());
  explicit ByteCorpus(std::string bytes);

  int64_t size() const { return end_ - begin_; }
  std::span<const uint8_t> bytes() const;
  // (first part, last `heldout_fraction` of the bytes). ValueError unless
  // 0 < heldout_fraction < 1.
  std::pair<ByteCorpus, ByteCorpus> split(double heldout_fraction) const;

 private:
  ByteCorpus(std::shared_ptr<const std::string> bytes, int64_t begin, int64_t end);
  std::shared_ptr<const std::string> bytes_;
  int64_t begin_ = 0, end_ = 0;
};

struct WindowOptions {
  bool jitter = true;  // seeded random start within each stride slot
  uint64_t seed = 0;
};

class ByteWindows final : public Dataset {
 public:
  // ValueError when context < 1 or the corpus has fewer than context + 1 bytes.
  ByteWindows(ByteCorpus corpus, int64_t context, WindowOptions options = {});

  int64_t context() const { return context_; }
  // Number of windows: floor((bytes - 1) / context).
  int64_t size() const override { return count_; }
  // Where window i starts (IndexError outside 0..size()-1).
  int64_t start(int64_t i) const;
  Batch batch(std::span<const int64_t> indices, Device device = Device::cpu(0)) const override;

 private:
  ByteCorpus corpus_;
  int64_t context_, count_;
  WindowOptions options_;
};

}  // namespace kiln::data
