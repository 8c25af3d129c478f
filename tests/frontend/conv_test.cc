// Convolution, Pooling and BatchNorm (forward and backward ops) against
// direct loops over double values, on cpu(0) and cpu(1); attribute parsing in
// MXNet's string form; errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/ops/conv.h"

namespace kiln {
namespace {

using Vec = std::vector<double>;

// ---- references (2-D, NCHW)

struct ConvCase {
  int64_t n, c, h, w, o;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw, groups;
  bool bias;
  std::string name() const {
    return fmt::format("x[{},{},{},{}] o={} k=({},{}) s=({},{}) p=({},{}) d=({},{}) g={} bias={}", n, c, h, w, o, kh,
                       kw, sh, sw, ph, pw, dh, dw, groups, bias);
  }
  int64_t oh() const { return (h + 2 * ph - (kh - 1) * dh - 1) / sh + 1; }
  int64_t ow() const { return (w + 2 * pw - (kw - 1) * dw - 1) / sw + 1; }
  ConvolutionAttrs attrs() const {
    return {.kernel = {kh, kw},
            .stride = {sh, sw},
            .dilate = {dh, dw},
            .pad = {ph, pw},
            .num_filter = static_cast<int>(o),
            .num_group = static_cast<int>(groups),
            .no_bias = !bias};
  }
};

// Calls fn(n, oc, oy, ox, ic, iy, ix, weight index) for every product the convolution adds.
template <typename Fn>
void for_each_tap(const ConvCase& k, Fn&& fn) {
  const int64_t cg = k.c / k.groups, og = k.o / k.groups;
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t oc = 0; oc < k.o; ++oc)
      for (int64_t oy = 0; oy < k.oh(); ++oy)
        for (int64_t ox = 0; ox < k.ow(); ++ox)
          for (int64_t icg = 0; icg < cg; ++icg)
            for (int64_t ky = 0; ky < k.kh; ++ky)
              for (int64_t kx = 0; kx < k.kw; ++kx) {
                int64_t iy = oy * k.sh - k.ph + ky * k.dh, ix = ox * k.sw - k.pw + kx * k.dw;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                int64_t ic = (oc / og) * cg + icg;
                fn(n, oc, oy, ox, ic, iy, ix, ((oc * cg + icg) * k.kh + ky) * k.kw + kx);
              }
}

Vec conv_ref(const ConvCase& k, const Vec& x, const Vec& w, const Vec& b) {
  Vec y(k.n * k.o * k.oh() * k.ow(), 0.0);
  auto yi = [&](int64_t n, int64_t oc, int64_t oy, int64_t ox) { return ((n * k.o + oc) * k.oh() + oy) * k.ow() + ox; };
  for_each_tap(k, [&](int64_t n, int64_t oc, int64_t oy, int64_t ox, int64_t ic, int64_t iy, int64_t ix, int64_t wi) {
    y[yi(n, oc, oy, ox)] += x[((n * k.c + ic) * k.h + iy) * k.w + ix] * w[wi];
  });
  if (k.bias)
    for (int64_t i = 0; i < static_cast<int64_t>(y.size()); ++i) y[i] += b[(i / (k.oh() * k.ow())) % k.o];
  return y;
}

void expect_near(const NDArray& got, const Vec& want, double tol, const std::string& what) {
  Vec g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << what << " at " << i;
}

std::vector<ConvCase> conv_cases() {
  return {
      {1, 3, 5, 7, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, true},     // batch 1, odd image, stride 2, pad 1
      {2, 4, 5, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, true},     // groups 2
      {2, 4, 9, 8, 4, 3, 3, 1, 1, 2, 2, 2, 2, 1, false},    // dilate 2, no bias
      {2, 3, 6, 5, 5, 1, 1, 1, 1, 0, 0, 1, 1, 1, true},     // 1x1
      {1, 2, 5, 7, 3, 2, 3, 1, 2, 0, 1, 1, 1, 1, true},     // asymmetric kernel and stride
      {2, 4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4, true},     // depthwise
      {3, 16, 12, 11, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},  // big enough for blocked layouts
      {2, 1, 28, 28, 8, 5, 5, 1, 1, 2, 2, 1, 1, 1, true},    // first layer: one channel
      {2, 20, 13, 13, 50, 5, 5, 1, 1, 0, 0, 1, 1, 1, true},  // 20 channels: nhwc rather than padded blocks
      {2, 24, 9, 9, 8, 3, 3, 2, 2, 1, 1, 1, 1, 2, false},    // nhwc, grouped and strided
  };
}

class Conv : public ::testing::TestWithParam<int> {
 protected:
  Device dev() const { return Device::cpu(GetParam()); }
  NDArray normal(const Shape& s) { return nd::random::normal(s, 0, 1, {.device = dev()}); }
};

TEST_P(Conv, ConvolutionMatchesDirectLoops) {
  nd::random::seed(1);
  for (const ConvCase& k : conv_cases()) {
    NDArray x = normal({k.n, k.c, k.h, k.w});
    NDArray w = normal({k.o, k.c / k.groups, k.kh, k.kw});
    NDArray b = k.bias ? normal({k.o}) : NDArray();
    NDArray y = nd::convolution(x, w, b, k.attrs());
    ASSERT_EQ(y.shape(), (Shape{k.n, k.o, k.oh(), k.ow()})) << k.name();
    EXPECT_EQ(y.device(), dev());
    Vec bv = k.bias ? b.to_vector<double>() : Vec{};
    expect_near(y, conv_ref(k, x.to_vector<double>(), w.to_vector<double>(), bv), 1e-4, k.name());
  }
}

TEST_P(Conv, ConvolutionKernelAndFiltersFromWeight) {
  nd::random::seed(2);
  NDArray x = normal({2, 3, 6, 6}), w = normal({5, 3, 3, 3});
  ConvCase k{2, 3, 6, 6, 5, 3, 3, 1, 1, 0, 0, 1, 1, 1, false};
  NDArray y = nd::convolution(x, w, NDArray());
  expect_near(y, conv_ref(k, x.to_vector<double>(), w.to_vector<double>(), {}), 1e-4, "defaults");
}

// 1-D and 3-D convolutions equal 2-D ones with a unit axis.
TEST_P(Conv, Convolution1DAnd3DMatch2D) {
  nd::random::seed(3);
  NDArray x = normal({2, 4, 9}), w = normal({6, 2, 3}), b = normal({6});
  NDArray y1 = nd::convolution(x, w, b, {.stride = {2}, .pad = {1}, .num_group = 2});
  NDArray y2 = nd::convolution(x.reshape({2, 4, 1, 9}), w.reshape({6, 2, 1, 3}), b,
                               {.stride = {1, 2}, .pad = {0, 1}, .num_group = 2});
  expect_near(y1, y2.to_vector<double>(), 1e-5, "1-D");
  NDArray x3 = normal({1, 3, 4, 5, 6}), w3 = normal({4, 3, 3, 3, 3});
  NDArray y3 = nd::convolution(x3, w3, NDArray(), {.pad = {1, 1, 1}});
  ASSERT_EQ(y3.shape(), (Shape{1, 4, 4, 5, 6}));
  // Depth-1 kernel over a depth-1 input is a 2-D convolution.
  NDArray x4 = normal({2, 3, 1, 5, 6}), w4 = normal({4, 3, 1, 3, 3});
  NDArray y4 = nd::convolution(x4, w4, NDArray(), {.pad = {0, 1, 1}});
  NDArray y5 = nd::convolution(x4.reshape({2, 3, 5, 6}), w4.reshape({4, 3, 3, 3}), NDArray(), {.pad = {1, 1}});
  expect_near(y4, y5.to_vector<double>(), 1e-5, "3-D");
}

TEST_P(Conv, ConvolutionBackwardOpsMatchLoops) {
  nd::random::seed(4);
  for (const ConvCase& k : conv_cases()) {
    NDArray x = normal({k.n, k.c, k.h, k.w});
    NDArray w = normal({k.o, k.c / k.groups, k.kh, k.kw});
    NDArray dy = normal({k.n, k.o, k.oh(), k.ow()});
    ConvolutionBackwardDataAttrs bd;
    static_cast<ConvolutionAttrs&>(bd) = k.attrs();
    bd.data_shape = x.shape();
    NDArray dx = invoke1(OpId::kConvolutionBackwardData, {dy, w}, OpAttrs::make(bd));
    NDArray dw = invoke1(OpId::kConvolutionBackwardWeight, {dy, x}, OpAttrs::make(k.attrs()));
    Vec xv = x.to_vector<double>(), wv = w.to_vector<double>(), dyv = dy.to_vector<double>();
    Vec dx_want(xv.size(), 0.0), dw_want(wv.size(), 0.0);
    for_each_tap(k, [&](int64_t n, int64_t oc, int64_t oy, int64_t ox, int64_t ic, int64_t iy, int64_t ix, int64_t wi) {
      double g = dyv[((n * k.o + oc) * k.oh() + oy) * k.ow() + ox];
      int64_t xi = ((n * k.c + ic) * k.h + iy) * k.w + ix;
      dx_want[xi] += g * wv[wi];
      dw_want[wi] += g * xv[xi];
    });
    // 3x3 stride-1 data and weight gradients run as Winograd F(4x4) (backends/cpu/conv_winograd.h), whose
    // rounding error is about 6x the direct convolution's: 1e-4 is exceeded at 32 channels of N(0, 1)
    // products, and by the weight gradient's sum of 3 x 12 x 11 of them (1.05e-4 at 16 -> 32 channels).
    expect_near(dx, dx_want, 3e-4, "d_data " + k.name());
    expect_near(dw, dw_want, 3e-4, "d_weight " + k.name());
  }
}

// ---- pooling

struct PoolCase {
  std::string type, convention;
  int64_t k, s, p;
  bool include_pad = true, global = false;
};

// MXNet's native pooling on [n, c, h, w]: windows clipped to the input; avg
// divides by the window inside the padded input (or inside the input when
// padding is excluded).
Vec pool_ref(const PoolCase& pc, const Vec& x, int64_t n, int64_t c, int64_t h, int64_t w, int64_t* oh_out,
             int64_t* ow_out, const Vec* dy = nullptr, Vec* dx = nullptr) {
  int64_t kh = pc.global ? h : pc.k, kw = pc.global ? w : pc.k;
  int64_t s = pc.global ? 1 : pc.s, p = pc.global ? 0 : pc.p;
  auto out_len = [&](int64_t in, int64_t k) {
    int64_t steps = in + 2 * p - k;
    return 1 + (pc.convention == "full" ? (steps + s - 1) / s : steps / s);
  };
  int64_t oh = out_len(h, kh), ow = out_len(w, kw);
  *oh_out = oh;
  *ow_out = ow;
  Vec y(n * c * oh * ow);
  if (dx) dx->assign(x.size(), 0.0);
  for (int64_t q = 0; q < n * c; ++q)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t ys = oy * s - p, xs = ox * s - p;
        int64_t ye = std::min(ys + kh, h + p), xe = std::min(xs + kw, w + p);
        double pool_size = static_cast<double>((ye - ys) * (xe - xs));
        int64_t ys0 = std::max<int64_t>(ys, 0), xs0 = std::max<int64_t>(xs, 0);
        int64_t ye0 = std::min(ye, h), xe0 = std::min(xe, w);
        if (!pc.include_pad) pool_size = static_cast<double>((ye0 - ys0) * (xe0 - xs0));
        double acc = pc.type == "max" ? -std::numeric_limits<double>::infinity() : 0.0;
        int64_t arg = -1;
        for (int64_t iy = ys0; iy < ye0; ++iy)
          for (int64_t ix = xs0; ix < xe0; ++ix) {
            int64_t i = (q * h + iy) * w + ix;
            if (pc.type == "max") {
              if (x[i] > acc) acc = x[i], arg = i;
            } else {
              acc += x[i];
            }
          }
        int64_t o = (q * oh + oy) * ow + ox;
        double scale = pc.type == "avg" ? 1.0 / pool_size : 1.0;
        y[o] = pc.type == "max" ? acc : acc * scale;
        if (!dx) continue;
        if (pc.type == "max") {
          (*dx)[arg] += (*dy)[o];
        } else {
          for (int64_t iy = ys0; iy < ye0; ++iy)
            for (int64_t ix = xs0; ix < xe0; ++ix) (*dx)[(q * h + iy) * w + ix] += (*dy)[o] * scale;
        }
      }
  return y;
}

