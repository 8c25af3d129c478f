// First and second order gradients of every differentiable op in the
// registry, against central differences.
//
// For each case (an op, its inputs, attributes), with f(X) = sum over the
// op's outputs of sum(out * w) for fixed random w:
// - first order: autograd's dF/dX against differences of f;
// - second order: with g = grad(f, X, create_graph), a Hessian-vector
//   product h1 = sum_i sum(g_i * v_i) and the squared gradient
//   h2 = sum_i sum(g_i^2) (a gradient penalty), each differentiated by
//   autograd and against differences of h computed from first-order grads;
// - the same second order through a hybridized block holding the op, which
//   must agree with the imperative result.
// `EveryDifferentiableOpHasACase` walks the registry: a new differentiable op
// without a case here fails it. Ops whose second order Kiln does not provide
// have a case that checks the NotSupported error naming the op.
//
// float64 where the CPU kernels have it; oneDNN-backed and float32-only ops
// (convolution, pooling, BatchNorm) run in float32 with larger steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "frontend/autograd.h"
#include "frontend/graph_eval.h"
#include "frontend/invoke.h"
#include "frontend/kiln.h"
#include "frontend/nd.h"
#include "ir/op.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

struct In {
  Shape shape;
  double lo = -1, hi = 1;
  bool integer = false;   // whole numbers in [lo, hi]; never differentiated
  bool distinct = false;  // a shuffled ramp from lo to hi: no ties for max/min
  bool constant = false;  // not differentiated (BatchNorm's moving statistics)
};

struct Case {
  std::string op;
  std::vector<In> inputs;
  AttrMap attrs;
  DType dtype = DType::kFloat64;
  bool train = true;
  std::vector<int> weighted;  // outputs f reads; empty: every floating output
  std::string not_twice;      // create_graph must raise NotSupported containing this
  bool zero_grad = false;     // the op stops gradients (BlockGrad): autograd must give zeros
  double eps = 0, tol = 0;    // 0: the dtype's default
  // Instead of the op alone: a function of the inputs that ends in the op
  // (for a backward op whose inputs must be related, as BatchNorm's mean and
  // var are the batch statistics of its data).
  std::function<std::vector<NDArray>(std::span<const NDArray> x, const OpAttrs& attrs)> fn;
};

In in(Shape s, double lo = -1, double hi = 1) { return {s, lo, hi}; }
In ints(Shape s, double lo, double hi) { return {s, lo, hi, true}; }
In ramp(Shape s, double lo = -1, double hi = 1) { return {s, lo, hi, false, true}; }
In aux(In i) {
  i.constant = true;
  return i;
}

Case f32(Case c) {
  c.dtype = DType::kFloat32;
  return c;
}
Case predict(Case c) {
  c.train = false;
  return c;
}
Case outputs(Case c, std::vector<int> o) {
  c.weighted = std::move(o);
  return c;
}
Case not_twice(Case c, std::string what) {
  c.not_twice = std::move(what);
  return c;
}

// In train mode _backward_BatchNorm's mean and var are the batch statistics
// of its data, as BatchNorm's gradient passes them: (dy, x, gamma) -> the
// forward's statistics -> _backward_BatchNorm.
Case batch_norm_backward_in_train_mode() {
  Case c = f32({"_backward_BatchNorm", {in({4, 3, 2, 2}), in({4, 3, 2, 2}), in({3})}, {{"fix_gamma", "False"}}});
  c.fn = [](std::span<const NDArray> x, const OpAttrs& attrs) {
    Shape channels{x[2].shape()[0]};
    NDArray beta = nd::zeros(channels), moving_mean = nd::zeros(channels), moving_var = nd::ones(channels);
    std::vector<NDArray> stats = invoke(OpId::kBatchNorm, {x[1], x[2], beta, moving_mean, moving_var}, attrs);
    return invoke(OpId::kBatchNormBackward, {x[0], x[1], x[2], stats[1], stats[2]}, attrs);
  };
  return c;
}

