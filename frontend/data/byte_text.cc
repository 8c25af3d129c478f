#include "frontend/data/byte_text.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "frontend/nd_init.h"
#include "ir/error.h"

namespace kiln::data {
namespace {

constexpr int64_t kMaxCorpusBytes = int64_t{1} << 30;

// A stateless 64-bit mix (SplitMix64's finalizer): window i's jitter is a
// function of (seed, i) alone, so any window can be built in any order.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::string ByteCorpus::fortunes_dir() {
  const char* env = std::getenv("KILN_FORTUNES_DIR");
  return env != nullptr && *env != '\0' ? env : "/usr/share/games/fortunes";
}

ByteCorpus ByteCorpus::fortunes(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  KILN_CHECK(fs::is_directory(dir, ec), IOError,
             "{}: not a folder (the fortune texts come from Debian's `fortunes` package; KILN_FORTUNES_DIR "
             "overrides the folder)",
             dir);
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec) && !e.path().filename().has_extension()) files.push_back(e.path());
  }
  KILN_CHECK(!ec, IOError, "{}: cannot list the folder: {}", dir, ec.message());
  KILN_CHECK(!files.empty(), IOError, "{}: no extension-less text files (expected the fortune texts)", dir);
  std::sort(files.begin(), files.end());
  std::string all;
  for (const fs::path& p : files) {
    std::ifstream in(p, std::ios::binary);
    KILN_CHECK(in.good(), IOError, "{}: cannot open for reading", p.string());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    KILN_CHECK(!in.bad(), IOError, "{}: read failed", p.string());
    KILN_CHECK(static_cast<int64_t>(all.size() + text.size()) <= kMaxCorpusBytes, IOError,
               "{}: the corpus would exceed {} bytes at {}", dir, kMaxCorpusBytes, p.string());
    all += text;
  }
  return ByteCorpus(std::move(all));
}

ByteCorpus::ByteCorpus(std::string bytes)
    : bytes_(std::make_shared<const std::string>(std::move(bytes))), begin_(0), end_(static_cast<int64_t>(bytes_->size())) {}

ByteCorpus::ByteCorpus(std::shared_ptr<const std::string> bytes, int64_t begin, int64_t end)
    : bytes_(std::move(bytes)), begin_(begin), end_(end) {}

std::span<const uint8_t> ByteCorpus::bytes() const {
  return {reinterpret_cast<const uint8_t*>(bytes_->data()) + begin_, static_cast<size_t>(end_ - begin_)};
}

std::pair<ByteCorpus, ByteCorpus> ByteCorpus::split(double heldout_fraction) const {
  KILN_CHECK(heldout_fraction > 0 && heldout_fraction < 1, ValueError,
             "ByteCorpus::split: the held-out fraction must be in (0, 1), got {}", heldout_fraction);
  const int64_t n = end_ - begin_;
  const auto held = static_cast<int64_t>(static_cast<double>(n) * heldout_fraction);
  const int64_t cut = begin_ + (n - held);
  return {ByteCorpus(bytes_, begin_, cut), ByteCorpus(bytes_, cut, end_)};
}

ByteWindows::ByteWindows(ByteCorpus corpus, int64_t context, WindowOptions options)
    : corpus_(std::move(corpus)), context_(context), count_(0), options_(options) {
  KILN_CHECK(context >= 1, ValueError, "ByteWindows: context must be >= 1, got {}", context);
  KILN_CHECK(corpus_.size() >= context + 1, ValueError,
             "ByteWindows: a window of context {} needs {} bytes, the corpus has {}", context, context + 1,
             corpus_.size());
  count_ = (corpus_.size() - 1) / context;
}

int64_t ByteWindows::start(int64_t i) const {
  KILN_CHECK(i >= 0 && i < count_, IndexError, "ByteWindows: window {} out of range 0..{}", i, count_ - 1);
  const int64_t slot = i * context_;
  if (!options_.jitter) return slot;
  // Offsets 0..room-1 keep the window (and its last label) inside the
  // corpus: s + context + 1 <= bytes. room >= 1 for every window.
  const int64_t room = std::min<int64_t>(context_, corpus_.size() - context_ - slot);
  if (room <= 1) return slot;
  return slot + static_cast<int64_t>(mix(options_.seed * 0x100000001b3ULL ^ static_cast<uint64_t>(i)) %
                                     static_cast<uint64_t>(room));
}

Batch ByteWindows::batch(std::span<const int64_t> indices, Device device) const {
  const auto n = static_cast<int64_t>(indices.size());
  std::vector<int32_t> x(static_cast<size_t>(n * context_)), y(x.size());
  std::span<const uint8_t> text = corpus_.bytes();
  for (int64_t r = 0; r < n; ++r) {
    const int64_t s = start(indices[static_cast<size_t>(r)]);
    for (int64_t t = 0; t < context_; ++t) {
      x[static_cast<size_t>(r * context_ + t)] = text[static_cast<size_t>(s + t)];
      y[static_cast<size_t>(r * context_ + t)] = text[static_cast<size_t>(s + t + 1)];
    }
  }
  return {nd::array(x, Shape{n, context_}, device), nd::array(y, Shape{n, context_}, device)};
}

}  // namespace kiln::data
