// ONNX's Resize (and Upsample, before opset 10) as Kiln ops.
//
// Nearest mode with whole scale factors: each scaled axis gains a length-1
// axis after it, is broadcast to the factor and merged back, so every element
// is repeated exactly (what nearest sampling gives for whole factors with
// asymmetric coordinates and floor, or half-pixel coordinates and rounding).
//
// Every other case (linear and cubic modes, nearest sampling with fractional
// factors or other coordinate and rounding modes), any scales or sizes:
// resampling one axis is a linear map, so each resized axis is moved last
// and multiplied by a constant [in, out] matrix whose column j holds the
// weights of output j, x being its coordinate in the input under
// coordinate_transformation_mode: linear 1 - r at floor(x) and r at
// floor(x) + 1; cubic the four Keys weights of cubic_coeff_a around floor(x)
// (out-of-range taps dropped and the rest renormalized with
// exclude_outside); nearest a single 1 at x rounded by nearest_mode. Indices
// are clamped to the axis, as ONNX's edge padding gives. Separable, so the
// axes are resampled one after another. Floating data only.
//
// tf_crop_and_resize samples the box `roi` (normalized [starts..., ends...],
// known at import) of each axis; outputs whose coordinate falls outside the
// input take extrapolation_value: their matrix column is 0 and the value is
// added after the product (the weights of every column sum to 1, so a value
// extrapolated along one axis stays that value along the next ones).
//
// Antialiasing is NotSupported.
#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include <fmt/ranges.h>

#include "frontend/formats/onnx/node_context.h"
#include "frontend/nd_init.h"
#include "ir/ops/linalg.h"
#include "ir/ops/matrix.h"

