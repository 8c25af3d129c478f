// Fills the kernel table's CPU column: one call per op family.
namespace kiln {

void register_cpu_init_kernels();
void register_cpu_elemwise_kernels();
void register_cpu_reduce_kernels();
void register_cpu_linalg_kernels();
void register_cpu_matrix_kernels();
void register_cpu_conv_kernels();
void register_cpu_nn_kernels();
void register_cpu_optimizer_kernels();
void register_cpu_fused_kernels();
void register_cpu_widening_kernel();
void register_cpu_layer_norm_kernels();
void register_cpu_attention_kernels();

void register_cpu_kernels() {
  register_cpu_init_kernels();
  register_cpu_elemwise_kernels();
  register_cpu_reduce_kernels();
  register_cpu_linalg_kernels();
  register_cpu_matrix_kernels();
  register_cpu_conv_kernels();
  register_cpu_nn_kernels();
  register_cpu_optimizer_kernels();
  register_cpu_fused_kernels();
  register_cpu_widening_kernel();
  register_cpu_layer_norm_kernels();
  register_cpu_attention_kernels();
}

}  // namespace kiln
