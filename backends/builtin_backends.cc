// The device backends compiled into this library, registered in this order
// by init_device_backends() (runtime/device_backend.h). A new kind of device
// adds its folder under backends/ and one line here.
#include "runtime/device_backend.h"

namespace kiln {

void register_cpu_device_backend();   // backends/cpu/backend.cc
void register_cuda_device_backend();  // backends/cuda/backend.cc, built with the CUDA Toolkit only

void register_builtin_device_backends() {
  register_cpu_device_backend();
#if KILN_HAVE_CUDA
  register_cuda_device_backend();
#endif
}

}  // namespace kiln