namespace kiln::onnx {
namespace {

// Whole factors per axis from float scales, or from output sizes.
std::vector<int64_t> factors(NodeContext& n, const Shape& x, const std::vector<double>& scales,
                             const std::vector<int64_t>& sizes) {
  std::vector<int64_t> f;
  for (int d = 0; d < x.ndim(); ++d) {
    if (!sizes.empty()) {
      int64_t out = sizes.at(static_cast<size_t>(d));
      if (x[d] == 0 || out % x[d] != 0) n.unsupported(fmt::format("sizes [{}] that are not whole multiples of {}", fmt::join(sizes, ","), x));
      f.push_back(out / x[d]);
    } else {
      double s = scales.at(static_cast<size_t>(d));
      if (s < 1 || std::floor(s) != s) n.unsupported(fmt::format("scales [{}] that are not whole numbers >= 1", fmt::join(scales, ",")));
      f.push_back(static_cast<int64_t>(s));
    }
  }
  return f;
}

void repeat(NodeContext& n, const std::vector<int64_t>& f) {
  const Shape& x = n.shape(0);
  std::vector<int64_t> split, wide, out;
  for (int d = 0; d < x.ndim(); ++d) {
    int64_t k = f[static_cast<size_t>(d)];
    split.push_back(x[d]);
    wide.push_back(x[d]);
    if (k > 1) {
      split.push_back(1);
      wide.push_back(k);
    }
    out.push_back(x[d] * k);
  }
  ir::Entry y = n.input(0);
  if (Shape(out) != x) {
    KILN_CHECK(split.size() <= static_cast<size_t>(Shape::kMaxNdim), NotSupported,
               "scaling {} axes of rank {} needs more than {} dims", split.size() - x.ndim(), x.ndim(), Shape::kMaxNdim);
    y = n.op1(OpId::kReshape, {y}, ReshapeAttrs{.shape = IntTuple(split)});
    y = n.op1(OpId::kBroadcastTo, {y}, BroadcastToAttrs{.shape = Shape(wide)});
    y = n.op1(OpId::kReshape, {y}, ReshapeAttrs{.shape = IntTuple(out)});
  }
  n.set_output(0, y);
}

void check_nearest(NodeContext& n, bool resize) {
  std::string mode = n.attr_string("mode", "nearest");
  if (mode != "nearest") n.unsupported(fmt::format("mode '{}'", mode));
  if (!resize || n.opset() < 11) return;  // Upsample and opset-10 Resize: asymmetric coordinates, floor
  std::string coord = n.attr_string("coordinate_transformation_mode", "half_pixel");
  std::string rounding = n.attr_string("nearest_mode", "round_prefer_floor");
  bool half_pixel = coord == "half_pixel" || coord == "pytorch_half_pixel";
  bool rounds = rounding == "round_prefer_floor" || rounding == "round_prefer_ceil";
  if (!((coord == "asymmetric" && rounding == "floor") || (half_pixel && rounds)))
    n.unsupported(fmt::format("nearest sampling with coordinate_transformation_mode '{}' and nearest_mode '{}'", coord, rounding));
  n.require_attr_int("exclude_outside", 0, "excluded samples");
}

// Output j's coordinate in an input axis of `in` elements scaled by `scale`
// (out = floor(in * scale) elements), as ONNX's Resize defines it.
double source_coordinate(NodeContext& n, const std::string& coord, int64_t j, int64_t in, double scale) {
  const double x = static_cast<double>(j), width = scale * static_cast<double>(in);
  if (coord == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (coord == "pytorch_half_pixel") return width > 1 ? (x + 0.5) / scale - 0.5 : -0.5;
  if (coord == "align_corners") return width > 1 ? x * static_cast<double>(in - 1) / (width - 1) : 0.0;
  if (coord == "asymmetric") return x / scale;
  if (coord == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  n.unsupported(fmt::format("coordinate_transformation_mode '{}'", coord));
}

// How one axis is resampled: mode, nearest rounding, cubic coefficient,
// excluded outside taps; for tf_crop_and_resize the normalized roi
// [starts..., ends...] and the value of outputs outside the input.
struct Sampling {
  std::string mode = "linear";  // linear, cubic, nearest
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  std::vector<double> roi;
  double extrapolation_value = 0.0;
};

// The Keys cubic weights of the taps at floor(x) - 1 .. floor(x) + 2, r = x - floor(x).
std::array<double, 4> cubic_weights(double r, double a) {
  auto near = [&](double d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };       // |d| <= 1
  auto far = [&](double d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };  // 1 < |d| < 2
  return {far(r + 1), near(r), near(1 - r), far(2 - r)};
}

// `y` (of n.type(0)'s dtype) resampled along `axis` from `in` to `out` elements.
ir::Entry resample_axis(NodeContext& n, ir::Entry y, int axis, int64_t out, double scale, const std::string& coord,
                        const Sampling& sampling) {
  const Shape s = n.entry_type(y).shape;
  const int last = s.ndim() - 1;
  const int64_t in = s[axis];
  KILN_CHECK(in > 0, ShapeError, "resizing the empty axis {} of {}", axis, s);
  KILN_CHECK(in <= kMaxImportElements / std::max<int64_t>(out, 1), ValueError, "the {}x{} interpolation matrix of axis {} is too large", in,
             out, axis);
  std::vector<float> w(static_cast<size_t>(in * out), 0.0f), outside(static_cast<size_t>(out), 0.0f);
  bool extrapolates = false;
  auto clamp = [&](double i) { return static_cast<int64_t>(std::clamp(i, 0.0, static_cast<double>(in - 1))); };
  const bool crop = coord == "tf_crop_and_resize";
  for (int64_t j = 0; j < out; ++j) {
    double x;
    if (crop) {
      const size_t rank = sampling.roi.size() / 2;
      const double start = sampling.roi[static_cast<size_t>(axis)], end = sampling.roi[rank + static_cast<size_t>(axis)];
      const double last = static_cast<double>(in - 1);
      x = out > 1 ? start * last + static_cast<double>(j) * (end - start) * last / static_cast<double>(out - 1)
                  : 0.5 * (start + end) * last;
      if (x < 0 || x > last) {
        outside[static_cast<size_t>(j)] = static_cast<float>(sampling.extrapolation_value);
        extrapolates = extrapolates || sampling.extrapolation_value != 0;
        continue;
      }
    } else {
      x = source_coordinate(n, coord, j, in, scale);
    }
    KILN_CHECK(std::isfinite(x), ValueError, "scale {} of axis {} gives no finite coordinates", scale, axis);
    const double lo = std::floor(x), r = x - lo;
    if (sampling.mode == "nearest") {
      double i = sampling.nearest == "floor"              ? lo
                 : sampling.nearest == "ceil"             ? std::ceil(x)
                 : r == 0.5                               ? (sampling.nearest == "round_prefer_ceil" ? lo + 1 : lo)
                                                          : std::round(x);
      w[static_cast<size_t>(clamp(i) * out + j)] = 1.0f;
    } else if (sampling.mode == "cubic") {
      std::array<double, 4> c = cubic_weights(r, sampling.cubic_a);
      double total = 0;
      for (int t = 0; t < 4; ++t) {
        double i = lo - 1 + t;
        if (sampling.exclude_outside && (i < 0 || i > static_cast<double>(in - 1))) c[static_cast<size_t>(t)] = 0;
        total += c[static_cast<size_t>(t)];
      }
      for (int t = 0; t < 4; ++t) {
        double v = c[static_cast<size_t>(t)] / (sampling.exclude_outside && total != 0 ? total : 1.0);
        w[static_cast<size_t>(clamp(lo - 1 + t) * out + j)] += static_cast<float>(v);
      }
    } else {
      w[static_cast<size_t>(clamp(lo) * out + j)] += static_cast<float>(1 - r);
      w[static_cast<size_t>(clamp(lo + 1) * out + j)] += static_cast<float>(r);
    }
  }
  ir::Entry m = n.constant(nd::array(w, Shape{in, out}).astype(n.type(0).dtype));
  std::vector<int64_t> perm(static_cast<size_t>(s.ndim()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(axis)], perm[static_cast<size_t>(last)]);
  if (axis != last) y = n.op1(OpId::kTranspose, {y}, TransposeAttrs{.axes = IntTuple(perm)});
  Shape moved = n.entry_type(y).shape;
  y = reshape_to(n, y, {moved.size() / in, in});
  y = n.op1(OpId::kDot, {y, m}, DotAttrs{});
  if (extrapolates)
    y = n.op1(OpId::kBroadcastAdd, {y, n.constant(nd::array(outside, Shape{1, out}).astype(n.type(0).dtype))});
  std::vector<int64_t> dims(moved.begin(), moved.end());
  dims.back() = out;
  y = reshape_to(n, y, dims);
  if (axis != last) y = n.op1(OpId::kTranspose, {y}, TransposeAttrs{.axes = IntTuple(perm)});
  return y;
}

// Resize/Upsample through interpolation matrices: `scales` or `sizes` (one per axis) give each axis's output length.
void resize_matrix(NodeContext& n, const std::string& coord, const std::vector<double>& scales,
                   const std::vector<int64_t>& sizes, const Sampling& sampling) {
  const Shape& x = n.shape(0);
  if (!is_floating(n.type(0).dtype))
    n.unsupported(fmt::format("{} resizing of {} data", sampling.mode, dtype_name(n.type(0).dtype)));
  ir::Entry y = n.input(0);
  for (int d = 0; d < x.ndim(); ++d) {
    double scale;
    int64_t out;
    if (!sizes.empty()) {
      out = sizes[static_cast<size_t>(d)];
      KILN_CHECK(out > 0 && out <= kMaxImportElements, ValueError, "sizes [{}] has a dim below 1 or above {}",
                 fmt::join(sizes, ","), kMaxImportElements);
      scale = x[d] > 0 ? static_cast<double>(out) / static_cast<double>(x[d]) : 1.0;
    } else {
      scale = scales[static_cast<size_t>(d)];
      KILN_CHECK(scale > 0 && std::isfinite(scale), ValueError, "scales [{}] has a scale that is not positive",
                 fmt::join(scales, ","));
      double extent = 1.0;  // the roi's share of the axis (tf_crop_and_resize)
      if (coord == "tf_crop_and_resize")
        extent = sampling.roi[static_cast<size_t>(x.ndim() + d)] - sampling.roi[static_cast<size_t>(d)];
      double len = std::floor(static_cast<double>(x[d]) * extent * scale);
      KILN_CHECK(len >= 1 && len <= static_cast<double>(kMaxImportElements), ValueError,
                 "scale {} gives axis {} of {} a length of {}", scale, d, x, len);
      out = static_cast<int64_t>(len);
    }
    const bool whole = coord != "tf_crop_and_resize" ||
                       (sampling.roi[static_cast<size_t>(d)] == 0 && sampling.roi[static_cast<size_t>(x.ndim() + d)] == 1);
    if (scale == 1.0 && out == x[d] && whole) continue;
    y = resample_axis(n, y, d, out, scale, coord, sampling);
  }
  n.set_output(0, y);
}

std::vector<double> resize_scales(NodeContext& n, std::vector<int64_t>& sizes) {
  std::vector<double> scales;
  if (n.opset() < 11) {
    scales = n.known_doubles(1, "scales");
  } else if (n.has_input(3)) {
    sizes = n.known_ints(3, "sizes");
  } else {
    scales = n.known_doubles(2, "scales");
  }
  KILN_CHECK(scales.size() == static_cast<size_t>(n.shape(0).ndim()) ||
                 sizes.size() == static_cast<size_t>(n.shape(0).ndim()),
             ValueError, "expected one scale or size per axis of {}", n.shape(0));
  return scales;
}

// Nearest sampling that whole factors repeat exactly (the broadcast path).
bool whole_factor_nearest(NodeContext& n, const std::vector<double>& scales, const std::vector<int64_t>& sizes) {
  if (n.opset() >= 11) {
    std::string coord = n.attr_string("coordinate_transformation_mode", "half_pixel");
    std::string rounding = n.attr_string("nearest_mode", "round_prefer_floor");
    bool half_pixel = coord == "half_pixel" || coord == "pytorch_half_pixel";
    bool rounds = rounding == "round_prefer_floor" || rounding == "round_prefer_ceil";
    if (!((coord == "asymmetric" && rounding == "floor") || (half_pixel && rounds))) return false;
  }
  const Shape& x = n.shape(0);
  for (int d = 0; d < x.ndim(); ++d) {
    if (!sizes.empty()) {
      int64_t out = sizes[static_cast<size_t>(d)];
      if (x[d] == 0 || out % x[d] != 0) return false;
    } else {
      double s = scales[static_cast<size_t>(d)];
      if (s < 1 || std::floor(s) != s) return false;
    }
  }
  return true;
}

void convert_resize(NodeContext& n) {
  const std::string mode = n.attr_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic") n.unsupported(fmt::format("mode '{}'", mode));
  std::vector<int64_t> sizes;
  std::vector<double> scales = resize_scales(n, sizes);
  if (mode == "nearest" && (whole_factor_nearest(n, scales, sizes) || !is_floating(n.type(0).dtype))) {
    check_nearest(n, true);
    repeat(n, factors(n, n.shape(0), scales, sizes));
    return;
  }
  std::string coord = n.opset() < 11 ? "asymmetric" : n.attr_string("coordinate_transformation_mode", "half_pixel");
  Sampling sampling{.mode = mode};
  if (n.opset() >= 11) {
    sampling.nearest = n.attr_string("nearest_mode", "round_prefer_floor");
    sampling.cubic_a = n.attr_float("cubic_coeff_a", -0.75);
    sampling.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
    if (coord == "tf_crop_and_resize") {
      KILN_CHECK(n.has_input(1), ValueError, "coordinate_transformation_mode 'tf_crop_and_resize' needs the roi input");
      sampling.roi = n.known_doubles(1, "roi");
      KILN_CHECK(sampling.roi.size() == static_cast<size_t>(2 * n.shape(0).ndim()), ValueError,
                 "roi has {} values, expected 2 per axis of {}", sampling.roi.size(), n.shape(0));
      sampling.extrapolation_value = n.attr_float("extrapolation_value", 0.0);
    }
  } else if (mode == "nearest") {
    sampling.nearest = "floor";  // opset 10: asymmetric coordinates, floor
  }
  const std::vector<std::string> roundings = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  if (std::find(roundings.begin(), roundings.end(), sampling.nearest) == roundings.end())
    n.unsupported(fmt::format("nearest_mode '{}'", sampling.nearest));
  resize_matrix(n, coord, scales, sizes, sampling);
}

void convert_upsample(NodeContext& n) {
  std::vector<double> scales = n.opset() < 9 ? n.attr_floats("scales") : n.known_doubles(1, "scales");
  KILN_CHECK(scales.size() == static_cast<size_t>(n.shape(0).ndim()), ValueError, "expected one scale per axis of {}",
             n.shape(0));
  const std::string mode = n.attr_string("mode", "nearest");
  if (mode == "linear") return resize_matrix(n, "asymmetric", scales, {}, Sampling{});
  if (mode == "nearest" && !whole_factor_nearest(n, scales, {}) && is_floating(n.type(0).dtype))
    return resize_matrix(n, "asymmetric", scales, {}, Sampling{.mode = "nearest", .nearest = "floor"});
  check_nearest(n, false);
  repeat(n, factors(n, n.shape(0), scales, {}));
}

KILN_ONNX_CONVERTER("Resize", convert_resize);
KILN_ONNX_CONVERTER("Upsample", convert_upsample);

}  // namespace
}  // namespace kiln::onnx
