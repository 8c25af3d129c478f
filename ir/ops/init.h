// Attributes of the init family: ops without inputs that create arrays.
#pragma once

#include "ir/attrs.h"

namespace kiln {

// _zeros, _ones
struct InitAttrs {
  Shape shape;
  DType dtype = DType::kFloat32;
  template <typename V>
  void fields(V& v) {
    v("shape", shape);
    v("dtype", dtype);
  }
};

// _full
struct FullAttrs {
  Shape shape;
  DType dtype = DType::kFloat32;
  double value = 0;
  template <typename V>
  void fields(V& v) {
    v("shape", shape);
    v("dtype", dtype);
    v("value", value, kRequired);
  }
};

// _arange: values start, start+step, ... below stop (stop None: [0, start)).
struct ArangeAttrs {
  double start = 0;
  std::optional<double> stop;
  double step = 1;
  int repeat = 1;
  DType dtype = DType::kFloat32;
  template <typename V>
  void fields(V& v) {
    v("start", start, kRequired);
    v("stop", stop);
    v("step", step);
    v("repeat", repeat);
    v("dtype", dtype);
  }
};

// _random_uniform (low, high) and _random_normal (loc, scale). `seed` and
// `offset` select a counter-based stream: the values do not depend on thread
// count or scheduling, so runs are reproducible per device and seed.
struct RandomAttrs {
  double a = 0;  // low or loc
  double b = 1;  // high or scale
  Shape shape;
  DType dtype = DType::kFloat32;
  int64_t seed = 0;
  int64_t offset = 0;
  template <typename V>
  void fields(V& v) {
    v("a", a);
    v("b", b);
    v("shape", shape);
    v("dtype", dtype);
    v("seed", seed);
    v("offset", offset);
  }
};

}  // namespace kiln