PoolingAttrs pool_attrs(const PoolCase& pc) {
  PoolingAttrs a;
  a.pool_type = pc.type;
  a.pooling_convention = pc.convention;
  a.global_pool = pc.global;
  if (!pc.global) {
    a.kernel = {pc.k, pc.k};
    a.stride = {pc.s, pc.s};
    a.pad = {pc.p, pc.p};
  }
  if (!pc.include_pad) a.count_include_pad = false;
  return a;
}

std::vector<PoolCase> pool_cases() {
  std::vector<PoolCase> cases;
  for (std::string type : {"max", "avg", "sum"})
    for (std::string conv : {"valid", "full"})
      for (bool include : {true, false}) {
        if (type != "avg" && !include) continue;
        for (auto [k, s, p] : {std::tuple{3, 2, 1}, std::tuple{2, 2, 0}, std::tuple{3, 1, 1}, std::tuple{2, 3, 0}})
          cases.push_back({type, conv, k, s, p, include, false});
      }
  for (std::string type : {"max", "avg", "sum"}) cases.push_back({type, "valid", 0, 0, 0, true, true});
  return cases;
}

std::string pool_name(const PoolCase& pc) {
  return fmt::format("{} {} k={} s={} p={} include_pad={} global={}", pc.type, pc.convention, pc.k, pc.s, pc.p,
                     pc.include_pad, pc.global);
}

