// Elementwise arithmetic on NDArrays: operators and nd functions of the
// elemwise family. Each is one call to `invoke`; dtype rules are in
// ir/ops/elemwise.h (binary operands need one dtype; comparisons give 1/0 in
// that dtype; exp/log/sqrt/tanh/sigmoid need floating point).
//
//   NDArray x = nd::arange(6).reshape({2, 3});
//   NDArray y = (x + nd::ones({3})) * 2.0;        // broadcast_add, then _mul_scalar
//   NDArray m = nd::where(x > 2.0, x, -x);        // _greater_scalar, negative, where
//   NDArray p = nd::clip(nd::exp(x), 0, 100);
//
// Array-array operators broadcast as NumPy does (the elemwise_* op when the
// shapes are equal, broadcast_* otherwise); a mismatch throws ShapeError at
// the call and queues nothing.
#pragma once

#include "frontend/ndarray.h"

namespace kiln {

// lhs op rhs with broadcasting.
NDArray operator+(const NDArray& lhs, const NDArray& rhs);
NDArray operator-(const NDArray& lhs, const NDArray& rhs);
NDArray operator*(const NDArray& lhs, const NDArray& rhs);
NDArray operator/(const NDArray& lhs, const NDArray& rhs);
// x op scalar and scalar op x (_plus_scalar, _rminus_scalar, ...).
NDArray operator+(const NDArray& x, double s);
NDArray operator-(const NDArray& x, double s);
NDArray operator*(const NDArray& x, double s);
NDArray operator/(const NDArray& x, double s);
NDArray operator+(double s, const NDArray& x);
NDArray operator-(double s, const NDArray& x);
NDArray operator*(double s, const NDArray& x);
NDArray operator/(double s, const NDArray& x);
// -x.
NDArray operator-(const NDArray& x);

// Comparisons give an array of 1 and 0 in the operands' dtype (not bool).
NDArray operator==(const NDArray& lhs, const NDArray& rhs);
NDArray operator!=(const NDArray& lhs, const NDArray& rhs);
NDArray operator>(const NDArray& lhs, const NDArray& rhs);
NDArray operator>=(const NDArray& lhs, const NDArray& rhs);
NDArray operator<(const NDArray& lhs, const NDArray& rhs);
NDArray operator<=(const NDArray& lhs, const NDArray& rhs);
NDArray operator==(const NDArray& x, double s);
NDArray operator!=(const NDArray& x, double s);
NDArray operator>(const NDArray& x, double s);
NDArray operator>=(const NDArray& x, double s);
NDArray operator<(const NDArray& x, double s);
NDArray operator<=(const NDArray& x, double s);
NDArray operator==(double s, const NDArray& x);
NDArray operator!=(double s, const NDArray& x);
NDArray operator>(double s, const NDArray& x);
NDArray operator>=(double s, const NDArray& x);
NDArray operator<(double s, const NDArray& x);
NDArray operator<=(double s, const NDArray& x);

namespace nd {

// Elementwise max/min with broadcasting or a scalar; NaN propagates.
NDArray maximum(const NDArray& lhs, const NDArray& rhs);
NDArray maximum(const NDArray& x, double s);
NDArray maximum(double s, const NDArray& x);
NDArray minimum(const NDArray& lhs, const NDArray& rhs);
NDArray minimum(const NDArray& x, double s);
NDArray minimum(double s, const NDArray& x);
// Remainders with broadcasting: mod has the sign of rhs (NumPy's mod), fmod
// the sign of lhs (C's fmod); an integer rhs of 0 gives 0.
NDArray mod(const NDArray& lhs, const NDArray& rhs);
NDArray fmod(const NDArray& lhs, const NDArray& rhs);
// base ** exponent with broadcasting or a scalar on either side.
NDArray pow(const NDArray& base, const NDArray& exponent);
NDArray pow(const NDArray& base, double exponent);
NDArray pow(double base, const NDArray& exponent);

// e ** x (floating point).
NDArray exp(const NDArray& x);
// Natural logarithm (floating point).
NDArray log(const NDArray& x);
// Square root (floating point).
NDArray sqrt(const NDArray& x);
// x * x.
NDArray square(const NDArray& x);
// Hyperbolic tangent (floating point).
NDArray tanh(const NDArray& x);
NDArray erf(const NDArray& x);  // the Gauss error function
// Trigonometric and hyperbolic functions and their inverses (floating point;
// NaN outside an inverse's domain).
NDArray sin(const NDArray& x);
NDArray cos(const NDArray& x);
NDArray tan(const NDArray& x);
NDArray arcsin(const NDArray& x);
NDArray arccos(const NDArray& x);
NDArray arctan(const NDArray& x);
NDArray sinh(const NDArray& x);
NDArray cosh(const NDArray& x);
NDArray arcsinh(const NDArray& x);
NDArray arccosh(const NDArray& x);
NDArray arctanh(const NDArray& x);
// Rounding (floating point): round halves away from zero, rint halves to even.
NDArray round(const NDArray& x);
NDArray rint(const NDArray& x);
NDArray ceil(const NDArray& x);
NDArray floor(const NDArray& x);
// 1, -1 or x itself (zeros, NaN) by the sign of x.
NDArray sign(const NDArray& x);
// 1 / (1 + exp(-x)) (floating point).
NDArray sigmoid(const NDArray& x);
// max(x, 0).
NDArray relu(const NDArray& x);
// |x|.
NDArray abs(const NDArray& x);
// -x.
NDArray negative(const NDArray& x);
// min(max(x, lo), hi); bounds converted to x's dtype.
NDArray clip(const NDArray& x, double lo, double hi);
// x where `condition` is nonzero, else y; all three broadcast (x and y share a dtype).
NDArray where(const NDArray& condition, const NDArray& x, const NDArray& y);
// x converted to `dtype` (a copy even when the dtype is unchanged).
NDArray cast(const NDArray& x, DType dtype);

}  // namespace nd
}  // namespace kiln
