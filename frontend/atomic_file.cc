#include "frontend/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "ir/error.h"

namespace kiln {
namespace {

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  KILN_CHECK(fd >= 0, IOError, "{}: cannot open the directory to sync it: {}", dir, std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  KILN_CHECK(rc == 0, IOError, "{}: fsync of the directory failed: {}", dir, std::strerror(err));
}

std::string parent_of(const std::string& path) {
  std::string p = std::filesystem::path(path).parent_path().string();
  return p.empty() ? "." : p;
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  write_file_atomically(path, [&](const ByteSink& put) { put(bytes); });
}

void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce) {
  static std::atomic<uint64_t> counter{0};
  std::string tmp = fmt::format("{}{}{}-{}", path, kTempMarker, ::getpid(), counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  KILN_CHECK(fd >= 0, IOError, "{}: cannot create the temporary file {}: {}", path, tmp, std::strerror(errno));
  try {
    uint64_t total = 0;
    auto write_all = [&](const char* p, size_t n) {
      while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        KILN_CHECK(w > 0, IOError, "{}: write failed after {} bytes: {}", tmp, total, std::strerror(errno));
        p += w;
        n -= static_cast<size_t>(w);
        total += static_cast<uint64_t>(w);
      }
    };
    constexpr size_t kBuffer = 1 << 20;
    std::string buffer;
    buffer.reserve(kBuffer);
    produce([&](std::string_view piece) {
      if (buffer.size() + piece.size() > kBuffer) {
        write_all(buffer.data(), buffer.size());
        buffer.clear();
      }
      if (piece.size() >= kBuffer) {
        write_all(piece.data(), piece.size());
      } else {
        buffer.append(piece);
      }
    });
    write_all(buffer.data(), buffer.size());
    KILN_CHECK(::fsync(fd) == 0, IOError, "{}: fsync failed: {}", tmp, std::strerror(errno));
    int rc = ::close(fd);
    fd = -1;
    KILN_CHECK(rc == 0, IOError, "{}: close failed: {}", tmp, std::strerror(errno));
    KILN_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, IOError, "{}: cannot rename {} into place: {}", path, tmp,
               std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_dir(parent_of(path));
}

}  // namespace kiln
