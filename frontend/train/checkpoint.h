// A checkpoint file: named sections of named arrays, versioned, checksummed,
// read as untrusted input.
//
//   train::Checkpoint c;
//   c.add("params", {{"0.weight", w}, {"0.bias", b}});
//   std::string bytes = train::serialize_checkpoint(c);
//   train::Checkpoint back = train::parse_checkpoint(std::as_bytes(std::span(bytes)), "ckpt-0000000100.kiln");
//   const NamedArrays& p = back.section("params");   // IOError naming the file when absent
//
// Format, version 1 (little-endian):
//   "KILNCKPT" (8 bytes), u32 format version, u32 section count
//   per section: u32 name length, the name ([a-z0-9_:], 1 to 64 bytes),
//                u32 flags (bit 0: required), u64 payload length,
//                u32 zlib crc32 of the payload, the payload
//   u32 zlib crc32 of every byte before it
// Every payload is MXNet's NDArray-list format (frontend/formats/mxnet/params_io.h), the
// one array format Kiln writes: scalars are one-element int64/float64 arrays.
//
// Extending: new state is a new section, so the version stays 1 while only
// sections are added. A reader keeps sections it does not know; whoever
// consumes a checkpoint refuses an unknown section that is flagged required
// (decode_training, frontend/train/train_state.h, does), so a checkpoint whose
// state an older Kiln cannot restore is refused rather than half-resumed. The
// AMP loss scaler, when mixed precision exists, is such a section
// ("amp_loss_scaler": scale, growth counter) written only by runs that use it.
// A change to the layout itself bumps kCheckpointVersion and adds an upgrade
// function for version 1 files (tests/data/checkpoint/v1-small.kiln is the
// golden file that checkpoint_test reads).
//
// Parsing checks, in order, with IOError naming the file and the byte offset:
// the magic (a foreign file says what it found), the version, every length
// against the bytes left and against the caps below (before allocating), each
// section's crc32, the file's crc32, then each payload through the NDArray-list
// reader, which checks every record's byte count against its shape and dtype.
// parse_checkpoint needs nothing but the bytes, so a fuzz target is one call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/formats/mxnet/params_io.h"

namespace kiln::train {

inline constexpr uint32_t kCheckpointVersion = 1;
inline constexpr size_t kCheckpointMaxSections = 256;
inline constexpr size_t kCheckpointMaxNameBytes = 64;

struct CheckpointSection {
  std::string name;
  bool required = true;  // a reader that does not know it must refuse the file
  NamedArrays arrays;
};

struct Checkpoint {
  uint32_t version = kCheckpointVersion;
  std::vector<CheckpointSection> sections;

  // Appends a section (ValueError for a repeated or malformed name).
  void add(std::string name, NamedArrays arrays, bool required = true);
  bool has(std::string_view name) const;
  // IOError "<source>: no section '<name>' (sections: ...)" when absent.
  const NamedArrays& section(std::string_view name, std::string_view source = "checkpoint") const;
};

// The file's bytes, streamed to `put` in consecutive pieces without building
// the file in memory (each section's arrays are read twice: for its length
// and crc32, then to write them). Waits for each array's pending writes.
void write_checkpoint(const Checkpoint& checkpoint, const std::function<void(std::string_view)>& put);
// The same bytes in one string.
std::string serialize_checkpoint(const Checkpoint& checkpoint);
// `name` (a file name) prefixes every error message.
Checkpoint parse_checkpoint(std::span<const std::byte> bytes, std::string_view name);
// The file (mapped, not copied) through parse_checkpoint; IOError when it
// cannot be read.
Checkpoint read_checkpoint(const std::string& path);

}  // namespace kiln::train