// clang-format off
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
    // ---- elemwise
    {"elemwise_add", {in({2, 3}), in({2, 3})}, {}},
    {"elemwise_sub", {in({2, 3}), in({2, 3})}, {}},
    {"elemwise_mul", {in({2, 3}), in({2, 3})}, {}},
    {"elemwise_div", {in({2, 3}), in({2, 3}, 0.5, 2)}, {}},
    {"broadcast_add", {in({2, 3}), in({3})}, {}},
    {"broadcast_sub", {in({2, 1}), in({2, 3})}, {}},
    {"broadcast_mul", {in({2, 3}), in({1, 3})}, {}},
    {"broadcast_div", {in({2, 3}), in({2, 1}, 0.5, 2)}, {}},
    {"broadcast_power", {in({2, 3}, 0.5, 2), in({3}, -1, 2)}, {}},
    {"broadcast_maximum", {in({2, 3}), in({1, 3})}, {}},
    {"broadcast_minimum", {in({2, 3}), in({2, 1})}, {}},
    // |lhs / rhs| in (2.09, 2.8): the integer quotient (2, or -2 for fmod's negative lhs) is constant nearby
    {"broadcast_mod", {in({2, 3}, 2.2, 2.8), in({3}, 1.0, 1.05)}, {}},
    {"_kiln_broadcast_fmod", {in({2, 3}, -2.8, -2.2), in({3}, 1.0, 1.05)}, {}},
    {"_plus_scalar", {in({5})}, {{"scalar", "1.5"}}},
    {"_minus_scalar", {in({5})}, {{"scalar", "1.5"}}},
    {"_rminus_scalar", {in({5})}, {{"scalar", "1.5"}}},
    {"_mul_scalar", {in({5})}, {{"scalar", "-2"}}},
    {"_div_scalar", {in({5})}, {{"scalar", "3"}}},
    {"_rdiv_scalar", {in({5}, 0.5, 2)}, {{"scalar", "3"}}},
    {"_power_scalar", {in({5}, 0.5, 2)}, {{"scalar", "2.5"}}},
    {"_rpower_scalar", {in({5})}, {{"scalar", "1.7"}}},
    {"_maximum_scalar", {in({5})}, {{"scalar", "0.2"}}},
    {"_minimum_scalar", {in({5})}, {{"scalar", "0.2"}}},
    {"exp", {in({5})}, {}},
    {"log", {in({5}, 0.5, 2)}, {}},
    {"sqrt", {in({5}, 0.5, 2)}, {}},
    {"square", {in({5})}, {}},
    {"tanh", {in({5}, -2, 2)}, {}},
    {"erf", {in({5}, -2, 2)}, {}},
    {"sin", {in({5})}, {}},
    {"cos", {in({5})}, {}},
    {"tan", {in({5}, -1, 1)}, {}},
    {"arcsin", {in({5}, -0.7, 0.7)}, {}},
    {"arccos", {in({5}, -0.7, 0.7)}, {}},
    {"arctan", {in({5})}, {}},
    {"sinh", {in({5})}, {}},
    {"cosh", {in({5})}, {}},
    {"arcsinh", {in({5})}, {}},
    {"arccosh", {in({5}, 1.2, 3)}, {}},
    {"arctanh", {in({5}, -0.7, 0.7)}, {}},
    {"sigmoid", {in({5}, -3, 3)}, {}},
    {"relu", {in({5})}, {}},
    {"abs", {in({5})}, {}},
    {"negative", {in({5})}, {}},
    {"clip", {in({7})}, {{"a_min", "-0.5"}, {"a_max", "0.3"}}},
    {"_copy", {in({2, 3})}, {}},
    {"Cast", {in({2, 3})}, {{"dtype", "float64"}}},
    {"where", {ints({2, 3}, 0, 1), in({2, 3}), in({2, 3})}, {}},
    {"BlockGrad", {in({4})}, {}, DType::kFloat64, true, {}, "", true},
    // ---- reduce
    {"sum", {in({2, 3, 4})}, {{"axis", "(1,)"}}},
    {"mean", {in({2, 3, 4})}, {{"axis", "(0, 2)"}, {"keepdims", "True"}}},
    {"max", {ramp({3, 4})}, {{"axis", "(1,)"}}},
    {"min", {ramp({3, 4})}, {{"axis", "(0,)"}}},
    {"prod", {in({3, 4}, 0.5, 1.5)}, {{"axis", "(1,)"}}},
    {"norm", {in({3, 4})}, {{"ord", "2"}, {"axis", "(1,)"}}},
    {"norm", {in({3, 4})}, {{"ord", "1"}}},
    // ---- linalg
    {"dot", {in({3, 4}), in({4, 2})}, {}},
    {"dot", {in({4, 3}), in({2, 4})}, {{"transpose_a", "True"}, {"transpose_b", "True"}}},
    {"batch_dot", {in({2, 3, 4}), in({2, 4, 2})}, {}},
    // ---- matrix
    {"Reshape", {in({2, 3, 2})}, {{"shape", "(3, -1)"}}},
    {"transpose", {in({2, 3, 2})}, {{"axes", "(1, 0, 2)"}}},
    {"slice", {in({4, 5})}, {{"begin", "(1, 0)"}, {"end", "(3, 5)"}, {"step", "(1, 2)"}}},
    {"slice_axis", {in({3, 6})}, {{"axis", "1"}, {"begin", "1"}, {"end", "4"}}},
    {"Concat", {in({2, 3}), in({2, 2})}, {{"num_args", "2"}, {"dim", "1"}}},
    {"stack", {in({2, 3}), in({2, 3})}, {{"num_args", "2"}, {"axis", "1"}}},
    {"SliceChannel", {in({2, 4, 3})}, {{"num_outputs", "2"}, {"axis", "1"}}},
    {"take", {in({5, 3}), ints({4}, 0, 4)}, {}},
    {"expand_dims", {in({2, 3})}, {{"axis", "1"}}},
    {"broadcast_to", {in({3, 1})}, {{"shape", "(2, 3, 4)"}}},
    {"_backward_slice", {in({2, 3})}, {{"begin", "(1, 0)"}, {"end", "(3, 5)"}, {"step", "(1, 2)"}, {"data_shape", "(4, 5)"}}},
    {"_backward_slice_axis", {in({3, 3})}, {{"axis", "1"}, {"begin", "1"}, {"end", "4"}, {"data_shape", "(3, 6)"}}},
    {"_backward_take", {in({4, 3}), ints({4}, 0, 4)}, {{"data_shape", "(5, 3)"}}},
    // ---- conv: float32 (oneDNN and Kiln's own float32 kernels)
    f32({"Convolution", {in({2, 3, 5, 5}), in({4, 3, 3, 3}), in({4})},
         {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"pad", "(1, 1)"}}}),
    f32({"Convolution", {in({2, 4, 5, 5}), in({4, 2, 3, 3})},
         {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"stride", "(2, 2)"}, {"num_group", "2"}, {"no_bias", "True"}}}),
    f32({"_backward_Convolution_data", {in({2, 4, 5, 5}), in({4, 3, 3, 3})},
         {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"pad", "(1, 1)"}, {"data_shape", "(2, 3, 5, 5)"}}}),
    f32({"_backward_Convolution_weight", {in({2, 4, 5, 5}), in({2, 3, 5, 5})},
         {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"pad", "(1, 1)"}}}),
    f32({"Pooling", {in({2, 2, 5, 5})}, {{"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"}, {"pool_type", "avg"}}}),
    f32({"Pooling", {in({2, 2, 4, 4})}, {{"global_pool", "True"}, {"pool_type", "sum"}}}),
    not_twice(f32({"Pooling", {ramp({2, 2, 4, 4})}, {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "max"}}}),
              "_backward_Pooling: max pooling is not twice differentiable"),
    f32({"_backward_Pooling", {in({2, 2, 3, 3}), in({2, 2, 5, 5}), in({2, 2, 3, 3})},
         {{"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"}, {"pool_type", "avg"}}}),
    outputs(f32({"BatchNorm", {in({4, 3, 2, 2}), in({3}), in({3}), aux(in({3})), aux(in({3}, 0.5, 2))}, {{"fix_gamma", "False"}}}), {0}),
    outputs(f32({"BatchNorm", {in({6, 3, 2}), in({2}), in({2}), aux(in({2})), aux(in({2}, 0.5, 2))}, {{"axis", "-1"}}}), {0}),
    outputs(predict(f32({"BatchNorm", {in({4, 3, 2, 2}), in({3}), in({3}), aux(in({3})), aux(in({3}, 0.5, 2))}, {{"fix_gamma", "False"}}})), {0}),
    batch_norm_backward_in_train_mode(),
    predict(f32({"_backward_BatchNorm", {in({4, 3, 2, 2}), in({4, 3, 2, 2}), in({3}), aux(in({3})), aux(in({3}, 0.5, 2))},
                 {{"fix_gamma", "False"}}})),
    // ---- nn
    {"FullyConnected", {in({3, 4}), in({5, 4}), in({5})}, {{"num_hidden", "5"}}},
    {"FullyConnected", {in({3, 2, 2}), in({5, 4})}, {{"num_hidden", "5"}, {"no_bias", "True"}}},
    {"Activation", {in({7}, -3, 3)}, {{"act_type", "relu"}}},
    {"Activation", {in({7}, -3, 3)}, {{"act_type", "sigmoid"}}},
    {"Activation", {in({7}, -2, 2)}, {{"act_type", "tanh"}}},
    {"Activation", {in({7}, -3, 3)}, {{"act_type", "softrelu"}}},
    {"Activation", {in({7}, -3, 3)}, {{"act_type", "softsign"}}},
    {"_backward_Activation", {in({7}), in({7}, 0.1, 2)}, {{"act_type", "relu"}}},
    {"_backward_Activation", {in({7}), in({7}, 0.05, 0.95)}, {{"act_type", "sigmoid"}}},
    {"_backward_Activation", {in({7}), in({7}, -0.9, 0.9)}, {{"act_type", "tanh"}}},
    {"_backward_Activation", {in({7}), in({7}, 0.1, 3)}, {{"act_type", "softrelu"}}},
    {"_backward_Activation", {in({7}), in({7}, -0.9, 0.9)}, {{"act_type", "softsign"}}},
    {"LeakyReLU", {in({7})}, {{"act_type", "leaky"}, {"slope", "0.1"}}},
    {"LeakyReLU", {in({7})}, {{"act_type", "elu"}, {"slope", "0.3"}}},
    {"LeakyReLU", {in({7})}, {{"act_type", "selu"}}},
    {"LeakyReLU", {in({7}, -3, 3)}, {{"act_type", "gelu"}}},
    {"LeakyReLU", {in({7}, -3, 3)}, {{"act_type", "gelu_tanh"}}},
    {"LeakyReLU", {in({2, 3, 2}), in({3})}, {{"act_type", "prelu"}}},
    {"_backward_LeakyReLU", {in({7}), in({7})}, {{"act_type", "leaky"}, {"slope", "0.1"}}},
    {"_backward_LeakyReLU", {in({7}), in({7})}, {{"act_type", "elu"}, {"slope", "0.3"}}},
    {"_backward_LeakyReLU", {in({7}), in({7})}, {{"act_type", "selu"}}},
    {"_backward_LeakyReLU", {in({7}), in({7}, -3, 3)}, {{"act_type", "gelu"}}},
    {"_backward_LeakyReLU", {in({7}), in({7}, -3, 3)}, {{"act_type", "gelu_tanh"}}},
    {"Dropout", {in({4, 6})}, {{"p", "0.5"}, {"mode", "always"}, {"seed", "11"}, {"offset", "5"}}},
    {"Flatten", {in({2, 3, 2})}, {}},
    {"softmax", {in({3, 5}, -2, 2)}, {}},
    {"softmax", {in({2, 3, 4}, -2, 2)}, {{"axis", "1"}, {"temperature", "2"}}},
    {"softmax", {in({3, 5}, -2, 2), ints({3}, 1, 5)}, {{"use_length", "True"}}},
    {"softmax", {in({2, 4, 3}, -2, 2), ints({2, 3}, 0, 4)}, {{"axis", "1"}, {"use_length", "True"}}},
    {"log_softmax", {in({3, 5}, -2, 2)}, {}},
    {"log_softmax", {in({2, 3, 4}, -2, 2)}, {{"axis", "1"}, {"temperature", "0.5"}}},
    {"_backward_softmax", {in({3, 5}), in({3, 5}, 0.05, 0.5)}, {}},
    {"_backward_softmax", {in({2, 3, 4}), in({2, 3, 4}, 0.05, 0.5)}, {{"axis", "1"}, {"temperature", "2"}}},
    {"_backward_log_softmax", {in({3, 5}), in({3, 5}, -3, -0.1)}, {}},
    {"pick", {in({3, 4}), ints({3}, 0, 3)}, {{"axis", "1"}}},
    {"_backward_pick", {in({3}), ints({3}, 0, 3)}, {{"axis", "1"}, {"data_shape", "(3, 4)"}}},
    {"_kiln_softmax_cross_entropy", {in({4, 5}, -2, 2), ints({4}, 0, 4)}, {}},
    {"add_n", {in({5}), in({5}), in({5})}, {{"num_args", "3"}}},
    {"Embedding", {ints({2, 3}, 0, 4), in({5, 4})}, {{"input_dim", "5"}, {"output_dim", "4"}, {"dtype", "float64"}}},
    {"_backward_kiln_softmax_cross_entropy", {in({4}), in({4, 5}, -2, 2), ints({4}, 0, 4)}, {}},
    // ---- layer_norm (every output weighted: the mean and std outputs carry gradients too)
    {"LayerNorm", {in({3, 5}, -2, 2), in({5}, 0.5, 1.5), in({5})}, {{"eps", "0.01"}}},
    {"LayerNorm", {in({2, 4, 3}, -2, 2), in({4}), in({4})}, {{"axis", "1"}, {"eps", "0.001"}}},
    outputs({"LayerNorm", {in({3, 4}, -2, 2), in({4}), in({4})}, {{"eps", "0.01"}}}, {0}),
    {"_backward_LayerNorm", {in({3, 5}), in({3, 5}, -2, 2), in({5}), in({3, 1}), in({3, 1}, 0.5, 2)}, {{"eps", "0.01"}}},
    {"_backward_LayerNorm", {in({2, 4, 3}), in({2, 4, 3}), in({4}), in({2, 1, 3}), in({2, 1, 3}, 0.5, 2)}, {{"axis", "1"}}},
    // ---- fused layers (made by passes; differentiable as their parts)
    // ---- attention: every output weighted, so lse's gradient is checked too
    {"_kiln_attention", {in({2, 3, 3}), in({2, 4, 3}), in({2, 4, 2})}, {{"causal", "True"}}},
    {"_kiln_attention", {in({1, 2, 3}), in({1, 3, 3}), in({1, 3, 2})}, {{"scale", "0.7"}}},
    {"_backward_kiln_attention",
     {in({2, 3, 2}), in({2, 3}), in({2, 3, 3}), in({2, 4, 3}), in({2, 4, 2}), in({2, 3, 2}), in({2, 3}, 1, 2)},
     {{"causal", "True"}}},
    outputs({"_kiln_attention", {in({2, 3, 3}), in({2, 3, 3}), in({2, 3, 2})}, {{"causal", "True"}}}, {1}),  // lse alone
    f32({"_kiln_conv_act", {in({2, 3, 5, 5}), in({4, 3, 3, 3}), in({4})},
         {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"pad", "(1, 1)"}, {"act_type", "tanh"}}}),
    {"_kiln_fc_act", {in({3, 4}), in({5, 4}), in({5})}, {{"num_hidden", "5"}, {"act_type", "sigmoid"}}},
  };
  return all;
}
// clang-format on

