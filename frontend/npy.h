// NumPy's .npy file: one array (numpy.save / numpy.load), read and written.
//
//   NDArray x = npy::load("x.npy");       // on cpu(0)
//   npy::save("y.npy", y);                 // waits for y's pending writes
//
// Reading accepts format versions 1.0, 2.0 and 3.0, little-endian or
// byte-order-free dtypes (<f2 <f4 <f8 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1, and
// MXNet 2's <b2 for bfloat16) in C order. Every size is checked against the
// bytes there are before anything is allocated: errors are IOError naming the
// source and the byte offset; big-endian data, Fortran order and object or
// structured dtypes throw NotSupported. Writing uses version 1.0 (2.0 when
// the header needs more than 64 KiB) and pads the header to 64 bytes, as
// NumPy does.
#pragma once

#include <string>
#include <string_view>

#include "frontend/ndarray.h"

namespace kiln::npy {

NDArray load(const std::string& path);
// Written atomically (frontend/atomic_file.h).
void save(const std::string& path, const NDArray& a);

// The same in memory; `source` names the bytes in errors.
NDArray parse(std::string_view bytes, std::string_view source);
std::string serialize(const NDArray& a);

}  // namespace kiln::npy
