// Attributes and shape rules of the matrix family: layout and indexing ops
// (Reshape, transpose, slice, slice_axis, Concat, stack, SliceChannel, take,
// one_hot, expand_dims, broadcast_to) and their gradients. Attribute names
// and defaults are MXNet's, so exported graphs round-trip.
//
// Every op but one_hot is differentiable; the gradients (ir/ops/matrix.cc)
// are layout ops again (Reshape, transpose, slice_axis, Concat, stack,
// SliceChannel, sum) except for slice, slice_axis and take, whose gradients
// are the backward ops declared below. Those are linear in out_grad and
// differentiable too, so higher-order gradients pass through them.
//
//   Shape s = infer_reshape(Shape{2, 3, 4}, {-4, 1, 2, -2}, false);   // [1,2,3,4]
//   auto r = slice_range(10, std::nullopt, std::nullopt, int64_t{-2}); // 9, 7, 5, 3, 1
//   NDArray y = invoke1(OpId::kTranspose, {x}, OpAttrs::make(TransposeAttrs{.axes = {1, 0}}));
//
// The functions here are pure and thread safe; the kernels
// (backends/cpu/matrix.cc) and NDArray::reshape use them so that every path
// applies the same rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/attrs.h"

namespace kiln {

// ---- attribute value types with their own codecs (found by ADL from ir/attrs.h)

// A tuple whose entries may be None, as MXNet writes slice bounds: "(0, None)".
struct OptIntTuple {
  std::vector<std::optional<int64_t>> v;
  OptIntTuple() = default;
  OptIntTuple(std::initializer_list<std::optional<int64_t>> values) : v(values) {}
  explicit OptIntTuple(std::vector<std::optional<int64_t>> values) : v(std::move(values)) {}
  size_t size() const { return v.size(); }
  bool empty() const { return v.empty(); }
  const std::optional<int64_t>& operator[](size_t i) const { return v[i]; }
  bool operator==(const OptIntTuple&) const = default;
};
OptIntTuple parse_attr(std::string_view s, OptIntTuple*);  // "(0, None)", "[None,2]", "()"
std::string print_attr(const OptIntTuple& v);              // "(0, None)"; one entry: "(3,)"

// take's handling of out-of-range indices: clip to [0, n-1], wrap modulo n,
// or raise IndexError (negative indices count from the end, as in NumPy).
enum class TakeMode : int8_t { kClip, kWrap, kRaise };
TakeMode parse_attr(std::string_view s, TakeMode*);  // "clip" | "wrap" | "raise"
std::string print_attr(TakeMode v);

// ---- attribute structs, one per op (MXNet names and defaults)

// Reshape. `shape` may hold MXNet's special values (see infer_reshape).
// `target_shape`/`keep_highest` are MXNet's deprecated spelling, read from
// old graphs: 0 in target_shape infers that dim, keep_highest keeps dim 0.
struct ReshapeAttrs {
  IntTuple shape;
  bool reverse = false;
  Shape target_shape;
  bool keep_highest = false;
  template <typename V>
  void fields(V& v) {
    v("shape", shape);
    v("reverse", reverse);
    v("target_shape", target_shape);
    v("keep_highest", keep_highest);
  }
};

// transpose. Empty axes reverse the axes; negative entries count from the end.
struct TransposeAttrs {
  IntTuple axes;
  template <typename V>
  void fields(V& v) {
    v("axes", axes);
  }
};

// slice: per leading axis i, elements begin[i], begin[i]+step[i], ... before
// end[i] (Python slice semantics; None = the default bound for the step's
// sign). Axes past begin's length are kept whole.
struct SliceAttrs {
  OptIntTuple begin, end, step;
  template <typename V>
  void fields(V& v) {
    v("begin", begin, kRequired);
    v("end", end, kRequired);
    v("step", step);
  }
};

// slice_axis: [begin, end) along one axis; end None means the axis length.
struct SliceAxisAttrs {
  int axis = 0;
  int64_t begin = 0;
  std::optional<int64_t> end;
  template <typename V>
  void fields(V& v) {
    v("axis", axis, kRequired);
    v("begin", begin, kRequired);
    v("end", end, kRequired);
  }
};

// Concat: joins num_args arrays along `dim`.
struct ConcatAttrs {
  int num_args = 1;
  int dim = 1;
  template <typename V>
  void fields(V& v) {
    v("num_args", num_args, kRequired);
    v("dim", dim);
  }
};

// stack: joins num_args same-shape arrays along a new axis.
struct StackAttrs {
  int axis = 0;
  int num_args = 1;
  template <typename V>
  void fields(V& v) {
    v("axis", axis);
    v("num_args", num_args, kRequired);
  }
};

// SliceChannel (split): num_outputs equal parts along `axis`; squeeze_axis
// drops that axis (then each part must have length 1 along it).
struct SplitAttrs {
  int num_outputs = 1;
  int axis = 1;
  bool squeeze_axis = false;
  template <typename V>
  void fields(V& v) {
    v("num_outputs", num_outputs, kRequired);
    v("axis", axis);
    v("squeeze_axis", squeeze_axis);
  }
};

// take(a, indices): a's sub-arrays along `axis` picked by indices (any
// numeric dtype, truncated to integers).
struct TakeAttrs {
  int axis = 0;
  TakeMode mode = TakeMode::kClip;
  template <typename V>
  void fields(V& v) {
    v("axis", axis);
    v("mode", mode);
  }
};

// one_hot(indices): out[..., j] = on_value if indices[...] == j else
// off_value; indices outside [0, depth) give a row of off_value.
struct OneHotAttrs {
  int64_t depth = 0;
  double on_value = 1;
  double off_value = 0;
  DType dtype = DType::kFloat32;
  template <typename V>
  void fields(V& v) {
    v("depth", depth, kRequired);
    v("on_value", on_value);
    v("off_value", off_value);
    v("dtype", dtype);
  }
};

// expand_dims: inserts a length-1 axis at `axis` (in [-ndim-1, ndim]).
struct ExpandDimsAttrs {
  int axis = 0;
  template <typename V>
  void fields(V& v) {
    v("axis", axis, kRequired);
  }
};

// broadcast_to: `shape` is the target; 0 keeps the input's dim. An input with
// fewer axes is aligned to the right (NumPy).
struct BroadcastToAttrs {
  Shape shape;
  template <typename V>
  void fields(V& v) {
    v("shape", shape);
  }
};

// ---- backward ops: the gradients that are not plain layout ops. Each takes
// the forward op's attributes plus the forward input's shape, and writes dy
// into zeros of that shape.

// _backward_slice(out_grad): zeros of data_shape with out_grad at the slice.
struct SliceBackwardAttrs {
  OptIntTuple begin, end, step;
  Shape data_shape;
  template <typename V>
  void fields(V& v) {
    v("begin", begin, kRequired);
    v("end", end, kRequired);
    v("step", step);
    v("data_shape", data_shape, kRequired);
  }
};

// _backward_slice_axis(out_grad): zeros of data_shape with out_grad at
// [begin, end) along axis.
struct SliceAxisBackwardAttrs {
  int axis = 0;
  int64_t begin = 0;
  std::optional<int64_t> end;
  Shape data_shape;
  template <typename V>
  void fields(V& v) {
    v("axis", axis, kRequired);
    v("begin", begin, kRequired);
    v("end", end, kRequired);
    v("data_shape", data_shape, kRequired);
  }
};

// _backward_take(out_grad, indices): zeros of data_shape into which each
// sub-array of out_grad is added at the row its index picked (resolved by
// `mode` as in take), so repeated indices accumulate. Floating dtypes only.
struct TakeBackwardAttrs {
  int axis = 0;
  TakeMode mode = TakeMode::kClip;
  Shape data_shape;
  template <typename V>
  void fields(V& v) {
    v("axis", axis);
    v("mode", mode);
    v("data_shape", data_shape, kRequired);
  }
};

// ---- shape rules shared by inference, kernels and NDArray views

// MXNet's Reshape rules. Entries of `spec`: d > 0 is d (and consumes an input
// dim); 0 copies the next input dim; -1 is inferred from the total size (at
// most one, consumes an input dim); -2 copies all remaining input dims; -3
// merges the next two input dims; -4 d1 d2 splits the next input dim into d1
// and d2 (one of them may be -1). With `reverse`, the special values are
// matched from the right: (10,5,4) with (-1, 0) gives (40,5), reversed (50,4).
// Throws ShapeError naming both shapes when the sizes do not match or an entry
// refers to an input dim that does not exist; ValueError for malformed specs.
Shape infer_reshape(const Shape& in, const IntTuple& spec, bool reverse);

// One axis of a slice, normalized: element k of the result is input element
// begin + k * step, for k in [0, length).
struct SliceRange {
  int64_t begin = 0;
  int64_t step = 1;
  int64_t length = 0;
};
// Python's slice(begin, end, step).indices(len). Throws ValueError for step 0.
SliceRange slice_range(int64_t len, std::optional<int64_t> begin, std::optional<int64_t> end,
                       std::optional<int64_t> step);

// The permutation transpose applies: `axes` normalized, or reversed when empty.
// Throws IndexError/ValueError for axes that are out of range, repeated or of
// the wrong count.
std::vector<int> transpose_axes(const IntTuple& axes, int ndim);

}  // namespace kiln
