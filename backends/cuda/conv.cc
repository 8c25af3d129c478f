// Convolution, Pooling and BatchNorm through cuDNN: not written yet (README.md).
namespace kiln {

void register_cuda_conv_kernels() {}

}  // namespace kiln
