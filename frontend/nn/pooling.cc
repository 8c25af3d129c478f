#include "frontend/nn/pooling.h"

#include "frontend/nd_conv.h"

namespace kiln::nn {

Pooling2D::Pooling2D(Int2 pool_size, Int2 strides, Int2 padding, bool ceil_mode, bool global_pool,
                     const char* pool_type, std::optional<bool> count_include_pad) {
  Int2 stride(strides.h == 0 ? pool_size.h : strides.h, strides.w == 0 ? pool_size.w : strides.w);
  KILN_CHECK(pool_size.h >= 1 && pool_size.w >= 1 && stride.h >= 1 && stride.w >= 1, ValueError,
             "pooling: pool_size ({}, {}) and strides ({}, {}) must be >= 1", pool_size.h, pool_size.w, stride.h,
             stride.w);
  KILN_CHECK(padding.h >= 0 && padding.w >= 0, ValueError, "pooling: padding must be >= 0, got ({}, {})", padding.h,
             padding.w);
  attrs_.kernel = pool_size.shape();
  attrs_.stride = stride.shape();
  attrs_.pad = padding.shape();
  attrs_.pool_type = pool_type;
  attrs_.global_pool = global_pool;
  attrs_.pooling_convention = ceil_mode ? "full" : "valid";
  attrs_.count_include_pad = count_include_pad;
  attrs_.layout = "NCHW";
}

NDArray Pooling2D::forward(const NDArray& x) { return nd::pooling(x, attrs_); }

std::string Pooling2D::to_string() const {
  return fmt::format("{}(size={}, stride={}, padding={}, ceil_mode={}, global_pool={}, pool_type={}, layout=NCHW)",
                     type_name(), attrs_.kernel.to_mxnet_string(), attrs_.stride.to_mxnet_string(),
                     attrs_.pad.to_mxnet_string(), attrs_.pooling_convention == "full" ? "True" : "False",
                     attrs_.global_pool ? "True" : "False", attrs_.pool_type);
}

}  // namespace kiln::nn