// Distinct values (a shuffled ramp) so max pooling has no ties.
NDArray distinct_values(const Shape& s, Device dev, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(s.size()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.1f - 3.0f;
  uint64_t state = seed;
  for (size_t i = v.size(); i > 1; --i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(v[i - 1], v[(state >> 33) % i]);
  }
  return nd::array(v, s, dev);
}

TEST_P(Conv, PoolingForwardAndBackwardMatchLoops) {
  nd::random::seed(5);
  const int64_t n = 2, c = 3, h = 5, w = 7;
  for (const PoolCase& pc : pool_cases()) {
    NDArray x = distinct_values({n, c, h, w}, dev(), 7);
    NDArray y = nd::pooling(x, pool_attrs(pc));
    int64_t oh = 0, ow = 0;
    Vec xv = x.to_vector<double>();
    pool_ref(pc, xv, n, c, h, w, &oh, &ow);
    ASSERT_EQ(y.shape(), (Shape{n, c, oh, ow})) << pool_name(pc);
    NDArray dy = normal(y.shape());
    Vec dyv = dy.to_vector<double>(), dx_want;
    Vec y_want = pool_ref(pc, xv, n, c, h, w, &oh, &ow, &dyv, &dx_want);
    expect_near(y, y_want, 1e-5, pool_name(pc));
    NDArray dx = invoke1(OpId::kPoolingBackward, {dy, x, y}, OpAttrs::make(pool_attrs(pc)));
    expect_near(dx, dx_want, 1e-5, "backward " + pool_name(pc));
  }
}

TEST_P(Conv, Pooling1DAnd3D) {
  NDArray x = distinct_values({2, 3, 9}, dev(), 3);
  NDArray y = nd::pooling(x, {.kernel = {3}, .pool_type = "max", .stride = {2}});
  NDArray y2 = nd::pooling(x.reshape({2, 3, 1, 9}), {.kernel = {1, 3}, .pool_type = "max", .stride = {1, 2}});
  expect_near(y, y2.to_vector<double>(), 0, "1-D");
  NDArray x3 = distinct_values({1, 2, 4, 4, 4}, dev(), 4);
  NDArray y3 = nd::pooling(x3, {.kernel = {2, 2, 2}, .pool_type = "avg", .stride = {2, 2, 2}});
  ASSERT_EQ(y3.shape(), (Shape{1, 2, 2, 2, 2}));
  Vec xv = x3.to_vector<double>();
  double first = 0;
  for (int z = 0; z < 2; ++z)
    for (int yy = 0; yy < 2; ++yy)
      for (int xx = 0; xx < 2; ++xx) first += xv[(z * 4 + yy) * 4 + xx] / 8;
  EXPECT_NEAR(y3.to_vector<double>()[0], first, 1e-5);
}

// Dilated max pooling on [n, c, in...] (1 to 3 spatial axes, one k/s/p/d for
// all): taps in the padding skipped, the gradient to the first maximum in
// row-major tap order.
struct DilatedCase {
  Shape in;  // [n, c, spatial...]
  int64_t k, s, p, d;
  bool full;
  std::string name() const { return fmt::format("x{} k={} s={} p={} d={} full={}", in, k, s, p, d, full); }
  PoolingAttrs attrs() const {
    const int nsp = in.ndim() - 2;
    std::vector<int64_t> kk(static_cast<size_t>(nsp), k), ss(kk.size(), s), pp(kk.size(), p), dd(kk.size(), d);
    return {.kernel = Shape(kk), .pooling_convention = full ? "full" : "valid", .stride = Shape(ss), .pad = Shape(pp),
            .dilate = Shape(dd)};
  }
};

Vec dilated_max_ref(const DilatedCase& dc, const Vec& x, Shape* out_shape, const Vec* dy = nullptr, Vec* dx = nullptr) {
  const int nsp = dc.in.ndim() - 2;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, p{0, 0, 0}, d{1, 1, 1};
  std::vector<int64_t> dims{dc.in[0], dc.in[1]};
  for (int i = 0; i < nsp; ++i) {
    const int j = 3 - nsp + i;
    in[j] = dc.in[2 + i];
    k[j] = dc.k, s[j] = dc.s, p[j] = dc.p, d[j] = dc.d;
    const int64_t steps = in[j] + 2 * dc.p - (dc.k - 1) * dc.d - 1;
    out[j] = 1 + (dc.full ? (steps + dc.s - 1) / dc.s : steps / dc.s);
    dims.push_back(out[j]);
  }
  *out_shape = Shape(dims);
  const int64_t planes = dc.in[0] * dc.in[1], plane_in = in[0] * in[1] * in[2], plane_out = out[0] * out[1] * out[2];
  Vec y(static_cast<size_t>(planes * plane_out));
  if (dx) dx->assign(x.size(), 0.0);
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t o = 0; o < plane_out; ++o) {
      const int64_t o0 = o / (out[1] * out[2]), o1 = o / out[2] % out[1], o2 = o % out[2];
      double best = -std::numeric_limits<float>::max();
      int64_t arg = -1;
      for (int64_t t = 0; t < k[0] * k[1] * k[2]; ++t) {
        const int64_t i0 = o0 * s[0] - p[0] + t / (k[1] * k[2]) * d[0];
        const int64_t i1 = o1 * s[1] - p[1] + t / k[2] % k[1] * d[1];
        const int64_t i2 = o2 * s[2] - p[2] + t % k[2] * d[2];
        if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
        const int64_t at = q * plane_in + (i0 * in[1] + i1) * in[2] + i2;
        if (arg < 0 || x[static_cast<size_t>(at)] > best) best = x[static_cast<size_t>(at)], arg = at;
      }
      y[static_cast<size_t>(q * plane_out + o)] = best;
      if (dx && arg >= 0) (*dx)[static_cast<size_t>(arg)] += (*dy)[static_cast<size_t>(q * plane_out + o)];
    }
  return y;
}

