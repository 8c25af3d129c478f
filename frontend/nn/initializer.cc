#include "frontend/nn/initializer.h"

#include <cmath>

#include "frontend/nd.h"
#include "ir/attrs.h"

namespace kiln::init {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Random samples in `options.dtype`; integer and bool params are drawn in
// float32 and converted (nd::random draws floating point only).
template <typename Draw>
NDArray random_in(const Shape& shape, ArrayOptions options, Draw draw) {
  if (is_floating(options.dtype)) return draw(shape, options);
  return draw(shape, ArrayOptions{DType::kFloat32, options.device}).astype(options.dtype);
}

}  // namespace

Initializer::Initializer(std::string description, Fill fill)
    : description_(std::move(description)), fill_(std::make_shared<const Fill>(std::move(fill))) {
  KILN_CHECK(*fill_ != nullptr, ValueError, "Initializer '{}': the fill function is empty", description_);
}

NDArray Initializer::make(const Shape& shape, ArrayOptions options, std::string_view param_name) const {
  NDArray out = (*fill_)(shape, options, param_name);
  KILN_ASSERT(out.shape() == shape && out.dtype() == options.dtype);
  return out;
}

NDArray Initializer::make_for_name(std::string_view param_name, const Shape& shape, ArrayOptions options) const {
  if (ends_with(param_name, "bias") || ends_with(param_name, "beta")) return nd::zeros(shape, options);
  if (ends_with(param_name, "gamma")) return nd::ones(shape, options);
  return make(shape, options, param_name);
}

Normal::Normal(double sigma)
    : Initializer(fmt::format("Normal(sigma={})", print_attr(sigma)),
                  [sigma](const Shape& shape, ArrayOptions o, std::string_view) {
                    return random_in(
                        shape, o, [&](const Shape& s, ArrayOptions oo) { return nd::random::normal(s, 0, sigma, oo); });
                  }) {}

Uniform::Uniform(double scale)
    : Initializer(fmt::format("Uniform(scale={})", print_attr(scale)),
                  [scale](const Shape& shape, ArrayOptions o, std::string_view) {
                    return random_in(shape, o, [&](const Shape& s, ArrayOptions oo) {
                      return nd::random::uniform(s, -scale, scale, oo);
                    });
                  }) {}

Xavier::Xavier(std::string rnd_type, std::string factor_type, double magnitude)
    : Initializer(
          fmt::format("Xavier(rnd_type={}, factor_type={}, magnitude={})", rnd_type, factor_type,
                      print_attr(magnitude)),
          [rnd_type, factor_type, magnitude](const Shape& shape, ArrayOptions o, std::string_view name) {
            KILN_CHECK(shape.ndim() >= 2, ValueError,
                       "Xavier: parameter '{}' has shape {}; Xavier needs at least 2 dims "
                       "(fan_in = shape[1], fan_out = shape[0])",
                       name, shape);
            double hw = 1;
            for (int i = 2; i < shape.ndim(); ++i) hw *= static_cast<double>(shape[i]);
            double fan_in = static_cast<double>(shape[1]) * hw, fan_out = static_cast<double>(shape[0]) * hw;
            double factor = factor_type == "in" ? fan_in : factor_type == "out" ? fan_out : (fan_in + fan_out) / 2;
            KILN_CHECK(factor > 0, ValueError, "Xavier: parameter '{}' has shape {} with a zero fan", name, shape);
            double scale = std::sqrt(magnitude / factor);
            return random_in(shape, o, [&](const Shape& s, ArrayOptions oo) {
              return rnd_type == "gaussian" ? nd::random::normal(s, 0, scale, oo)
                                            : nd::random::uniform(s, -scale, scale, oo);
            });
          }) {
  KILN_CHECK(rnd_type == "uniform" || rnd_type == "gaussian", ValueError,
             "Xavier: rnd_type must be \"uniform\" or \"gaussian\", got \"{}\"", rnd_type);
  KILN_CHECK(factor_type == "avg" || factor_type == "in" || factor_type == "out", ValueError,
             "Xavier: factor_type must be \"avg\", \"in\" or \"out\", got \"{}\"", factor_type);
}

Zero::Zero()
    : Initializer("Zero()", [](const Shape& s, ArrayOptions o, std::string_view) { return nd::zeros(s, o); }) {}

One::One() : Initializer("One()", [](const Shape& s, ArrayOptions o, std::string_view) { return nd::ones(s, o); }) {}

Constant::Constant(double value)
    : Initializer(fmt::format("Constant({})", print_attr(value)),
                  [value](const Shape& s, ArrayOptions o, std::string_view) { return nd::full(s, value, o); }) {}

}  // namespace kiln::init
