// Convolution (forward, backward data, backward weight) and Pooling (forward,
// backward) through cuDNN's legacy API, BatchNorm through Kiln's own kernels
// (batch_norm.cu), and the fused _kiln_conv_act. float32 (convolutions also
// bfloat16/float16, on tensor cores; BatchNorm 16-bit data with float32
// parameters), channel-first, 1 to 3 spatial axes (1-D
// runs as 2-D with a unit axis).
//
// Algorithms: cuDNN's heuristic (the *_v7 queries) picks, once per shape and
// per TF32 setting; the choice and its workspace size are cached in a map
// keyed by the descriptors' numbers. The workspace comes from the device's
// caching allocator and is released after the op's stream is synchronized.
#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>

#include "backends/cuda/device_runtime.h"
#include "backends/cuda/kernel_util.h"
#include "ir/amp.h"
#include "ir/ops/conv.h"
#include "ir/ops/conv_layout.h"
#include "ir/ops/fused_layers.h"

#if defined(KILN_HAVE_CUDNN)
#include <cudnn.h>
#endif

namespace kiln {

#if defined(KILN_HAVE_CUDNN)

namespace {

void check_cudnn(cudnnStatus_t st, const char* call, Device device) {
  if (st != CUDNN_STATUS_SUCCESS) cuda::throw_library_error("cuDNN", st, cudnnGetErrorString(st), call, device);
}
#define KILN_CUDNN_CHECK(call, device) check_cudnn((call), #call, (device))

// ---- descriptors (RAII)

cudnnDataType_t cudnn_type(DType t) {
  return t == DType::kBfloat16 ? CUDNN_DATA_BFLOAT16 : t == DType::kFloat16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  // `dims` channel-first ([N, C, spatial...]); `last`: stored channel-last.
  TensorDesc(const std::vector<int>& dims, Device device, DType dtype = DType::kFloat32, bool last = false) {
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d), device);
    std::vector<int> strides(dims.size(), 1);
    int step = last ? dims[1] : 1;
    for (size_t i = dims.size(); i-- > 0;) {
      if (last && i == 1) continue;  // channels innermost (stride 1)
      strides[i] = step;
      step *= dims[i];
    }
    KILN_CUDNN_CHECK(cudnnSetTensorNdDescriptor(d, cudnn_type(dtype), static_cast<int>(dims.size()), dims.data(),
                                                strides.data()),
                     device);
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  // `dims` [K, C / groups, spatial...] whatever the layout; `last`: stored [K, spatial..., C / groups].
  FilterDesc(const std::vector<int>& dims, Device device, DType dtype, bool last = false) {
    KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d), device);
    KILN_CUDNN_CHECK(cudnnSetFilterNdDescriptor(d, cudnn_type(dtype), last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                                static_cast<int>(dims.size()), dims.data()),
                     device);
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

// Dims of an array, channel-first ([N, C, spatial...], from [N, spatial...,
// C] when `last`), with the spatial axes padded to at least two (1-D as 2-D).
std::vector<int> dims_of(const Shape& s, bool last = false) {
  std::vector<int> dims;
  for (int i = 0; i < s.ndim(); ++i) {
    KILN_CHECK(s[i] < (int64_t{1} << 31), NotSupported, "axis {} of {} is too long for cuDNN", i, s);
    dims.push_back(static_cast<int>(s[i]));
  }
  if (last && dims.size() >= 3) std::rotate(dims.begin() + 1, dims.end() - 1, dims.end());
  if (dims.size() == 3) dims.push_back(1);
  return dims;
}

// The window's numbers, spatial axes padded to two.
struct Window {
  std::vector<int> kernel, stride, dilate, pad;
};

Window window_of(const WindowGeometry& g) {
  Window w;
  for (int i = 0; i < g.nsp; ++i) {
    KILN_CHECK(g.pad_l[i] == g.pad_r[i], NotSupported,
               "asymmetric padding ({} before, {} after on spatial axis {}) has no cuDNN kernel", g.pad_l[i], g.pad_r[i],
               i);
    w.kernel.push_back(static_cast<int>(g.kernel[i]));
    w.stride.push_back(static_cast<int>(g.stride[i]));
    w.dilate.push_back(static_cast<int>(g.dilate[i]));
    w.pad.push_back(static_cast<int>(g.pad_l[i]));
  }
  if (g.nsp == 1) {
    w.kernel.push_back(1);
    w.stride.push_back(1);
    w.dilate.push_back(1);
    w.pad.push_back(0);
  }
  return w;
}

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  // 16-bit data: float32 accumulation on tensor cores.
  ConvDesc(const Window& w, int groups, Device device, DType dtype) {
    KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d), device);
    KILN_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(d, static_cast<int>(w.kernel.size()), w.pad.data(),
                                                     w.stride.data(), w.dilate.data(), CUDNN_CROSS_CORRELATION,
                                                     CUDNN_DATA_FLOAT),
                     device);
    KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, groups), device);
    // FMA math forbids TF32; the default allows it (KILN_CUDA_TF32=0 forbids).
    cudnnMathType_t math = cuda::tf32_allowed() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    if (is_16bit_float(dtype)) math = CUDNN_TENSOR_OP_MATH;
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math), device);
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// One convolution call's descriptors (bfloat16/float16 data: float32
// accumulation on tensor cores), from the forward's data/weight/output shapes.
struct ConvSetup {
  Device device;
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  std::string key;  // the algorithm cache's key (without the direction)
  ConvSetup(const ConvolutionAttrs& a, const Shape& data, const Shape& weight, const Shape& out, Device dev,
            DType dtype)
      : device(dev),
        x(dims_of(data, channels_last(a.layout)), dev, dtype, channels_last(a.layout)),
        y(dims_of(out, channels_last(a.layout)), dev, dtype, channels_last(a.layout)),
        w(dims_of(weight, channels_last(a.layout)), dev, dtype, channels_last(a.layout)),
        conv(window_of(convolution_geometry(a, data)), a.num_group, dev, dtype) {
    key = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", dev, dtype_short_name(dtype), data, weight, out, a.stride,
                      a.dilate, a.pad, a.num_group, cuda::tf32_allowed(), channels_last(a.layout) ? "last" : "");
  }
};

