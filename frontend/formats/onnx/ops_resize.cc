// ONNX's Resize (and Upsample, before opset 10) in nearest mode with whole
// scale factors, as Kiln layout ops: each scaled axis gains a length-1 axis
// after it, is broadcast to the factor and merged back, so every element is
// repeated exactly (what nearest sampling gives for whole factors with
// asymmetric coordinates and floor, or half-pixel coordinates and rounding).
// Other modes and fractional factors are NotSupported.
#include <cmath>

#include <fmt/ranges.h>

#include "frontend/formats/onnx/node_context.h"
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

void convert_resize(NodeContext& n) {
  check_nearest(n, true);
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  if (n.opset() < 11) {
    scales = n.known_doubles(1, "scales");
  } else if (n.has_input(3)) {
    sizes = n.known_ints(3, "sizes");
  } else {
    scales = n.known_doubles(2, "scales");
  }
  KILN_CHECK(scales.size() == static_cast<size_t>(n.shape(0).ndim()) || sizes.size() == static_cast<size_t>(n.shape(0).ndim()),
             ValueError, "expected one scale or size per axis of {}", n.shape(0));
  repeat(n, factors(n, n.shape(0), scales, sizes));
}

void convert_upsample(NodeContext& n) {
  check_nearest(n, false);
  std::vector<double> scales = n.opset() < 9 ? n.attr_floats("scales") : n.known_doubles(1, "scales");
  KILN_CHECK(scales.size() == static_cast<size_t>(n.shape(0).ndim()), ValueError, "expected one scale per axis of {}",
             n.shape(0));
  repeat(n, factors(n, n.shape(0), scales, {}));
}

KILN_ONNX_CONVERTER("Resize", convert_resize);
KILN_ONNX_CONVERTER("Upsample", convert_upsample);

}  // namespace
}  // namespace kiln::onnx
