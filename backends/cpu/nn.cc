// CPU kernels of the nn family, one file per group (see nn_kernels.h).
#include "backends/cpu/nn_kernels.h"

namespace kiln {

void register_cpu_nn_kernels() {
  cpu::register_nn_dense_kernels();
  cpu::register_nn_activation_kernels();
  cpu::register_nn_dropout_kernels();
  cpu::register_nn_softmax_kernels();
}

}  // namespace kiln