struct AlgoChoice {
  int algo = 0;
  size_t workspace = 0;
};

std::mutex g_algo_mutex;
std::map<std::string, AlgoChoice>& algo_cache() {
  static auto* m = new std::map<std::string, AlgoChoice>();  // leaked: used until exit
  return *m;
}

// Looks `key` up, or runs `choose` once and remembers the answer.
template <typename Choose>
AlgoChoice cached_algo(const std::string& key, Choose&& choose) {
  {
    std::lock_guard lock(g_algo_mutex);
    auto it = algo_cache().find(key);
    if (it != algo_cache().end()) return it->second;
  }
  AlgoChoice c = choose();
  std::lock_guard lock(g_algo_mutex);
  algo_cache()[key] = c;
  return c;
}

// The first algorithm of cuDNN's heuristic list that reports success.
template <typename Perf>
AlgoChoice first_ok(const Perf* perf, int n, const char* what, const std::string& key) {
  for (int i = 0; i < n; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS) return {static_cast<int>(perf[i].algo), perf[i].memory};
  }
  throw NotSupported(fmt::format("cuDNN has no {} algorithm for {}", what, key));
}

constexpr int kMaxAlgos = 16;

void convolution_forward_into(const KernelContext& ctx, const ConvolutionAttrs& a, const TensorView& data,
                              const TensorView& weight, const TensorView& out) {
  const Device dev = ctx.run.device;
  cudnnHandle_t h = cuda::cudnn_handle(dev.id, cuda::stream_of(ctx));
  ConvSetup s(a, data.shape, weight.shape, out.shape, dev, data.dtype);
  AlgoChoice c = cached_algo("fwd|" + s.key, [&] {
    cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
    int n = 0;
    KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, s.x.d, s.w.d, s.conv.d, s.y.d, kMaxAlgos, &n, perf), dev);
    return first_ok(perf, n, "forward convolution", s.key);
  });
  cuda::Scratch ws(dev, c.workspace);
  const float one = 1.0f, zero = 0.0f;
  KILN_CUDNN_CHECK(cudnnConvolutionForward(h, &one, s.x.d, data.data, s.w.d, weight.data, s.conv.d,
                                           static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws.get(), c.workspace,
                                           &zero, s.y.d, out.data),
                   dev);
}