TEST_P(Conv, DilatedMaxPoolingMatchesLoopsAndFiniteDifferences) {
  nd::random::seed(11);
  const std::vector<DilatedCase> cases{
      {{2, 3, 17}, 3, 2, 2, 3, false},    {{2, 3, 16}, 2, 3, 1, 4, true},      {{1, 2, 9, 11}, 3, 1, 2, 2, false},
      {{2, 2, 10, 9}, 2, 2, 1, 3, true},  {{1, 2, 7, 8, 9}, 2, 2, 1, 2, false}, {{1, 1, 5, 6, 7}, 3, 1, 2, 2, true},
      {{1, 1, 6, 6}, 2, 1, 0, 1, false},  // dilate 1 spelled out: the ordinary path
  };
  for (const DilatedCase& dc : cases) {
    NDArray x = distinct_values(dc.in, dev(), 9);
    Shape want_shape;
    Vec xv = x.to_vector<double>();
    NDArray y = nd::pooling(x, dc.attrs());
    dilated_max_ref(dc, xv, &want_shape);
    ASSERT_EQ(y.shape(), want_shape) << dc.name();
    NDArray dy = normal(y.shape());
    Vec dyv = dy.to_vector<double>(), dx_want;
    expect_near(y, dilated_max_ref(dc, xv, &want_shape, &dyv, &dx_want), 0, dc.name());
    NDArray dx = invoke1(OpId::kPoolingBackward, {dy, x, y}, OpAttrs::make(dc.attrs()));
    expect_near(dx, dx_want, 1e-5, "backward " + dc.name());
    // Finite differences of sum(y * dy) at a few inputs (values are 0.1 apart: no ties within eps).
    const Vec dxv = dx.to_vector<double>();
    auto objective = [&](const Vec& xs) {
      NDArray yy = nd::pooling(nd::array(std::vector<float>(xs.begin(), xs.end()), dc.in, dev()), dc.attrs());
      Vec yv = yy.to_vector<double>();
      double f = 0;
      for (size_t i = 0; i < yv.size(); ++i) f += yv[i] * dyv[i];
      return f;
    };
    for (size_t i = 0; i < xv.size(); i += std::max<size_t>(1, xv.size() / 7)) {
      const double eps = 0.01;
      Vec plus = xv, minus = xv;
      plus[i] += eps;
      minus[i] -= eps;
      EXPECT_NEAR((objective(plus) - objective(minus)) / (2 * eps), dxv[i], 1e-3) << dc.name() << " input " << i;
    }
  }
  // 16-bit data: the same windows, each result rounded once.
  const DilatedCase dc{{1, 2, 9, 11}, 3, 2, 1, 2, true};
  NDArray x = distinct_values(dc.in, dev(), 9).astype(DType::kBfloat16);
  Shape want_shape;
  expect_near(nd::pooling(x, dc.attrs()), dilated_max_ref(dc, x.to_vector<double>(), &want_shape), 0, "bfloat16");
}

