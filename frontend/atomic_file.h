// Files written whole or not at all: every file Kiln writes (parameters,
// checkpoints, .npy outputs) goes through here, so a crash or a full disk
// never leaves a half-written file under the real name.
//
//   write_file_atomically("w.params", bytes);
//   write_file_atomically("big.bin", [&](const ByteSink& put) { put(part1); put(part2); });
//
// The bytes go to a temporary file beside `path` (`path` + kTempMarker + pid
// and a counter), which is fsynced, renamed over `path`, and then the
// directory is fsynced, so after a crash either the old file or the complete
// new one is there. On an error the temporary file is removed and IOError
// names the file and what failed. Safe to call from several threads (each
// call gets its own temporary name).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace kiln {

// The marker in temporary file names; readers that list a directory can
// recognize (and clean up) what a crash left behind.
inline constexpr std::string_view kTempMarker = ".tmp-";

void write_file_atomically(const std::string& path, std::string_view bytes);

// The same with the bytes streamed: `produce` calls its argument with
// consecutive pieces (buffered here, 1 MiB at a time).
using ByteSink = std::function<void(std::string_view)>;
void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce);

}  // namespace kiln