// out[n, c, ...] += bias[c] (out[n, ..., c] when `last`)
void add_channel_bias(const KernelContext& ctx, const TensorView& out, const TensorView& bias, bool last) {
  if (is_16bit_float(out.dtype)) {
    const int64_t inner = last ? 1 : out.size() / std::max<int64_t>(1, out.shape[0] * bias.size());
    KILN_CUDA_LAUNCH(cuda::launch_add_channel_bias(out.data, static_cast<int>(out.dtype), bias.data,
                                                   static_cast<int>(bias.dtype), out.size(), bias.size(), inner,
                                                   cuda::stream_of(ctx)),
                     ctx);
    return;
  }
  std::vector<int64_t> dims(static_cast<size_t>(out.shape.ndim() - 1), 1);
  (last ? dims.back() : dims[0]) = bias.size();
  auto ix = cuda::make_broadcast_index(out.shape, Shape(dims), out.shape);
  KILN_CUDA_LAUNCH(cuda::launch_binary(cuda::BinaryOp::kAdd, cuda::kDtypeFloat32, out.data, bias.data, out.data,
                                       out.size(), ix, 0, 0.0f, 0.0f, cuda::stream_of(ctx)),
                   ctx);
}

void convolution_native(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (!is_16bit_float(in[0].dtype)) cuda::require_f32(in, out);
  const auto& a = ctx.attrs.as<ConvolutionAttrs>();
  if (out[0].size() == 0) return;
  convolution_forward_into(ctx, a, in[0], in[1], out[0]);
  if (!a.no_bias) add_channel_bias(ctx, out[0], in[2], channels_last(a.layout));
}

// _kiln_conv_act(data, weight[, bias][, sum]) = act(conv + bias + sum); 16-bit
// data as convolution_native, the sum and activation on the 16-bit output
// (each step rounded: relu adds no rounding, a sum one).
void conv_act(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (!is_16bit_float(in[0].dtype)) cuda::require_f32(in, out);
  const auto& a = ctx.attrs.as<ConvActAttrs>();
  if (out[0].size() == 0) return;
  const int dtype = static_cast<int>(out[0].dtype);
  if (a.with_sum)
    KILN_CHECK(in.back().dtype == out[0].dtype, NotSupported, "_kiln_conv_act on CUDA: sum input {} with output {}",
               in.back().dtype, out[0].dtype);
  convolution_forward_into(ctx, a, in[0], in[1], out[0]);
  size_t next = 2;
  if (!a.no_bias) add_channel_bias(ctx, out[0], in[next++], channels_last(a.layout));
  cudaStream_t s = cuda::stream_of(ctx);
  if (a.with_sum) {
    KILN_CUDA_LAUNCH(cuda::launch_binary(cuda::BinaryOp::kAdd, dtype, out[0].data, in[next].data, out[0].data,
                                         out[0].size(), {}, 0, 0.0f, 0.0f, s),
                     ctx);
  }
  KILN_CUDA_LAUNCH(
      cuda::launch_unary(cuda::activation_op(a.act_type), dtype, out[0].data, out[0].data, out[0].size(), 0, 0, s),
      ctx);
}