std::string describe(const Case& c) {
  std::string s = c.op + "(";
  for (size_t i = 0; i < c.inputs.size(); ++i) s += (i ? ", " : "") + c.inputs[i].shape.to_string();
  s += ")";
  for (const auto& [k, v] : c.attrs) s += " " + k + "=" + v;
  return s + (c.train ? "" : " [predict]") + " " + std::string(dtype_name(c.dtype));
}

NDArray make_input(const In& spec, DType dtype, std::mt19937& rng) {
  std::vector<double> v(static_cast<size_t>(spec.shape.size()));
  if (spec.distinct) {
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = spec.lo + (spec.hi - spec.lo) * static_cast<double>(i) / static_cast<double>(std::max<size_t>(v.size() - 1, 1));
    std::shuffle(v.begin(), v.end(), rng);
  } else {
    std::uniform_real_distribution<double> real(spec.lo, spec.hi);
    std::uniform_int_distribution<int64_t> whole(static_cast<int64_t>(spec.lo), static_cast<int64_t>(spec.hi));
    for (double& x : v) x = spec.integer ? static_cast<double>(whole(rng)) : real(rng);
  }
  return nd::array(v, spec.shape).astype(dtype);
}

// One case, ready to evaluate.
struct Prepared {
  const Case& c;
  const OpDef& def;
  OpAttrs attrs;
  std::vector<NDArray> x;     // inputs (fresh copies are used per evaluation)
  std::vector<bool> diff;     // per input: differentiated
  std::vector<NDArray> w;     // per output: weights of f (none: not weighted)
  std::vector<NDArray> v;     // per input: direction of the Hessian-vector product
  double eps, tol;

