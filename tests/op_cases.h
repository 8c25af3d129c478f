// The table of op cases that registry-walking tests share: one or more
// cases per op with a CPU kernel, small random inputs, per-op tolerances.
// tests/cuda/op_parity_test.cc runs them on a GPU against the CPU;
// tests/frontend/low_precision_test.cc runs them in float16 and bfloat16
// against float32. `Cases.EveryOpWithACpuKernelHasACase` fails when an op is
// added without a case, so no op can skip either comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "frontend/ndarray.h"
#include "ir/op.h"

namespace kiln::op_cases {

// One input: shape, dtype and the range of its random values (`integer`:
// whole numbers in [lo, hi], for labels and indices).
struct InputSpec {
  Shape shape;
  double lo = -1, hi = 1;
  bool integer = false;
  DType dtype = DType::kFloat32;
};

struct Case {
  std::string op;
  std::vector<InputSpec> inputs;
  AttrMap attrs;
  double rtol = 1e-5, atol = 1e-6;
  bool train = false;  // run under autograd::TrainMode (Dropout, BatchNorm)
};

inline InputSpec in(Shape s, double lo = -1, double hi = 1) { return {s, lo, hi, false, DType::kFloat32}; }
inline InputSpec ints(Shape s, double lo, double hi) { return {s, lo, hi, true, DType::kFloat32}; }

// clang-format off
inline const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
    // ---- init
    {"_zeros", {}, {{"shape", "(2, 3)"}}},
    {"_ones", {}, {{"shape", "(2, 3)"}, {"dtype", "int32"}}},
    {"_full", {}, {{"shape", "(4,)"}, {"value", "2.5"}}},
    {"_arange", {}, {{"start", "1"}, {"stop", "7"}, {"step", "0.5"}}},
    {"_random_uniform", {}, {{"a", "-1"}, {"b", "2"}, {"shape", "(5, 7)"}, {"seed", "3"}, {"offset", "10"}}},
    {"_random_normal", {}, {{"shape", "(5, 8)"}, {"seed", "4"}}, 1e-5, 1e-5},
    // ---- elemwise
    {"elemwise_add", {in({3, 5}), in({3, 5})}, {}},
    {"elemwise_sub", {in({3, 5}), in({3, 5})}, {}},
    {"elemwise_mul", {in({3, 5}), in({3, 5})}, {}},
    {"elemwise_div", {in({3, 5}), in({3, 5}, 0.5, 2)}, {}},
    {"broadcast_add", {in({2, 3, 4}), in({3, 1})}, {}},
    {"broadcast_sub", {in({2, 1, 4}), in({3, 4})}, {}},
    {"broadcast_mul", {in({2, 3, 4}), in({4})}, {}},
    {"broadcast_div", {in({2, 3, 4}), in({2, 1, 1}, 0.5, 2)}, {}},
    {"broadcast_power", {in({2, 3}, 0.5, 2), in({3}, -1, 2)}, {}},
    {"broadcast_maximum", {in({2, 3}), in({1, 3})}, {}},
    {"broadcast_minimum", {in({2, 3}), in({2, 1})}, {}},
    {"broadcast_mod", {in({2, 3}, -3, 3), in({3}, 0.5, 2)}, {}},
    {"_kiln_broadcast_fmod", {in({2, 3}, -3, 3), in({3}, 0.5, 2)}, {}},
    {"broadcast_equal", {ints({2, 3}, 0, 2), ints({3}, 0, 2)}, {}},
    {"broadcast_not_equal", {ints({2, 3}, 0, 2), ints({3}, 0, 2)}, {}},
    {"broadcast_greater", {in({2, 3}), in({3})}, {}},
    {"broadcast_greater_equal", {ints({2, 3}, 0, 2), ints({3}, 0, 2)}, {}},
    {"broadcast_lesser", {in({2, 3}), in({3})}, {}},
    {"broadcast_lesser_equal", {ints({2, 3}, 0, 2), ints({3}, 0, 2)}, {}},
    {"_plus_scalar", {in({7})}, {{"scalar", "1.5"}}},
    {"_minus_scalar", {in({7})}, {{"scalar", "1.5"}}},
    {"_rminus_scalar", {in({7})}, {{"scalar", "1.5"}}},
    {"_mul_scalar", {in({7})}, {{"scalar", "-2"}}},
    {"_div_scalar", {in({7})}, {{"scalar", "3"}}},
    {"_rdiv_scalar", {in({7}, 0.5, 2)}, {{"scalar", "3"}}},
    {"_power_scalar", {in({7}, 0.1, 2)}, {{"scalar", "2.5"}}},
    {"_rpower_scalar", {in({7})}, {{"scalar", "1.7"}}},
    {"_maximum_scalar", {in({7})}, {{"scalar", "0.2"}}},
    {"_minimum_scalar", {in({7})}, {{"scalar", "0.2"}}},
    {"_equal_scalar", {ints({7}, 0, 2)}, {{"scalar", "1"}}},
    {"_not_equal_scalar", {ints({7}, 0, 2)}, {{"scalar", "1"}}},
    {"_greater_scalar", {in({7})}, {{"scalar", "0"}}},
    {"_greater_equal_scalar", {ints({7}, 0, 2)}, {{"scalar", "1"}}},
    {"_lesser_scalar", {in({7})}, {{"scalar", "0"}}},
    {"_lesser_equal_scalar", {ints({7}, 0, 2)}, {{"scalar", "1"}}},
    {"exp", {in({1037}, -5, 5)}, {}},  // odd length: the vector loop's tail
    {"log", {in({33}, 0.01, 10)}, {}},
    {"sqrt", {in({33}, 0, 10)}, {}},
    {"square", {in({33})}, {}},
    {"tanh", {in({33}, -4, 4)}, {}},
    {"erf", {in({33}, -3, 3)}, {}},
    {"sin", {in({33}, -4, 4)}, {}},
    {"cos", {in({33}, -4, 4)}, {}},
    {"tan", {in({33}, -1.2, 1.2)}, {}},
    {"arcsin", {in({33}, -0.9, 0.9)}, {}},
    {"arccos", {in({33}, -0.9, 0.9)}, {}},
    {"arctan", {in({33}, -4, 4)}, {}},
    {"sinh", {in({33}, -3, 3)}, {}},
    {"cosh", {in({33}, -3, 3)}, {}},
    {"arcsinh", {in({33}, -4, 4)}, {}},
    {"arccosh", {in({33}, 1.1, 5)}, {}},
    {"arctanh", {in({33}, -0.9, 0.9)}, {}},
    {"round", {in({33}, -4, 4)}, {}},
    {"rint", {in({33}, -4, 4)}, {}},
    {"ceil", {in({33}, -4, 4)}, {}},
    {"floor", {in({33}, -4, 4)}, {}},
    {"sign", {in({33})}, {}},
    {"sigmoid", {in({33}, -6, 6)}, {}},
    {"relu", {in({33})}, {}},
    {"abs", {in({33})}, {}},
    {"negative", {in({33})}, {}},
    {"clip", {in({33})}, {{"a_min", "-0.5"}, {"a_max", "0.3"}}},
    {"_copy", {in({2, 3})}, {}},
    {"Cast", {in({2, 5}, -5, 5)}, {{"dtype", "int32"}}},
    {"Cast", {in({2, 5}, -5, 5)}, {{"dtype", "float16"}}, 1e-3, 1e-3},
    {"where", {ints({2, 3}, 0, 1), in({2, 3}), in({2, 3})}, {}},
    {"BlockGrad", {in({4})}, {}},
    // ---- reduce
    {"sum", {in({3, 4, 5})}, {{"axis", "(1,)"}}},
    {"sum", {in({3, 4, 5})}, {}, 1e-5, 1e-5},
    {"mean", {in({3, 4, 5})}, {{"axis", "(0, 2)"}, {"keepdims", "True"}}},
    {"max", {in({3, 4, 5})}, {{"axis", "(1,)"}}},
    {"min", {in({3, 4, 5})}, {{"axis", "(-1,)"}, {"exclude", "True"}}},
    {"prod", {in({3, 4}, 0.5, 1.5)}, {{"axis", "(1,)"}}},
    {"argmax", {in({3, 4, 5})}, {{"axis", "1"}}},
    {"argmin", {in({3, 4, 5})}, {{"axis", "2"}, {"keepdims", "True"}}},
    {"norm", {in({3, 4})}, {{"ord", "2"}, {"axis", "(1,)"}}},
    {"norm", {in({3, 4})}, {{"ord", "1"}}},
    // few outputs, long reductions: reduce.cu's two passes (several chunks per output; float4 rows
    // when H*W % 4 == 0, scalar when odd; strided single axis; one output of odd length)
    {"sum", {in({8, 16, 33, 33})}, {{"axis", "(0, 2, 3)"}}, 1e-5, 1e-4},
    {"sum", {in({8, 16, 32, 32})}, {{"axis", "(0, 2, 3)"}}, 1e-5, 1e-4},
    {"mean", {in({8, 16, 32, 32})}, {{"axis", "(0, 2, 3)"}, {"keepdims", "True"}}, 1e-5, 1e-6},
    {"sum", {in({5000, 3})}, {{"axis", "(0,)"}}, 1e-5, 1e-4},
    {"sum", {in({100003})}, {}, 1e-5, 1e-4},
    {"mean", {in({65536})}, {}, 1e-5, 1e-6},
    {"max", {in({8, 16, 32, 32})}, {{"axis", "(0, 2, 3)"}}},
    {"min", {in({8, 16, 33, 33})}, {{"axis", "(1,)"}, {"exclude", "True"}}},
    {"prod", {in({5001}, 0.999, 1.001)}, {}, 1e-4, 1e-6},
    {"norm", {in({8, 16, 33, 33})}, {{"ord", "2"}, {"axis", "(0, 2, 3)"}}, 1e-5, 1e-5},
    {"norm", {in({16, 4096})}, {{"ord", "1"}, {"axis", "(1,)"}}, 1e-5, 1e-4},
    {"argmax", {in({3000, 4})}, {{"axis", "0"}}},
    // ---- linalg
    {"dot", {in({3, 4}), in({4, 5})}, {}, 1e-5, 1e-5},
    {"dot", {in({4, 3}), in({5, 4})}, {{"transpose_a", "True"}, {"transpose_b", "True"}}, 1e-5, 1e-5},
    {"batch_dot", {in({2, 3, 4}), in({2, 4, 5})}, {}, 1e-5, 1e-5},
    {"batch_dot", {in({2, 4, 3}), in({2, 4, 5})}, {{"transpose_a", "True"}}, 1e-5, 1e-5},
    // ---- matrix
    {"Reshape", {in({2, 3, 4})}, {{"shape", "(4, -1)"}}},
    {"transpose", {in({2, 3, 4})}, {{"axes", "(1, 0, 2)"}}},
    {"transpose", {in({2, 3, 4})}, {}},
    {"slice", {in({4, 5})}, {{"begin", "(1, 0)"}, {"end", "(3, 5)"}, {"step", "(1, 2)"}}},
    {"slice", {in({4, 5})}, {{"begin", "(None,)"}, {"end", "(None,)"}, {"step", "(-1,)"}}},
    {"slice_axis", {in({3, 6})}, {{"axis", "1"}, {"begin", "1"}, {"end", "4"}}},
    {"Concat", {in({2, 3}), in({2, 2})}, {{"num_args", "2"}, {"dim", "1"}}},
    {"stack", {in({2, 3}), in({2, 3})}, {{"num_args", "2"}, {"axis", "1"}}},
    {"SliceChannel", {in({2, 4, 3})}, {{"num_outputs", "2"}, {"axis", "1"}}},
    {"take", {in({5, 3}), ints({4}, 0, 4)}, {}},
    {"one_hot", {ints({4}, 0, 4)}, {{"depth", "5"}}},
    {"expand_dims", {in({2, 3})}, {{"axis", "1"}}},
    {"broadcast_to", {in({3, 1})}, {{"shape", "(2, 3, 4)"}}},
    {"_backward_slice", {in({2, 3})}, {{"begin", "(1, 0)"}, {"end", "(3, 5)"}, {"step", "(1, 2)"}, {"data_shape", "(4, 5)"}}},
    {"_backward_slice_axis", {in({3, 3})}, {{"axis", "1"}, {"begin", "1"}, {"end", "4"}, {"data_shape", "(3, 6)"}}},
    {"_backward_take", {in({4, 3}), ints({4}, 0, 4)}, {{"data_shape", "(5, 3)"}}},
    // ---- conv (cuDNN)
    {"Convolution", {in({2, 3, 6, 6}), in({4, 3, 3, 3}), in({4})},
     {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"pad", "(1, 1)"}}, 1e-4, 1e-4},
    {"Convolution", {in({2, 4, 7, 7}), in({4, 2, 3, 3})},
     {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"stride", "(2, 2)"}, {"num_group", "2"}, {"no_bias", "True"}}, 1e-4, 1e-4},
    {"_backward_Convolution_data", {in({2, 4, 6, 6}), in({4, 3, 3, 3})},
     {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"pad", "(1, 1)"}, {"data_shape", "(2, 3, 6, 6)"}}, 1e-4, 1e-4},
    {"_backward_Convolution_weight", {in({2, 4, 6, 6}), in({2, 3, 6, 6})},
     {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"pad", "(1, 1)"}}, 1e-4, 1e-4},
    {"Pooling", {in({2, 3, 6, 6})}, {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "max"}}},
    {"Pooling", {in({2, 3, 5, 5})}, {{"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"}, {"pool_type", "avg"}}},
    {"Pooling", {in({2, 3, 5, 5})}, {{"global_pool", "True"}, {"pool_type", "avg"}}},
    {"_backward_Pooling", {in({2, 3, 3, 3}), in({2, 3, 6, 6}), in({2, 3, 3, 3})},
     {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "avg"}}},
    // channel-last (layout NHWC, weights [F, kh, kw, C / groups]): oneDNN on the user's arrays, cuDNN NHWC descriptors
    {"Convolution", {in({2, 6, 6, 3}), in({4, 3, 3, 3}), in({4})},
     {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"pad", "(1, 1)"}, {"layout", "NHWC"}}, 1e-4, 1e-4},
    {"Convolution", {in({2, 7, 7, 4}), in({4, 3, 3, 2})},
     {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"stride", "(2, 2)"}, {"num_group", "2"}, {"no_bias", "True"},
      {"layout", "NHWC"}}, 1e-4, 1e-4},
    {"_backward_Convolution_data", {in({2, 6, 6, 4}), in({4, 3, 3, 3})},
     {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"pad", "(1, 1)"}, {"data_shape", "(2, 6, 6, 3)"}, {"layout", "NHWC"}},
     1e-4, 1e-4},
    {"_backward_Convolution_weight", {in({2, 6, 6, 4}), in({2, 6, 6, 3})},
     {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"pad", "(1, 1)"}, {"layout", "NHWC"}}, 1e-4, 1e-4},
    {"Pooling", {in({2, 6, 6, 3})}, {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "max"}, {"layout", "NHWC"}}},
    {"Pooling", {in({2, 5, 5, 3})}, {{"global_pool", "True"}, {"pool_type", "avg"}, {"layout", "NHWC"}}},
    {"_backward_Pooling", {in({2, 3, 3, 3}), in({2, 6, 6, 3}), in({2, 3, 3, 3})},
     {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "avg"}, {"layout", "NHWC"}}},
    {"BatchNorm", {in({4, 3, 2, 2}), in({3}), in({3}), in({3}), in({3}, 0.5, 2)}, {{"fix_gamma", "False"}}, 1e-4, 1e-5, true},
    {"BatchNorm", {in({4, 3, 2, 2}), in({3}), in({3}), in({3}), in({3}, 0.5, 2)}, {{"fix_gamma", "False"}}, 1e-4, 1e-5, false},
    {"_backward_BatchNorm", {in({4, 3, 2, 2}), in({4, 3, 2, 2}), in({3}), in({3}), in({3}, 0.5, 2)},
     {{"fix_gamma", "False"}}, 1e-4, 1e-5, true},
    // batch_norm.cu's (channel, chunk) grid: channels spanning several chunks, scalar (H*W odd) and
    // float4 rows, 2-D (N, C) data, other axes, a large mean against the spread, global statistics
    {"BatchNorm", {in({8, 16, 33, 33}), in({16}), in({16}), in({16}), in({16}, 0.5, 2)}, {{"fix_gamma", "False"}}, 1e-4, 1e-4, true},
    {"BatchNorm", {in({8, 16, 33, 33}), in({16}), in({16}), in({16}), in({16}, 0.5, 2)}, {{"fix_gamma", "False"}}, 1e-4, 1e-4, false},
    {"BatchNorm", {in({32, 4, 32, 32}), in({4}), in({4}), in({4}), in({4}, 0.5, 2)}, {}, 1e-4, 1e-4, true},
    {"BatchNorm", {in({4, 8, 33, 33}, 99, 101), in({8}), in({8}), in({8}), in({8}, 0.5, 2)}, {{"fix_gamma", "False"}}, 1e-4, 1e-4, true},
    {"BatchNorm", {in({5000, 3}), in({3}), in({3}), in({3}), in({3}, 0.5, 2)}, {{"fix_gamma", "False"}, {"momentum", "0.8"}}, 1e-4, 1e-4, true},
    {"BatchNorm", {in({16, 300, 5}), in({5}), in({5}), in({5}), in({5}, 0.5, 2)}, {{"fix_gamma", "False"}, {"axis", "-1"}}, 1e-4, 1e-4, true},
    {"BatchNorm", {in({100, 6, 20, 12}), in({20}), in({20}), in({20}), in({20}, 0.5, 2)}, {{"fix_gamma", "False"}, {"axis", "2"}, {"eps", "1e-5"}}, 1e-4, 1e-4, true},
    {"BatchNorm", {in({8, 16, 32, 32}), in({16}), in({16}), in({16}), in({16}, 0.5, 2)}, {{"fix_gamma", "False"}, {"use_global_stats", "True"}}, 1e-4, 1e-4, true},
    {"_backward_BatchNorm", {in({8, 16, 33, 33}), in({8, 16, 33, 33}), in({16}), in({16}), in({16}, 0.5, 2)},
     {{"fix_gamma", "False"}}, 1e-4, 1e-4, true},
    {"_backward_BatchNorm", {in({32, 4, 32, 32}), in({32, 4, 32, 32}), in({4}), in({4}), in({4}, 0.5, 2)},
     {{"fix_gamma", "False"}}, 1e-4, 1e-4, true},
    {"_backward_BatchNorm", {in({32, 4, 32, 32}), in({32, 4, 32, 32}), in({4}), in({4}), in({4}, 0.5, 2)},
     {}, 1e-4, 1e-4, true},
    {"_backward_BatchNorm", {in({8, 16, 33, 33}), in({8, 16, 33, 33}), in({16}), in({16}), in({16}, 0.5, 2)},
     {{"fix_gamma", "False"}}, 1e-4, 1e-4, false},
    {"_backward_BatchNorm", {in({5000, 3}), in({5000, 3}), in({3}), in({3}), in({3}, 0.5, 2)},
     {{"fix_gamma", "False"}}, 1e-4, 1e-4, true},
    {"_backward_BatchNorm", {in({100, 6, 20, 12}), in({100, 6, 20, 12}), in({20}), in({20}), in({20}, 0.5, 2)},
     {{"fix_gamma", "False"}, {"axis", "2"}}, 1e-4, 1e-4, true},
    // ---- nn
    {"FullyConnected", {in({3, 4}), in({5, 4}), in({5})}, {{"num_hidden", "5"}}, 1e-5, 1e-5},
    {"FullyConnected", {in({3, 2, 2}), in({5, 4})}, {{"num_hidden", "5"}, {"no_bias", "True"}}, 1e-5, 1e-5},
    {"Activation", {in({20}, -3, 3)}, {{"act_type", "relu"}}},
    {"Activation", {in({20}, -3, 3)}, {{"act_type", "softrelu"}}},
    {"_backward_Activation", {in({20}), in({20}, 0.01, 0.99)}, {{"act_type", "sigmoid"}}},
    {"_backward_Activation", {in({20}), in({20}, -0.9, 0.9)}, {{"act_type", "tanh"}}},
    {"LeakyReLU", {in({20})}, {{"act_type", "leaky"}, {"slope", "0.1"}}},
    {"LeakyReLU", {in({20})}, {{"act_type", "gelu"}}, 1e-5, 1e-5},
    {"LeakyReLU", {in({20}, -4, 4)}, {{"act_type", "gelu_tanh"}}, 1e-5, 1e-5},
    {"_backward_LeakyReLU", {in({20}), in({20}, -4, 4)}, {{"act_type", "gelu_tanh"}}, 1e-5, 1e-5},
    {"_backward_LeakyReLU", {in({20}), in({20})}, {{"act_type", "elu"}, {"slope", "0.3"}}, 1e-5, 1e-5},
    {"Dropout", {in({4, 6})}, {{"p", "0.5"}, {"mode", "always"}, {"seed", "11"}, {"offset", "5"}}},
    {"Dropout", {in({4, 6})}, {{"p", "0.3"}, {"seed", "12"}, {"axes", "(1,)"}}, 1e-5, 1e-6, true},
    {"Flatten", {in({2, 3, 4})}, {}},
    {"softmax", {in({3, 7}, -3, 3)}, {}},
    {"softmax", {in({4, 6}), ints({4}, 0, 7)}, {{"use_length", "True"}}, 1e-5, 1e-6},
    {"softmax", {in({2, 5, 3}), ints({2, 3}, 0, 5)}, {{"axis", "1"}, {"use_length", "True"}}, 1e-5, 1e-6},
    {"softmax", {in({3, 4, 5}, -3, 3)}, {{"axis", "1"}, {"temperature", "2"}}},
    {"log_softmax", {in({3, 7}, -3, 3)}, {}},
    {"_backward_softmax", {in({3, 7}), in({3, 7}, 0, 1)}, {}},
    {"_backward_log_softmax", {in({3, 7}), in({3, 7}, -3, 0)}, {}},
    {"pick", {in({3, 4}), ints({3}, 0, 3)}, {{"axis", "1"}}},
    {"_backward_pick", {in({3}), ints({3}, 0, 3)}, {{"axis", "1"}, {"data_shape", "(3, 4)"}}},
    {"_kiln_softmax_cross_entropy", {in({4, 5}, -3, 3), ints({4}, 0, 4)}, {}, 1e-5, 1e-5},
    {"add_n", {in({5}), in({5}), in({5})}, {{"num_args", "3"}}},
    // more inputs than one CUDA launch takes (8): 16-bit partial sums stay float32
    {"add_n", {in({37}), in({37}), in({37}), in({37}), in({37}), in({37}), in({37}), in({37}), in({37}), in({37})},
     {{"num_args", "10"}}, 1e-5, 1e-5},
    {"Embedding", {ints({2, 3}, 0, 4), in({5, 4})}, {{"input_dim", "5"}, {"output_dim", "4"}}},
    {"_backward_kiln_softmax_cross_entropy", {in({4}), in({4, 5}, -3, 3), ints({4}, 0, 4)}, {}, 1e-5, 1e-6},
    // ---- optimizer (weight, grad, states)
    {"sgd_update", {in({9}), in({9})}, {{"lr", "0.1"}, {"wd", "0.01"}, {"clip_gradient", "0.5"}}},
    {"sgd_mom_update", {in({9}), in({9}), in({9})}, {{"lr", "0.1"}, {"momentum", "0.9"}, {"wd", "0.01"}}},
    {"nag_mom_update", {in({9}), in({9}), in({9})}, {{"lr", "0.1"}, {"momentum", "0.9"}}},
    {"adam_update", {in({9}), in({9}), in({9}), in({9}, 0.1, 1)}, {{"lr", "0.01"}, {"wd", "0.001"}}},
    {"adamw_update", {in({9}), in({9}), in({9}), in({9}, 0.1, 1)},
     {{"lr", "0.9"}, {"eta", "0.01"}, {"wd", "0.1"}, {"clip_gradient", "0.5"}}},
    // ---- layer_norm
    {"LayerNorm", {in({4, 33}, -2, 3), in({33}), in({33})}, {}, 1e-5, 1e-5},
    {"LayerNorm", {in({3, 5, 6}, -2, 3), in({5}), in({5})}, {{"axis", "1"}, {"eps", "0.001"}}, 1e-5, 1e-5},
    {"_backward_LayerNorm", {in({40, 33}), in({40, 33}, -2, 3), in({33}), in({40, 1}), in({40, 1}, 0.5, 2)}, {}, 1e-4, 1e-5},
    {"_backward_LayerNorm", {in({3, 5, 6}), in({3, 5, 6}), in({5}), in({3, 1, 6}), in({3, 1, 6}, 0.5, 2)}, {{"axis", "1"}}, 1e-4, 1e-5},
    // ---- attention: partial tiles, causal with Tq < Tk, one query against many keys
    {"_kiln_attention", {in({2, 3, 37, 24}), in({2, 3, 37, 24}), in({2, 3, 37, 16})}, {{"causal", "True"}}, 1e-4, 1e-5},
    {"_kiln_attention", {in({3, 5, 8}), in({3, 70, 8}), in({3, 70, 8})}, {{"scale", "0.5"}}, 1e-4, 1e-5},
    {"_kiln_attention", {in({2, 1, 16}), in({2, 130, 16}), in({2, 130, 16})}, {{"causal", "True"}}, 1e-4, 1e-5},
    {"_backward_kiln_attention",
     {in({2, 2, 37, 16}), in({2, 2, 37}), in({2, 2, 37, 24}), in({2, 2, 37, 24}), in({2, 2, 37, 16}), in({2, 2, 37, 16}),
      in({2, 2, 37}, 2, 4)},
     {{"causal", "True"}}, 1e-4, 1e-5},
    {"_backward_kiln_attention",
     {in({3, 5, 8}), in({3, 5}), in({3, 5, 8}), in({3, 70, 8}), in({3, 70, 8}), in({3, 5, 8}), in({3, 5}, 4, 5)}, {}, 1e-4, 1e-5},
    // ---- fused layers
    {"_kiln_conv_act", {in({2, 3, 6, 6}), in({4, 3, 3, 3}), in({4})},
     {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"pad", "(1, 1)"}, {"act_type", "relu"}}, 1e-4, 1e-4},
    {"_kiln_conv_act", {in({2, 6, 6, 3}), in({4, 3, 3, 3}), in({4})},
     {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"pad", "(1, 1)"}, {"act_type", "relu"}, {"layout", "NHWC"}}, 1e-4,
     1e-4},
    {"_kiln_fc_act", {in({3, 4}), in({5, 4}), in({5})}, {{"num_hidden", "5"}, {"act_type", "relu"}}, 1e-5, 1e-5},
    // ---- fused elementwise: full, scalar, channel and row inputs; several outputs
    {"_kiln_fused_elemwise", {in({2, 3, 4}), in({1}), in({1, 3, 1})},
     {{"program", "in=f,s,c;%3=mul(%0,%1);%4=add(%3,%2);%5=relu(%4);%6=where(%5,%4,0.5);%7=sigmoid(%6);out=%7,%4"}}, 1e-5, 1e-6},
    {"_kiln_fused_elemwise", {in({3, 4}), in({4}, 0.5, 2)},
     {{"program", "in=f,r;%2=div(%0,%1);%3=exp(%2);%4=max(%3,%0);out=%4"}}, 1e-5, 1e-6},
  };
  return all;
}
// clang-format on