// (out_grad, weight) -> d_data
void convolution_backward_data_native(const KernelContext& ctx, std::span<const TensorView> in,
                               std::span<const TensorView> out) {
  if (!is_16bit_float(in[0].dtype)) cuda::require_f32(in, out);
  const auto& a = ctx.attrs.as<ConvolutionBackwardDataAttrs>();
  const Device dev = ctx.run.device;
  if (out[0].size() == 0) return;
  if (in[0].size() == 0) {
    KILN_CUDA_CHECK(cudaMemsetAsync(out[0].data, 0, out[0].bytes(), cuda::stream_of(ctx)), dev);
    return;
  }
  cudnnHandle_t h = cuda::cudnn_handle(dev.id, cuda::stream_of(ctx));
  ConvSetup s(a, out[0].shape, in[1].shape, in[0].shape, dev, in[0].dtype);
  AlgoChoice c = cached_algo("bwd_data|" + s.key, [&] {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgos];
    int n = 0;
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, s.w.d, s.y.d, s.conv.d, s.x.d, kMaxAlgos, &n, perf),
                     dev);
    return first_ok(perf, n, "backward-data convolution", s.key);
  });
  cuda::Scratch ws(dev, c.workspace);
  const float one = 1.0f, zero = 0.0f;
  KILN_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, s.w.d, in[1].data, s.y.d, in[0].data, s.conv.d,
                                                static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), ws.get(),
                                                c.workspace, &zero, s.x.d, out[0].data),
                   dev);
}

// (out_grad, data) -> d_weight
void convolution_backward_weight_native(const KernelContext& ctx, std::span<const TensorView> in,
                                 std::span<const TensorView> out) {
  if (!is_16bit_float(in[0].dtype)) cuda::require_f32(in, out);
  const auto& a = ctx.attrs.as<ConvolutionAttrs>();
  const Device dev = ctx.run.device;
  if (out[0].size() == 0) return;
  if (in[0].size() == 0) {
    KILN_CUDA_CHECK(cudaMemsetAsync(out[0].data, 0, out[0].bytes(), cuda::stream_of(ctx)), dev);
    return;
  }
  cudnnHandle_t h = cuda::cudnn_handle(dev.id, cuda::stream_of(ctx));
  ConvSetup s(a, in[1].shape, out[0].shape, in[0].shape, dev, in[0].dtype);
  AlgoChoice c = cached_algo("bwd_filter|" + s.key, [&] {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgos];
    int n = 0;
    KILN_CUDNN_CHECK(
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, s.x.d, s.y.d, s.conv.d, s.w.d, kMaxAlgos, &n, perf), dev);
    return first_ok(perf, n, "backward-weight convolution", s.key);
  });
  cuda::Scratch ws(dev, c.workspace);
  const float one = 1.0f, zero = 0.0f;
  KILN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, s.x.d, in[1].data, s.y.d, in[0].data, s.conv.d,
                                                  static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), ws.get(),
                                                  c.workspace, &zero, s.w.d, out[0].data),
                   dev);
}

// 16-bit calls cuDNN cannot run (no algorithm for the type on this GPU)
// run on float32 copies instead.
template <void (*kNative)(const KernelContext&, std::span<const TensorView>, std::span<const TensorView>)>
void or_widened(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (!is_16bit_float(in[0].dtype)) return kNative(ctx, in, out);
  try {
    kNative(ctx, in, out);
  } catch (const Error& e) {
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr, "kiln: %s in %s on %s: %s; computing on float32 copies\n",
                   std::string(op_def(ctx.op).name).c_str(), std::string(dtype_name(in[0].dtype)).c_str(),
                   ctx.run.device.to_string().c_str(), e.what());
    });
    cuda::widen(ctx, in, out);
  }
}

// ---- Pooling