  explicit Prepared(const Case& cs)
      : c(cs), def(*find_op(cs.op)), attrs(def.parse_attrs ? def.parse_attrs(def.name, cs.attrs) : OpAttrs()) {
    std::mt19937 rng(1234);
    for (const In& s : c.inputs) {
      x.push_back(make_input(s, c.dtype, rng));
      diff.push_back(!s.integer && !s.constant);
    }
    bool f64 = c.dtype == DType::kFloat64;
    eps = c.eps > 0 ? c.eps : f64 ? 1e-5 : 1e-2;
    tol = c.tol > 0 ? c.tol : f64 ? 1e-6 : 2e-2;
    std::vector<NDArray> y = run(x);
    for (size_t k = 0; k < y.size(); ++k) {
      bool weighted = c.weighted.empty() ? is_floating(y[k].dtype())
                                         : std::count(c.weighted.begin(), c.weighted.end(), static_cast<int>(k)) > 0;
      std::uniform_real_distribution<double> u(0.5, 1.5);
      std::vector<double> vals(static_cast<size_t>(y[k].shape().size()));
      for (double& d : vals) d = u(rng);
      w.push_back(weighted ? nd::array(vals, y[k].shape()).astype(y[k].dtype()) : NDArray());
    }
    for (size_t i = 0; i < x.size(); ++i) {
      std::uniform_real_distribution<double> u(-1, 1);
      std::vector<double> vals(static_cast<size_t>(x[i].shape().size()));
      for (double& d : vals) d = u(rng);
      v.push_back(nd::array(vals, x[i].shape()).astype(c.dtype));
    }
  }