// ---- batch norm

struct NormRef {
  Vec y, mean, var;
};

// data [n, c, r] (r: everything after the channel axis).
NormRef batch_norm_ref(const Vec& x, int64_t n, int64_t c, int64_t r, const Vec& gamma, const Vec& beta,
                       const Vec* moving_mean, const Vec* moving_var, double eps, bool fix_gamma) {
  NormRef out{Vec(x.size()), Vec(c), Vec(c)};
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    if (moving_mean) {
      mean = (*moving_mean)[ch];
      var = (*moving_var)[ch];
    } else {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < r; ++j) mean += x[(i * c + ch) * r + j];
      mean /= static_cast<double>(n * r);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < r; ++j) var += std::pow(x[(i * c + ch) * r + j] - mean, 2);
      var /= static_cast<double>(n * r);
    }
    out.mean[ch] = mean;
    out.var[ch] = var;
    double g = fix_gamma ? 1.0 : gamma[ch];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < r; ++j) {
        int64_t k = (i * c + ch) * r + j;
        out.y[k] = (x[k] - mean) / std::sqrt(var + eps) * g + beta[ch];
      }
  }
  return out;
}

TEST_P(Conv, BatchNormTrainUsesBatchStatsAndUpdatesMovingStats) {
  nd::random::seed(6);
  for (bool fix_gamma : {true, false}) {
    NDArray x = nd::random::normal({2, 3, 5, 7}, 1.5, 2.0, {.device = dev()});
    NDArray gamma = normal({3}), beta = normal({3});
    NDArray mm = normal({3}), mv = nd::random::uniform({3}, 0.5, 2.0, {.device = dev()});
    Vec mm0 = mm.to_vector<double>(), mv0 = mv.to_vector<double>();
    BatchNormAttrs a{.eps = 1e-3, .momentum = 0.8f, .fix_gamma = fix_gamma};
    std::vector<NDArray> outs;
    {
      autograd::TrainMode train;
      outs = nd::batch_norm_all(x, gamma, beta, mm, mv, a);
    }
    NormRef want = batch_norm_ref(x.to_vector<double>(), 2, 3, 35, gamma.to_vector<double>(),
                                  beta.to_vector<double>(), nullptr, nullptr, 1e-3, fix_gamma);
    std::string what = fmt::format("fix_gamma={}", fix_gamma);
    expect_near(outs[0], want.y, 1e-4, what);
    expect_near(outs[1], want.mean, 1e-5, what);
    expect_near(outs[2], want.var, 1e-4, what);
    Vec mm_want(3), mv_want(3);
    for (int ch = 0; ch < 3; ++ch) {
      mm_want[ch] = mm0[ch] * 0.8 + want.mean[ch] * 0.2;
      mv_want[ch] = mv0[ch] * 0.8 + want.var[ch] * 0.2;
    }
    expect_near(mm, mm_want, 1e-5, "moving_mean " + what);
    expect_near(mv, mv_want, 1e-5, "moving_var " + what);
  }
}