struct PoolSetup {
  cudnnPoolingDescriptor_t d = nullptr;
  float alpha = 1.0f;  // sum pooling: the average times the window size
  PoolSetup(const PoolingAttrs& a, const Shape& data, Device dev) {
    WindowGeometry g = pooling_geometry(a, data);
    for (int i = 0; i < g.nsp; ++i)
      KILN_CHECK(g.dilate[i] == 1, NotSupported,
                 "Pooling with dilate={} on {}: cuDNN pooling has no dilation; run this op on the CPU",
                 a.dilate.to_mxnet_string(), dev);
    Window w = window_of(g);
    PoolType type = pool_type(a);
    cudnnPoolingMode_t mode = CUDNN_POOLING_MAX_DETERMINISTIC;
    if (type == PoolType::kAvg) {
      mode = pool_count_include_pad(a) ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                       : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    } else if (type == PoolType::kSum) {
      mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
      alpha = static_cast<float>(g.kernel_size());
    }
    KILN_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d), dev);
    KILN_CUDNN_CHECK(cudnnSetPoolingNdDescriptor(d, mode, CUDNN_PROPAGATE_NAN, static_cast<int>(w.kernel.size()),
                                                 w.kernel.data(), w.pad.data(), w.stride.data()),
                     dev);
  }
  ~PoolSetup() { cudnnDestroyPoolingDescriptor(d); }
  PoolSetup(const PoolSetup&) = delete;
  PoolSetup& operator=(const PoolSetup&) = delete;
};

// Every array in one float dtype (16-bit ones through cuDNN's own 16-bit
// pooling, float32 arithmetic inside), or NotSupported.
DType pool_dtype(std::span<const TensorView> in, std::span<const TensorView> out) {
  const DType t = in[0].dtype;
  if (!is_16bit_float(t)) {
    cuda::require_f32(in, out);
    return t;
  }
  for (const TensorView& v : in) KILN_CHECK(v.dtype == t, NotSupported, "mixed dtypes {} and {}", t, v.dtype);
  for (const TensorView& v : out) KILN_CHECK(v.dtype == t, NotSupported, "mixed dtypes {} and {}", t, v.dtype);
  return t;
}

void pooling(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const DType t = pool_dtype(in, out);
  const Device dev = ctx.run.device;
  if (out[0].size() == 0) return;
  const auto& a = ctx.attrs.as<PoolingAttrs>();
  const bool last = channels_last(a.layout);
  PoolSetup p(a, in[0].shape, dev);
  TensorDesc x(dims_of(in[0].shape, last), dev, t, last), y(dims_of(out[0].shape, last), dev, t, last);
  const float zero = 0.0f;
  KILN_CUDNN_CHECK(cudnnPoolingForward(cuda::cudnn_handle(dev.id, cuda::stream_of(ctx)), p.d, &p.alpha, x.d,
                                       in[0].data, &zero, y.d, out[0].data),
                   dev);
}

// (out_grad, data, output) -> d_data
void pooling_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const DType t = pool_dtype(in, out);
  const Device dev = ctx.run.device;
  if (out[0].size() == 0) return;
  if (in[0].size() == 0) {
    KILN_CUDA_CHECK(cudaMemsetAsync(out[0].data, 0, out[0].bytes(), cuda::stream_of(ctx)), dev);
    return;
  }
  const auto& a = ctx.attrs.as<PoolingAttrs>();
  const bool last = channels_last(a.layout);
  PoolSetup p(a, in[1].shape, dev);
  TensorDesc x(dims_of(in[1].shape, last), dev, t, last), y(dims_of(in[2].shape, last), dev, t, last);
  const float zero = 0.0f;
  KILN_CUDNN_CHECK(cudnnPoolingBackward(cuda::cudnn_handle(dev.id, cuda::stream_of(ctx)), p.d, &p.alpha, y.d,
                                        in[2].data, y.d, in[0].data, x.d, in[1].data, &zero, x.d, out[0].data),
                   dev);
}

}  // namespace

#endif  // KILN_HAVE_CUDNN