  // The op on copies of `xs` (some ops mutate inputs: BatchNorm's statistics).
  std::vector<NDArray> run(std::span<const NDArray> xs) const {
    std::vector<NDArray> copies;
    for (size_t i = 0; i < xs.size(); ++i) copies.push_back(diff[i] ? xs[i] : xs[i].copy());
    std::optional<autograd::TrainMode> train;
    std::optional<autograd::PredictMode> pred;
    if (c.train) train.emplace(); else pred.emplace();
    if (!def.mutate_inputs.empty())
      for (int m : def.mutate_inputs) copies[static_cast<size_t>(m)] = xs[static_cast<size_t>(m)].detach().copy();
    return c.fn ? c.fn(copies, attrs) : invoke(def.id, copies, attrs);
  }

  NDArray f(std::span<const NDArray> y) const {
    NDArray total;
    for (size_t k = 0; k < y.size(); ++k) {
      if (w[k].is_none()) continue;
      NDArray t = nd::sum(y[k] * w[k]);
      total = total.is_none() ? t : total + t;
    }
    return total;
  }
};

enum class Order { kFirst, kHvp, kSquare };

// The checked scalar at `xs`: f (first order), or h1/h2 from the gradients
// of f taken with create_graph when `record` (then the result is on the tape).
NDArray scalar_at(const Prepared& s, Order order, std::vector<NDArray>& leaves, bool record,
                  const std::function<std::vector<NDArray>(std::span<const NDArray>)>& op) {
  autograd::Record rec(s.c.train);
  NDArray fx = s.f(op(leaves));
  if (order == Order::kFirst) return fx;
  std::vector<NDArray> vars;
  std::vector<size_t> which;
  for (size_t i = 0; i < leaves.size(); ++i)
    if (s.diff[i]) {
      vars.push_back(leaves[i]);
      which.push_back(i);
    }
  std::vector<NDArray> heads{fx};
  std::vector<NDArray> g = autograd::grad(heads, vars, {}, false, record);
  NDArray h;
  for (size_t j = 0; j < g.size(); ++j) {
    NDArray t = order == Order::kHvp ? nd::sum(g[j] * s.v[which[j]]) : nd::sum(g[j] * g[j]);
    h = h.is_none() ? t : h + t;
  }
  return h;
}