TEST_P(Conv, BatchNormPredictUsesMovingStats) {
  nd::random::seed(7);
  NDArray x = normal({2, 3, 5, 7}), gamma = normal({3}), beta = normal({3});
  NDArray mm = normal({3}), mv = nd::random::uniform({3}, 0.5, 2.0, {.device = dev()});
  Vec mm0 = mm.to_vector<double>(), mv0 = mv.to_vector<double>();
  for (bool global_in_train : {false, true}) {
    BatchNormAttrs a{.fix_gamma = false, .use_global_stats = global_in_train};
    std::vector<NDArray> outs;
    if (global_in_train) {
      autograd::TrainMode train;
      outs = nd::batch_norm_all(x, gamma, beta, mm, mv, a);
    } else {
      outs = nd::batch_norm_all(x, gamma, beta, mm, mv, a);  // predict mode is the default
    }
    NormRef want = batch_norm_ref(x.to_vector<double>(), 2, 3, 35, gamma.to_vector<double>(),
                                  beta.to_vector<double>(), &mm0, &mv0, 1e-3, false);
    expect_near(outs[0], want.y, 1e-4, "predict");
    expect_near(outs[1], mm0, 0, "mean output");
    expect_near(outs[2], mv0, 0, "var output");
    expect_near(mm, mm0, 0, "moving_mean unchanged");
    expect_near(mv, mv0, 0, "moving_var unchanged");
  }
}

TEST_P(Conv, BatchNormOtherAxes) {
  nd::random::seed(8);
  // Channel-last [n, h, w, c] and a plain [n, c] matrix.
  NDArray x = normal({2, 3, 4, 5}), gamma = normal({5}), beta = normal({5});
  NDArray mm = nd::zeros({5}, {.device = dev()}), mv = nd::ones({5}, {.device = dev()});
  autograd::TrainMode train;
  NDArray y = nd::batch_norm(x, gamma, beta, mm, mv, {.fix_gamma = false, .axis = -1});
  NormRef want = batch_norm_ref(x.to_vector<double>(), 24, 5, 1, gamma.to_vector<double>(), beta.to_vector<double>(),
                                nullptr, nullptr, 1e-3, false);
  expect_near(y, want.y, 1e-4, "axis -1");
  NDArray m = normal({6, 5});
  NDArray y2 = nd::batch_norm(m, gamma, beta, mm, mv, {.fix_gamma = false});
  NormRef want2 = batch_norm_ref(m.to_vector<double>(), 6, 5, 1, gamma.to_vector<double>(), beta.to_vector<double>(),
                                 nullptr, nullptr, 1e-3, false);
  expect_near(y2, want2.y, 1e-4, "2-D");
}