// Ops with a CPU kernel that have no case yet, each with the reason. Adding
// to this list needs a reason a reviewer accepts.
inline const std::map<std::string, std::string>& no_case() {
  static const std::map<std::string, std::string> m = {};
  return m;
}

inline NDArray make_input(const InputSpec& spec, std::mt19937& rng) {
  std::vector<float> values(static_cast<size_t>(spec.shape.size()));
  std::uniform_real_distribution<double> real(spec.lo, spec.hi);
  std::uniform_int_distribution<int64_t> whole(static_cast<int64_t>(spec.lo), static_cast<int64_t>(spec.hi));
  for (float& v : values) v = spec.integer ? static_cast<float>(whole(rng)) : static_cast<float>(real(rng));
  NDArray a = nd::array<float>(values, spec.shape);
  return spec.dtype == DType::kFloat32 ? a : a.astype(spec.dtype);
}

// Runs `c` on `device`; returns the outputs and then the mutated inputs, on cpu(0).
inline std::vector<NDArray> run_case(const Case& c, const std::vector<NDArray>& host_inputs, Device device) {
  const OpDef& def = *find_op(c.op);
  std::vector<NDArray> inputs;
  for (const NDArray& h : host_inputs) inputs.push_back(h.copy_to(device));  // fresh copies: some ops mutate
  OpAttrs attrs = def.parse_attrs ? def.parse_attrs(def.name, c.attrs) : OpAttrs();
  std::vector<NDArray> outputs;
  {
    std::optional<autograd::TrainMode> train;
    if (c.train) train.emplace();
    outputs = invoke(def.id, inputs, attrs, {.device = device});
  }
  for (int m : def.mutate_inputs) outputs.push_back(inputs[static_cast<size_t>(m)]);
  std::vector<NDArray> host;
  for (const NDArray& o : outputs) host.push_back(o.device().is_cpu() ? o : o.copy_to(Device::cpu(0)));
  return host;
}