std::vector<NDArray> leaves_of(const Prepared& s, std::span<const NDArray> xs) {
  std::vector<NDArray> leaves;
  for (size_t i = 0; i < xs.size(); ++i) {
    leaves.push_back(xs[i].copy());
    if (s.diff[i]) leaves.back().attach_grad();
  }
  return leaves;
}

// Analytic d(scalar)/d(inputs), one vector per input (empty where not differentiated).
std::vector<std::vector<double>> analytic(const Prepared& s, Order order,
                                          const std::function<std::vector<NDArray>(std::span<const NDArray>)>& op) {
  std::vector<NDArray> leaves = leaves_of(s, s.x);
  NDArray h = scalar_at(s, order, leaves, true, op);
  std::vector<std::vector<double>> out(leaves.size());
  std::vector<NDArray> vars;
  for (size_t i = 0; i < leaves.size(); ++i)
    if (s.diff[i]) vars.push_back(leaves[i]);
  // A scalar off the tape has a zero gradient (e.g. a linear op's h2).
  std::vector<NDArray> g;
  if (h.requires_grad()) {
    std::vector<NDArray> heads{h};
    g = autograd::grad(heads, vars);
  }
  size_t j = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!s.diff[i]) continue;
    out[i] = g.empty() ? std::vector<double>(static_cast<size_t>(leaves[i].shape().size()), 0.0)
                       : g[j].to_vector<double>();
    ++j;
  }
  return out;
}

std::vector<std::vector<double>> numeric(const Prepared& s, Order order,
                                         const std::function<std::vector<NDArray>(std::span<const NDArray>)>& op) {
  std::vector<std::vector<double>> out(s.x.size());
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (!s.diff[i]) continue;
    std::vector<double> base = s.x[i].to_vector<double>();
    for (size_t k = 0; k < base.size(); ++k) {
      auto at = [&](double delta) {
        std::vector<double> b = base;
        b[k] += delta;
        std::vector<NDArray> xs = s.x;
        xs[i] = nd::array(b, s.x[i].shape()).astype(s.c.dtype);
        std::vector<NDArray> leaves = leaves_of(s, xs);
        return scalar_at(s, order, leaves, false, op).item<double>();
      };
      out[i].push_back((at(s.eps) - at(-s.eps)) / (2 * s.eps));
    }
  }
  return out;
}