// d_data, d_gamma, d_beta of the backward op against the closed forms.
TEST_P(Conv, BatchNormBackwardMatchesClosedForm) {
  nd::random::seed(9);
  const int64_t n = 3, c = 4, r = 6;
  for (bool train : {true, false})
    for (bool fix_gamma : {false, true}) {
      NDArray x = normal({n, c, 2, 3}), dy = normal({n, c, 2, 3}), gamma = normal({c});
      NDArray mean = normal({c}), var = nd::random::uniform({c}, 0.5, 2.0, {.device = dev()});
      BatchNormAttrs a{.eps = 1e-3, .fix_gamma = fix_gamma};
      if (train) {
        // The backward op reads the statistics the forward computed.
        autograd::TrainMode tm;
        NDArray mm = nd::zeros({c}, {.device = dev()}), mv = nd::ones({c}, {.device = dev()});
        auto outs = nd::batch_norm_all(x, gamma, gamma, mm, mv, a);
        mean = outs[1];
        var = outs[2];
      }
      std::vector<NDArray> g;
      {
        autograd::Pause pause(train);
        g = invoke(OpId::kBatchNormBackward, {dy, x, gamma, mean, var}, OpAttrs::make(a));
      }
      Vec xv = x.to_vector<double>(), dyv = dy.to_vector<double>(), gv = gamma.to_vector<double>();
      Vec mv = mean.to_vector<double>(), vv = var.to_vector<double>();
      Vec dx(xv.size()), dgamma(c), dbeta(c);
      for (int64_t ch = 0; ch < c; ++ch) {
        double inv = 1 / std::sqrt(vv[ch] + 1e-3), gm = fix_gamma ? 1.0 : gv[ch];
        double sum_dy = 0, sum_dy_xhat = 0;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < r; ++j) {
            int64_t k = (i * c + ch) * r + j;
            sum_dy += dyv[k];
            sum_dy_xhat += dyv[k] * (xv[k] - mv[ch]) * inv;
          }
        dbeta[ch] = sum_dy;
        dgamma[ch] = fix_gamma ? 0.0 : sum_dy_xhat;
        double m = static_cast<double>(n * r);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < r; ++j) {
            int64_t k = (i * c + ch) * r + j;
            double xhat = (xv[k] - mv[ch]) * inv;
            dx[k] = train ? gm * inv * (dyv[k] - sum_dy / m - xhat * sum_dy_xhat / m) : gm * inv * dyv[k];
          }
      }
      std::string what = fmt::format("train={} fix_gamma={}", train, fix_gamma);
      expect_near(g[0], dx, 1e-4, "d_data " + what);
      expect_near(g[1], dgamma, 1e-4, "d_gamma " + what);
      expect_near(g[2], dbeta, 1e-4, "d_beta " + what);
    }
}

INSTANTIATE_TEST_SUITE_P(Devices, Conv, ::testing::Values(0, 1),
                         [](const auto& info) { return fmt::format("cpu{}", info.param); });

// ---- attributes and errors

TEST(ConvAttrs, ParseMXNetStrings) {
  const OpDef& conv = op_def(OpId::kConvolution);
  OpAttrs a = conv.parse_attrs("Convolution", {{"kernel", "(3, 3)"},
                                               {"num_filter", "64"},
                                               {"pad", "(1, 1)"},
                                               {"no_bias", "True"},
                                               {"workspace", "1024"},
                                               {"cudnn_tune", "off"},
                                               {"cudnn_off", "False"},
                                               {"layout", "NCHW"}});
  const auto& c = a.as<ConvolutionAttrs>();
  EXPECT_EQ(c.kernel, (Shape{3, 3}));
  EXPECT_EQ(c.pad, (Shape{1, 1}));
  EXPECT_EQ(c.stride, Shape{});
  EXPECT_EQ(c.num_filter, 64);
  EXPECT_TRUE(c.no_bias);
  EXPECT_EQ(c.layout, std::optional<std::string>("NCHW"));
  EXPECT_EQ(a.to_strings().at("kernel"), "(3, 3)");
  EXPECT_EQ(OpAttrs::parse<ConvolutionAttrs>("Convolution", a.to_strings()), a);

  OpAttrs p = op_def(OpId::kPooling)
                  .parse_attrs("Pooling", {{"kernel", "(3, 3)"},
                                           {"pool_type", "avg"},
                                           {"stride", "(2, 2)"},
                                           {"pooling_convention", "full"},
                                           {"count_include_pad", "False"},
                                           {"global_pool", "False"},
                                           {"cudnn_off", "False"}});
  EXPECT_EQ(p.as<PoolingAttrs>().count_include_pad, std::optional<bool>(false));
  EXPECT_EQ(p.as<PoolingAttrs>().pooling_convention, "full");

  OpAttrs b = op_def(OpId::kBatchNorm).parse_attrs("BatchNorm", {{"eps", "1e-05"}, {"momentum", "0.9"}});
  EXPECT_TRUE(b.as<BatchNormAttrs>().fix_gamma);  // MXNet's default
  EXPECT_DOUBLE_EQ(b.as<BatchNormAttrs>().eps, 1e-5);
  EXPECT_DOUBLE_EQ(BatchNormAttrs{}.eps, 1e-3);
  EXPECT_THROW(op_def(OpId::kBatchNorm).parse_attrs("BatchNorm", {{"epsilon", "1"}}), ValueError);
  EXPECT_THROW(conv.parse_attrs("Convolution", {{"kernel", "(3, 3)"}}), ValueError);  // num_filter missing
}