inline std::string describe(const Case& c) {
  std::string s = c.op + "(";
  for (size_t i = 0; i < c.inputs.size(); ++i) s += (i ? ", " : "") + c.inputs[i].shape.to_string();
  s += ")";
  for (const auto& [k, v] : c.attrs) s += " " + k + "=" + v;
  return s;
}

// Outputs of `c` computed in the 16-bit type `low` (`got`) against a
// reference (`want`), element by element within two roundings of a 16-bit
// output (relative to the element and to the output's largest magnitude)
// plus the case's own tolerances; at most 3 failures per output, each naming
// the case, `what_want` and `what_got` ("float32" and "bfloat16", "cpu" and
// "cuda").
inline void expect_close_16bit(const Case& c, DType low, const std::vector<NDArray>& want,
                               const std::vector<NDArray>& got, std::string_view what_want,
                               std::string_view what_got) {
  ASSERT_EQ(want.size(), got.size()) << describe(c);
  const double eps = low == DType::kBfloat16 ? 2.0 / 256 : 2.0 / 2048;  // two half-ulps
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(want[k].shape(), got[k].shape()) << describe(c) << " output " << k;
    std::vector<double> w = want[k].to_vector<double>(), g = got[k].to_vector<double>();
    double scale = 0;
    for (double v : w)
      if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
    int reported = 0;
    for (size_t i = 0; i < w.size() && reported < 3; ++i) {
      if (std::isnan(w[i]) && std::isnan(g[i])) continue;
      const double tol = c.atol + c.rtol * std::abs(w[i]) + eps * (std::abs(w[i]) + scale);
      if (!(std::abs(w[i] - g[i]) <= tol)) {
        ADD_FAILURE() << describe(c) << " in " << dtype_name(low) << ": output " << k << " element " << i << ": "
                      << what_want << " " << w[i] << ", " << what_got << " " << g[i] << " (tolerance " << tol << ")";
        ++reported;
      }
    }
  }
}

}  // namespace kiln::op_cases
