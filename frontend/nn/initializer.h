// Parameter initializers (Gluon's mx.init): how a Parameter's first values are drawn.
//
//   net.initialize(init::Xavier());                         // every weight; biases stay zero
//   nn::Dense d(10, "", true, true, 0, init::Normal(0.02)); // a per-parameter initializer
//   init::Initializer mine("Halves", [](const Shape& s, ArrayOptions o, std::string_view) {
//     return nd::full(s, 0.5, o);
//   });
//
// An Initializer is a cheap-to-copy, immutable handle (a description plus a
// fill function), so the predefined ones below are handles too: `Normal(0.01)`
// constructs an Initializer, and copies or slices keep working.
//
// Two ways to apply one (as in Gluon):
//   - `make`: fill the whole array with this rule. Used for a parameter's own
//     initializer (Dense's bias_initializer, BatchNorm's gamma_initializer).
//   - `make_for_name`: the rule for a parameter without its own initializer,
//     chosen by the end of its name: "...bias" and "...beta" get zeros,
//     "...gamma" gets ones, anything else (weights) gets this rule.
// Random initializers draw from nd::random (seeded by nd::random::seed), so a
// seeded program initializes identically on every run. Non-floating dtypes are
// drawn in float32 and converted.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "frontend/ndarray.h"

namespace kiln::init {

class Initializer {
 public:
  // Returns a new array of `shape` and `options` filled by this rule;
  // `param_name` is only for error messages.
  using Fill = std::function<NDArray(const Shape& shape, ArrayOptions options, std::string_view param_name)>;

  Initializer(std::string description, Fill fill);
  Initializer(const Initializer&) = default;  // no move: a moved-from handle stays valid
  Initializer& operator=(const Initializer&) = default;

  NDArray make(const Shape& shape, ArrayOptions options, std::string_view param_name = "") const;
  NDArray make_for_name(std::string_view param_name, const Shape& shape, ArrayOptions options) const;

  const std::string& to_string() const { return description_; }  // "Normal(sigma=0.01)"

 private:
  std::string description_;
  std::shared_ptr<const Fill> fill_;
};

// N(0, sigma).
struct Normal : Initializer {
  explicit Normal(double sigma = 0.01);
};
// U(-scale, scale). Gluon's default initializer.
struct Uniform : Initializer {
  explicit Uniform(double scale = 0.07);
};
// Glorot/Xavier: scale = sqrt(magnitude / factor) where factor is fan_in,
// fan_out or their mean ("in", "out", "avg"), with fan_in = shape[1] * hw and
// fan_out = shape[0] * hw (hw: product of the dims past the second). Samples
// U(-scale, scale) ("uniform") or N(0, scale) ("gaussian"). Needs >= 2 dims
// (ValueError naming the parameter otherwise).
struct Xavier : Initializer {
  explicit Xavier(std::string rnd_type = "uniform", std::string factor_type = "avg", double magnitude = 3);
};
struct Zero : Initializer {
  Zero();
};
struct One : Initializer {
  One();
};
struct Constant : Initializer {
  explicit Constant(double value);
};

}  // namespace kiln::init
