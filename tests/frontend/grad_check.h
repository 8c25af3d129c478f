// Finite-difference gradient checks for tests.
//
//   check_gradients([](std::span<const NDArray> x) { return nd::sum(nd::exp(x[0]) * x[1]); },
//                   {nd::random::normal({2, 3}, 0, 1, {.dtype = DType::kFloat64}),
//                    nd::random::normal({3}, 0, 1, {.dtype = DType::kFloat64})});
//
// `fn` maps inputs to one array; the checked scalar is sum(fn(x) * w) for a
// fixed random w, so every output element is exercised. Analytic gradients
// come from autograd::backward (the op's GradFn), numerical ones from central
// differences on each input element. Use float64 inputs for tight tolerances.
// Inputs listed in `no_grad` (indices) are held constant (labels, indices).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <span>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/nd.h"

namespace kiln::testing {

struct GradCheckOptions {
  double eps = 1e-6;
  double rtol = 1e-4;
  double atol = 1e-6;
  std::set<size_t> no_grad;
  bool train_mode = true;
};

inline void check_gradients(const std::function<NDArray(std::span<const NDArray>)>& fn,
                            std::vector<NDArray> inputs, const GradCheckOptions& opt = {}) {
  // Fixed weights so the scalar depends on every output element.
  NDArray probe = [&] {
    autograd::Pause pause(opt.train_mode);
    return fn(inputs);
  }();
  nd::random::seed(1234);
  NDArray w = nd::random::uniform(probe.shape(), 0.5, 1.5, {probe.dtype(), probe.device()});
  auto scalar = [&](std::span<const NDArray> xs) {
    autograd::Pause pause(opt.train_mode);
    return nd::sum(fn(xs) * w).item<double>();
  };

  // Analytic.
  std::vector<NDArray> leaves;
  for (size_t i = 0; i < inputs.size(); ++i) {
    leaves.push_back(inputs[i].copy());
    if (!opt.no_grad.contains(i)) leaves.back().attach_grad();
  }
  NDArray y;
  {
    autograd::Record record(opt.train_mode);
    y = nd::sum(fn(leaves) * w);
  }
  autograd::backward({y}, {.train_mode = opt.train_mode});

  // Numerical, one element at a time.
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (opt.no_grad.contains(i)) continue;
    std::vector<double> analytic = leaves[i].grad().to_vector<double>();
    std::vector<double> base = inputs[i].to_vector<double>();
    for (size_t k = 0; k < base.size(); ++k) {
      auto perturbed = [&](double delta) {
        std::vector<double> v = base;
        v[k] += delta;
        std::vector<NDArray> xs = inputs;
        xs[i] = nd::array(v, inputs[i].shape(), inputs[i].device()).astype(inputs[i].dtype());
        return scalar(xs);
      };
      double numeric = (perturbed(opt.eps) - perturbed(-opt.eps)) / (2 * opt.eps);
      double tol = opt.atol + opt.rtol * std::fabs(numeric);
      ASSERT_NEAR(analytic[k], numeric, tol) << "input " << i << " element " << k << " of shape "
                                             << inputs[i].shape().to_string();
    }
  }
}

}  // namespace kiln::testing