namespace {

cuda::BatchNormArgs batch_norm_args(const KernelContext& ctx, const BatchNormAttrs& a, const Shape& data) {
  BatchNormDims d = batch_norm_dims(a, data);
  cuda::BatchNormArgs args;
  args.outer = d.outer;
  args.channels = d.channels;
  args.inner = d.inner;
  args.eps = static_cast<float>(a.eps);
  args.momentum = a.momentum;
  args.fix_gamma = a.fix_gamma;
  args.train = ctx.is_train && !a.use_global_stats;
  return args;
}

// Data in float32, float16 or bfloat16 with everything else float32 runs the
// kernels directly; any other mix (16-bit parameters) on float32 copies.
// `data_inputs` inputs and output 0 hold the data (dtype t), the rest float32.
bool batch_norm_native(std::span<const TensorView> in, std::span<const TensorView> out, size_t data_inputs) {
  const DType t = in[0].dtype;
  if (t != DType::kFloat32 && !is_16bit_float(t)) return false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype != (i < data_inputs ? t : DType::kFloat32)) return false;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].dtype != (i == 0 ? t : DType::kFloat32)) return false;
  }
  return true;
}

// (data, gamma, beta, moving_mean, moving_var) -> (out, mean, var)
void batch_norm(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (!batch_norm_native(in, out, 1)) {
    if (is_16bit_float(in[0].dtype)) return cuda::widen(ctx, in, out);
    cuda::require_f32(in, out);
  }
  cuda::BatchNormArgs args = batch_norm_args(ctx, ctx.attrs.as<BatchNormAttrs>(), in[0].shape);
  cuda::Scratch ws(ctx.run.device, cuda::batch_norm_workspace_bytes(args));
  KILN_CUDA_LAUNCH(cuda::launch_batch_norm_forward(in[0].data, in[1].ptr<float>(), in[2].ptr<float>(),
                                                   in[3].ptr<float>(), in[4].ptr<float>(), out[0].data,
                                                   out[1].ptr<float>(), out[2].ptr<float>(),
                                                   static_cast<int>(in[0].dtype), args, ws.get(), cuda::stream_of(ctx)),
                   ctx);
}

// (out_grad, data, gamma, mean, var) -> (d_data, d_gamma, d_beta); out_grad and d_data in data's dtype.
void batch_norm_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (!batch_norm_native(in, out, 2)) {
    if (is_16bit_float(in[1].dtype)) return cuda::widen(ctx, in, out);
    cuda::require_f32(in, out);
  }
  cuda::BatchNormArgs args = batch_norm_args(ctx, ctx.attrs.as<BatchNormAttrs>(), in[1].shape);
  cuda::Scratch ws(ctx.run.device, cuda::batch_norm_workspace_bytes(args));
  KILN_CUDA_LAUNCH(cuda::launch_batch_norm_backward(in[0].data, in[1].data, in[2].ptr<float>(), in[3].ptr<float>(),
                                                    in[4].ptr<float>(), out[0].data, out[1].ptr<float>(),
                                                    out[2].ptr<float>(), static_cast<int>(in[1].dtype), args, ws.get(),
                                                    cuda::stream_of(ctx)),
                   ctx);
}

}  // namespace

void register_cuda_conv_kernels() {
  constexpr DeviceKind k = DeviceKind::kCUDA;
#if defined(KILN_HAVE_CUDNN)
  register_kernel(OpId::kConvolution, k, or_widened<convolution_native>, HalfSupport::kAny);
  register_kernel(OpId::kConvAct, k, or_widened<conv_act>, HalfSupport::kAny);
  register_kernel(OpId::kConvolutionBackwardData, k, or_widened<convolution_backward_data_native>, HalfSupport::kAny);
  register_kernel(OpId::kConvolutionBackwardWeight, k, or_widened<convolution_backward_weight_native>,
                  HalfSupport::kAny);
  register_kernel(OpId::kPooling, k, or_widened<pooling>, HalfSupport::kAny);
  register_kernel(OpId::kPoolingBackward, k, or_widened<pooling_backward>, HalfSupport::kAny);
#endif
  register_kernel(OpId::kBatchNorm, k, batch_norm, HalfSupport::kAny);
  register_kernel(OpId::kBatchNormBackward, k, batch_norm_backward, HalfSupport::kAny);
}

}  // namespace kiln