void expect_close(const Prepared& s, const std::vector<std::vector<double>>& got,
                  const std::vector<std::vector<double>>& want, const char* what) {
  double scale = 1;
  for (const auto& w : want)
    for (double d : w) scale = std::max(scale, std::fabs(d));
  for (size_t i = 0; i < want.size(); ++i) {
    for (size_t k = 0; k < want[i].size(); ++k) {
      if (std::fabs(got[i][k] - want[i][k]) <= s.tol * scale) continue;
      ADD_FAILURE() << describe(s.c) << ": " << what << " of input " << i << " element " << k << ": autograd "
                    << got[i][k] << ", finite differences " << want[i][k] << " (tolerance " << s.tol * scale << ")";
      return;
    }
  }
}

std::function<std::vector<NDArray>(std::span<const NDArray>)> imperative(const Prepared& s) {
  return [&s](std::span<const NDArray> xs) { return s.run(xs); };
}

TEST(HigherOrderGrad, EveryDifferentiableOpHasACase) {
  std::set<std::string> covered;
  for (const Case& c : cases()) {
    ASSERT_NE(find_op(c.op), nullptr) << c.op;
    covered.insert(c.op);
  }
  std::vector<std::string> missing;
  for (const OpDef& def : all_ops()) {
    if (!def.differentiable || def.infer == nullptr) continue;
    EXPECT_NE(def.grad, nullptr) << def.name << " is differentiable but has no gradient";
    if (!covered.contains(std::string(def.name))) missing.emplace_back(def.name);
  }
  EXPECT_TRUE(missing.empty()) << "differentiable ops without a case in tests/frontend/higher_order_grad_test.cc: "
                               << fmt::format("{}", fmt::join(missing, ", "));
}

TEST(HigherOrderGrad, FirstOrderMatchesFiniteDifferences) {
  for (const Case& c : cases()) {
    Prepared s(c);
    std::vector<std::vector<double>> want = numeric(s, Order::kFirst, imperative(s));
    if (c.zero_grad)
      for (auto& w : want) std::fill(w.begin(), w.end(), 0.0);
    expect_close(s, analytic(s, Order::kFirst, imperative(s)), want, "first-order gradient");
  }
}

TEST(HigherOrderGrad, SecondOrderMatchesFiniteDifferences) {
  for (const Case& c : cases()) {
    if (!c.not_twice.empty()) continue;
    Prepared s(c);
    expect_close(s, analytic(s, Order::kHvp, imperative(s)), numeric(s, Order::kHvp, imperative(s)),
                 "Hessian-vector product");
    expect_close(s, analytic(s, Order::kSquare, imperative(s)), numeric(s, Order::kSquare, imperative(s)),
                 "gradient of the squared gradient");
  }
}

// A hybridized block around the op: its inputs are the block's inputs.
struct OpBlock : nn::HybridBlock {
  const Prepared* s = nullptr;
  std::vector<NDArray> forward(std::span<const NDArray> xs) override {
    return s->c.fn ? s->c.fn(xs, s->attrs) : invoke(s->def.id, xs, s->attrs);
  }
};

