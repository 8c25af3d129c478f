// CPU kernels of the elemwise family: shared helpers and registration. The
// kernels are in elemwise_binary.cc (binary, broadcast, scalar, where) and
// elemwise_unary.cc (unary, clip, _copy, Cast).
#include <cstring>

#include "backends/cpu/elemwise_kernels.h"

namespace kiln {

void register_cpu_elemwise_binary_kernels();
void register_cpu_elemwise_unary_kernels();

namespace cpu {

TensorView readable(const TensorView& in, const TensorView& out, std::unique_ptr<char[]>& scratch) {
  auto* in_begin = static_cast<const char*>(in.data);
  auto* out_begin = static_cast<const char*>(out.data);
  size_t in_bytes = in.bytes(), out_bytes = out.bytes();
  bool overlap = in_begin < out_begin + out_bytes && out_begin < in_begin + in_bytes;
  bool same_elements =
      in_begin == out_begin && in.size() == out.size() && dtype_size(in.dtype) == dtype_size(out.dtype);
  if (!overlap || same_elements) return in;
  scratch = std::make_unique<char[]>(in_bytes);
  std::memcpy(scratch.get(), in.data, in_bytes);
  TensorView copy = in;
  copy.data = scratch.get();
  return copy;
}

}  // namespace cpu

void register_cpu_elemwise_kernels() {
  register_cpu_elemwise_binary_kernels();
  register_cpu_elemwise_unary_kernels();
}

}  // namespace kiln
