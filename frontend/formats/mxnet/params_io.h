// MXNet's NDArray-list file (`mx.nd.save`, Gluon's save_parameters, the
// `-0000.params` of an export), read and written byte-compatibly.
//
//   mxnet::save_ndarrays("net.params", {{"0.weight", w}, {"0.bias", b}});
//   for (auto& [name, a] : mxnet::load_ndarrays("net.params")) ...   // arrays on cpu(0)
//
// Layout (little-endian; /work/shared/research/mxnet-formats.md §2):
//   u64 0x112, u64 0 (reserved), u64 count, count records, u64 name count
//   (0 or count), then per name u64 length + bytes.
//   Record (V2): u32 0xF993FAC9, i32 storage type (0 dense), i32 ndim,
//   ndim x i64 dims, i32 dev_type, i32 dev_id, i32 type flag (DType), the
//   values row-major. V2 cannot express a 0-d array (ndim 0 means "none"), so
//   scalars are written as V3 records (0xF993FACA, NumPy shape semantics),
//   which MXNet >= 1.5 reads.
//
// Reading accepts V3, V2, V1 (0xF993FAC8, no storage type) and pre-V1 records
// (no magic, u32 dims); a "none" record loads as an empty NDArray (is_none).
// Every count and size is checked against the bytes left in the file before
// anything is allocated; errors are IOError naming the file and the byte
// offset ("net.params: truncated at byte 1234: ..."). Sparse records and
// MXNet 2.0's .npz archives throw NotSupported. Unnamed (list) files give
// empty names.
//
// Writing waits for each array's pending writes (the values are read), copies
// non-CPU arrays to the host, writes a temporary file next to `path`, syncs it
// and renames it over `path`, so a crash never leaves half a file.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frontend/formats/named_arrays.h"

namespace kiln::mxnet {

void save_ndarrays(const std::string& path, const NamedArrays& arrays);
NamedArrays load_ndarrays(const std::string& path);

// The same format in memory; `source` names the bytes in error messages.
std::string serialize_ndarrays(const NamedArrays& arrays);
// The same bytes streamed to `put` in consecutive pieces (values are not
// copied first), for formats that frame this one (checkpoints).
void write_ndarrays(const NamedArrays& arrays, const std::function<void(std::string_view)>& put);
NamedArrays parse_ndarrays(std::string_view bytes, std::string_view source);

}  // namespace kiln::mxnet
