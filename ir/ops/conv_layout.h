// Channel-first and channel-last layouts of the conv family's data.
//
// Convolution, its backward ops, _kiln_conv_act and Pooling take MXNet's
// `layout` attribute: absent or channel-first (NCW, NCHW, NCDHW), or
// channel-last (NWC, NHWC, NDHWC). Channel-last data is [batch, spatial...,
// channels], and a channel-last convolution's weight is, as in MXNet,
// [num_filter, k..., C / num_group]. Any other value is refused by
// convolution_geometry/pooling_geometry (ValueError naming both accepted
// forms), which shape inference calls before any kernel runs.
//
//   ConvolutionAttrs c{.kernel = {3, 3}, .pad = {1, 1}, .num_filter = 64, .layout = "NHWC"};
//   WindowGeometry g = convolution_geometry(c, Shape{8, 28, 28, 3});       // g.in == {28, 28}
//   window_out_shape(g, 8, 64, channels_last(c.layout)) == Shape{8, 28, 28, 64}
//   convolution_weight_shape(c, g, 3, true) == Shape{64, 3, 3, 3}
#pragma once

#include <optional>
#include <string>

#include "ir/ops/conv.h"

namespace kiln {

// Whether `layout` (already validated) puts the channels last.
inline bool channels_last(const std::optional<std::string>& layout) {
  return layout && layout->size() >= 3 && layout->back() == 'C';
}

// The channel axis of data with `ndim` axes.
inline int channel_axis(int ndim, bool last) { return last ? ndim - 1 : 1; }

// The number of channels of `data`.
inline int64_t data_channels(const Shape& data, bool last) { return data[channel_axis(data.ndim(), last)]; }

// The output shape of a window op: [batch, channels, out...] or [batch, out..., channels].
Shape window_out_shape(const WindowGeometry& g, int64_t batch, int64_t channels, bool last);

// A convolution's weight shape for data with `channels` channels.
Shape convolution_weight_shape(const ConvolutionAttrs& attrs, const WindowGeometry& g, int64_t channels, bool last);

}  // namespace kiln
