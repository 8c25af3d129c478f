// The ThreadSanitizer program (cmake/KilnTsan.cmake) links the CPU device
// backend for its lanes, pools and copies but none of its kernels: the
// engine tests push their own functions and never read the kernel table.
// Without kernels (and without oneDNN) no layout pays, so the backend's
// layout question answers "no".
#include "backends/cpu/cpu_features.h"

namespace kiln {

void register_cpu_kernels() {}

namespace cpu {
bool channels_last_pays(DType) { return false; }
}  // namespace cpu

}  // namespace kiln