TEST(HigherOrderGrad, UnsupportedSecondOrderIsAnErrorNamingTheOp) {
  int checked = 0;
  for (const Case& c : cases()) {
    if (c.not_twice.empty()) continue;
    Prepared s(c);
    std::string msg = test::error_of<NotSupported>([&] { analytic(s, Order::kSquare, imperative(s)); });
    EXPECT_NE(msg.find(c.not_twice), std::string::npos) << describe(c) << ": " << msg;
    OpBlock block;
    block.s = &s;
    block.hybridize();
    auto hybrid = [&](std::span<const NDArray> xs) { return block(xs); };
    msg = test::error_of<NotSupported>([&] { analytic(s, Order::kSquare, hybrid); });
    EXPECT_NE(msg.find(c.not_twice), std::string::npos) << describe(c) << " hybridized: " << msg;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(HigherOrderGrad, HybridizedAgreesWithImperative) {
  int compared = 0;
  for (const Case& c : cases()) {
    Prepared s(c);
    // BatchNorm (which mutates its moving statistics, block inputs here) is
    // compared through layers in the critic below; ops that draw per call
    // draw differently compiled.
    if (!c.not_twice.empty() || !s.def.mutate_inputs.empty() || c.fn || draws_per_call(s.def.id)) continue;
    OpBlock block;
    block.s = &s;
    block.hybridize();
    auto hybrid = [&](std::span<const NDArray> xs) { return block(xs); };
    for (Order order : {Order::kHvp, Order::kSquare}) {
      std::vector<std::vector<double>> want = analytic(s, order, imperative(s));
      std::vector<std::vector<double>> got;
      try {
        got = analytic(s, order, hybrid);
      } catch (const std::exception& e) {
        ADD_FAILURE() << describe(c) << " hybridized: " << e.what();
        break;
      }
      Prepared tight(c);
      tight.tol = c.dtype == DType::kFloat64 ? 1e-10 : 1e-5;
      expect_close(tight, got, want, "hybridized against imperative second order");
      ++compared;
    }
  }
  EXPECT_GT(compared, 100);
}

// A gradient penalty (WGAN-GP) through a small convolutional critic:
// p = sum(d/dx sum(net(x))^2). The parameters' gradients of p must be the
// same imperative and hybridized (the hybridized block replays its forward
// for create_graph), and match central differences on a few weights.
struct Critic {
  nn::HybridSequential net;
  Critic() {
    net.add(nn::Conv2D(4, 3, 1, 1), nn::BatchNorm(), nn::Activation("tanh"), nn::AvgPool2D(2, 2), nn::Flatten(),
            nn::Dense(3), nn::Activation("softrelu"), nn::Dense(1));
    nd::random::seed(5);
    net.initialize(init::Normal(0.3));
    net(nd::zeros({2, 2, 6, 6}));  // deferred shapes
  }
};

NDArray penalty(nn::HybridSequential& net, const NDArray& x0) {
  NDArray x = x0.copy();
  x.attach_grad();
  autograd::Record record;
  std::vector<NDArray> heads{nd::sum(net(x))}, vars{x};
  NDArray gx = autograd::grad(heads, vars, {}, false, true)[0];
  return nd::sum(gx * gx);
}

std::map<std::string, std::vector<double>> penalty_grads(nn::HybridSequential& net, const NDArray& x) {
  net.zero_grad();
  NDArray p = penalty(net, x);
  autograd::backward({p});
  std::map<std::string, std::vector<double>> out;
  for (const auto& [name, param] : net.collect_params())
    if (!param.is_aux()) out[name] = param.grad().to_vector<double>();
  return out;
}

TEST(HigherOrderGrad, GradientPenaltyThroughAHybridizedCritic) {
  Critic c;
  nd::random::seed(6);
  NDArray x = nd::random::normal({2, 2, 6, 6});
  auto imperative_grads = penalty_grads(c.net, x);
  c.net.hybridize();
  auto hybrid_grads = penalty_grads(c.net, x);
  auto again = penalty_grads(c.net, x);  // the cached graph, a second call
  ASSERT_EQ(imperative_grads.size(), hybrid_grads.size());
  for (const auto& [name, want] : imperative_grads) {
    const std::vector<double>& got = hybrid_grads[name];
    ASSERT_EQ(got.size(), want.size()) << name;
    double scale = 1e-6;
    for (double d : want) scale = std::max(scale, std::fabs(d));
    bool nonzero = false;
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_NEAR(got[k], want[k], 1e-5 * scale) << name << " element " << k;
      EXPECT_EQ(again[name][k], got[k]) << name << " element " << k;
      nonzero = nonzero || want[k] != 0;
    }
    // The last bias shifts the output only: d/dx of the output does not see it.
    if (name != "7.bias") EXPECT_TRUE(nonzero) << name << ": the penalty's gradient is zero everywhere";
  }
  // Central differences of the penalty on a few weights of the first and
  // the last layers (float32: a larger step, a looser bound).
  c.net.hybridize(false);
  for (const std::string name : {"0.weight", "5.weight", "7.weight"}) {
    nn::Parameter p = c.net.collect_params()[name];
    NDArray w = p.data();
    std::vector<double> base = w.to_vector<double>();
    for (size_t k : {size_t{0}, base.size() / 2, base.size() - 1}) {
      auto at = [&](double delta) {
        std::vector<double> v = base;
        v[k] += delta;
        w.assign(nd::array(v, w.shape()).astype(w.dtype()));
        return penalty(c.net, x).item<double>();
      };
      const double eps = 1e-2;
      double numeric = (at(eps) - at(-eps)) / (2 * eps);
      w.assign(nd::array(base, w.shape()).astype(w.dtype()));
      double analytic = imperative_grads[name][k];
      EXPECT_NEAR(analytic, numeric, 2e-2 * std::max(1.0, std::fabs(numeric))) << name << " element " << k;
    }
  }
}

}  // namespace
}  // namespace kiln
