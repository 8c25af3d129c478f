// CPU kernels of the conv family, one file per op group: conv_convolution.cc,
// conv_pooling.cc, conv_batch_norm.cc (oneDNN plumbing in onednn_util.h).
namespace kiln {

void register_cpu_convolution_kernels();
void register_cpu_pooling_kernels();
void register_cpu_batch_norm_kernels();

void register_cpu_conv_kernels() {
  register_cpu_convolution_kernels();
  register_cpu_pooling_kernels();
  register_cpu_batch_norm_kernels();
}

}  // namespace kiln