template <typename E>
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception of the expected type";
  return "";
}

TEST(ConvErrors, ShapesDtypesAndAttributes) {
  NDArray x = nd::zeros({2, 3, 5, 7});
  std::string msg = error_of<ShapeError>([&] {
    nd::convolution(x, nd::zeros({8, 2, 3, 3}), NDArray(), {.kernel = {3, 3}, .num_filter = 8});
  });
  EXPECT_NE(msg.find("Convolution"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[8,2,3,3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[8,3,3,3]"), std::string::npos) << msg;
  msg = error_of<ShapeError>([&] { nd::convolution(x, nd::zeros({8, 3, 7, 7}), NDArray()); });
  EXPECT_NE(msg.find("larger than the input 5 padded to 5"), std::string::npos) << msg;
  EXPECT_THROW(nd::convolution(x, nd::zeros({8, 3, 3, 3}), nd::zeros({7})), ShapeError);
  EXPECT_THROW(nd::convolution(x, nd::zeros({8, 3, 3, 3}), NDArray(), {.num_group = 2}), ShapeError);
  EXPECT_THROW(nd::convolution(x, nd::zeros({8, 3, 3, 3}), NDArray(), {.layout = "HWCN"}), ValueError);
  EXPECT_THROW(nd::convolution(x, nd::zeros({8, 3, 3, 3}), NDArray(), {.stride = {1, 1, 1}}), ValueError);
  EXPECT_THROW(nd::convolution(x.astype(DType::kFloat64), nd::zeros({8, 3, 3, 3}, {.dtype = DType::kFloat64}),
                               NDArray()),
               TypeError);
  // Arity follows no_bias.
  EXPECT_THROW(invoke(OpId::kConvolution, {x, nd::zeros({8, 3, 3, 3}), nd::zeros({8})},
                      OpAttrs::make(ConvolutionAttrs{.kernel = {3, 3}, .num_filter = 8, .no_bias = true})),
               ValueError);
  EXPECT_THROW(nd::convolution(nd::zeros({2, 3, 1, 1, 1, 5}), nd::zeros({8, 3, 1, 1, 1, 3}), NDArray()),
               NotSupported);

  msg = error_of<ShapeError>([&] { nd::pooling(x, {.kernel = {6, 3}}); });
  EXPECT_NE(msg.find("Pooling"), std::string::npos) << msg;
  EXPECT_THROW(nd::pooling(x, {.kernel = {2, 2}, .pool_type = "lp"}), NotSupported);
  EXPECT_THROW(nd::pooling(x, {.kernel = {2, 2}, .pool_type = "median"}), ValueError);
  EXPECT_THROW(nd::pooling(x, {.kernel = {2, 2}, .pooling_convention = "same"}), NotSupported);
  EXPECT_THROW(nd::pooling(x, {}), ValueError);  // no kernel, not global

  NDArray v = nd::zeros({3});
  msg = error_of<ShapeError>([&] { nd::batch_norm(x, nd::zeros({4}), v, v, v); });
  EXPECT_NE(msg.find("gamma"), std::string::npos) << msg;
  EXPECT_THROW(nd::batch_norm(x, v, v, v, v, {.axis = 4}), IndexError);
}

TEST(ConvErrors, DilatedPoolingIsMaxOnly) {
  NDArray x = nd::zeros({1, 1, 8, 8});
  std::string msg = error_of<NotSupported>([&] {
    nd::pooling(x, {.kernel = {2, 2}, .pool_type = "avg", .dilate = {2, 2}});
  });
  EXPECT_NE(msg.find("max pooling only"), std::string::npos) << msg;
  EXPECT_THROW(nd::pooling(x, {.kernel = {3, 3}, .dilate = {4, 4}}), ShapeError);  // spans 9 > 8
  EXPECT_THROW(nd::pooling(x, {.kernel = {2, 2}, .dilate = {0, 1}}), ValueError);
}

TEST(ConvOps, DeclareGradientsAndMutations) {
  EXPECT_NE(op_def(OpId::kConvolution).grad, nullptr);
  EXPECT_NE(op_def(OpId::kPooling).grad, nullptr);
  EXPECT_NE(op_def(OpId::kBatchNorm).grad, nullptr);
  EXPECT_EQ(op_def(OpId::kBatchNorm).mutate_inputs, (std::vector<int>{3, 4}));
  // The backward ops have gradients of their own (higher-order gradients;
  // checked against finite differences in higher_order_grad_test).
  for (OpId id : {OpId::kConvolutionBackwardData, OpId::kConvolutionBackwardWeight, OpId::kPoolingBackward,
                  OpId::kBatchNormBackward})
    EXPECT_TRUE(op_def(id).differentiable && op_def(id).grad != nullptr) << op_def(id).name;
}

}  // namespace
}  // namespace kiln
