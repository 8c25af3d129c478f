// CPU kernels of the reduce family.
//
// Every kernel first coalesces the input: size-1 axes are dropped and
// neighbouring axes with the same role (reduced or kept) are merged, so any
// reduction becomes one of
//   rows:     the last axis is reduced: contiguous runs, summed with vector lanes;
//   columns:  the last axis is kept: whole rows are accumulated elementwise
//             into a tile of outputs (vectorized across the contiguous axis);
// with the remaining outer axes walked by an odometer.
//
// Determinism: work is cut into pieces of a fixed number of elements (kPiece),
// chosen from the shape alone; each piece gives a partial result and partials
// are merged in index order. Threads only decide who computes which piece, so
// results do not depend on the thread count.
//
// Accuracy: float32 sums accumulate in float vector lanes over blocks of
// kBlock elements (each lane adds kBlock / 32 values), and blocks merge in
// double; column sums accumulate in double. Integer sums and products wrap
// modulo 2^64 and are then narrowed, as MXNet's int32 arithmetic wraps.
//
// float16 and bfloat16 inputs are reduced by the float32 reducers: elements
// are converted as they are loaded, so they accumulate exactly as float32
// does, and each output is rounded once to the 16-bit type.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/elemwise_kernels.h"
#include "backends/cpu/parallel.h"
#include "ir/ops/reduce.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

constexpr int64_t kBlock = 4096;     // elements per float-lane block (accuracy)
constexpr int64_t kPiece = 1 << 15;  // elements per unit of parallel work (determinism)
constexpr int64_t kTile = 4096;      // outputs per column-path work item (accumulators stay in L1/L2)
constexpr int64_t kMaxPieces = 16;   // column path: pieces of rows per output tile, at most
constexpr int64_t kPack = 16;        // column path: rows folded side by side when the kept axis is short
constexpr int kVecBytes = 32;        // AVX2

// ---- vectors (GCC/Clang vector extensions; the build targets -march=native)

template <typename L>
struct VecOf {
  typedef L type __attribute__((vector_size(kVecBytes)));
};
template <typename L>
using Vec = typename VecOf<L>::type;
template <typename L>
inline constexpr int64_t kWidth = kVecBytes / sizeof(L);

template <typename L>
Vec<L> splat(L x) {
  Vec<L> v;
  for (int64_t i = 0; i < kWidth<L>; ++i) v[i] = x;
  return v;
}

// One element of type T as the accumulator type A (16-bit floats through float32).
template <typename A, typename T>
A widen(T v) {
  return static_cast<A>(cpu::load(v));
}

// kWidth<L> elements of type T at p, converted to L.
template <typename L, typename T>
Vec<L> load(const T* p) {
  if constexpr (cpu::kIsHalfType<T>) {
    Vec<L> v;
    for (int64_t i = 0; i < kWidth<L>; ++i) v[i] = widen<L>(p[i]);
    return v;
  } else {
    typedef T Src __attribute__((vector_size(sizeof(T) * kWidth<L>)));
    Src s;
    std::memcpy(&s, p, sizeof s);
    if constexpr (std::is_same_v<L, T>)
      return s;
    else
      return __builtin_convertvector(s, Vec<L>);
  }
}

// A reducer's result (its compute type) stored as T.
template <typename T, typename V>
T put(V v) {
  return cpu::store<T>(v);
}

// ---- reducers: step folds one value into an accumulator (scalar or vector),
// merge folds two accumulators, finish turns an accumulator into the output.
// Lane: the type of the vector lanes of a contiguous block; Acc: the type
// blocks and pieces merge in.

template <typename T>
using WideOf = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;

template <typename T>
struct SumReducer {
  using Lane = std::conditional_t<std::is_floating_point_v<T>, T, uint64_t>;
  using Acc = WideOf<T>;
  template <typename S>
  static S init() {
    return S(0);
  }
  template <typename V>
  static V step(V a, V v) {
    return a + v;
  }
  template <typename V>
  static V merge(V a, V b) {
    return a + b;
  }
  static T finish(Acc a, int64_t) { return static_cast<T>(a); }
};

template <typename T>
struct MeanReducer : SumReducer<T> {
  static T finish(double a, int64_t n) { return static_cast<T>(a / static_cast<double>(n)); }
};

template <typename T>
struct ProdReducer {
  using Lane = WideOf<T>;
  using Acc = WideOf<T>;
  template <typename S>
  static S init() {
    return S(1);
  }
  template <typename V>
  static V step(V a, V v) {
    return a * v;
  }
  template <typename V>
  static V merge(V a, V b) {
    return a * b;
  }
  static T finish(Acc a, int64_t) { return static_cast<T>(a); }
};

template <typename T, int kOrd>
struct NormReducer : SumReducer<T> {
  template <typename V>
  static V step(V a, V v) {
    if constexpr (kOrd == 1)
      return a + (v < 0 ? -v : v);
    else
      return a + v * v;
  }
  static T finish(double a, int64_t) { return static_cast<T>(kOrd == 1 ? a : std::sqrt(a)); }
};

// kMax: true for max, false for min. A NaN wins and stays (NumPy's rule).
template <typename T, bool kMax>
struct ExtremumReducer {
  using Lane = T;
  using Acc = T;
  template <typename S>
  static S init() {
    if constexpr (std::is_floating_point_v<T>)
      return kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    else
      return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
  template <typename V>
  static V step(V a, V v) {
    if constexpr (kMax)
      return ((v > a) | (v != v)) ? v : a;
    else
      return ((v < a) | (v != v)) ? v : a;
  }
  template <typename V>
  static V merge(V a, V b) {
    return step(a, b);
  }
  static T finish(Acc a, int64_t) { return a; }
};

// Folds x[0, n) into R::Acc: kBlock-sized blocks reduced in 4 vectors of
// lanes, blocks merged in Acc.
template <typename R, typename T>
typename R::Acc reduce_run(const T* x, int64_t n) {
  using L = typename R::Lane;
  using A = typename R::Acc;
  constexpr int64_t W = kWidth<L>;
  A acc = R::template init<A>();
  if (n < 4 * W) {  // short rows: vectors cost more than they save
    for (int64_t i = 0; i < n; ++i) acc = R::step(acc, widen<A>(x[i]));
    return acc;
  }
  for (int64_t b = 0; b < n; b += kBlock) {
    const T* p = x + b;
    const int64_t len = std::min(kBlock, n - b);
    const Vec<L> id = splat(R::template init<L>());
    Vec<L> v0 = id, v1 = id, v2 = id, v3 = id;
    int64_t i = 0;
    for (; i + 4 * W <= len; i += 4 * W) {
      v0 = R::step(v0, load<L>(p + i));
      v1 = R::step(v1, load<L>(p + i + W));
      v2 = R::step(v2, load<L>(p + i + 2 * W));
      v3 = R::step(v3, load<L>(p + i + 3 * W));
    }
    for (; i + W <= len; i += W) v0 = R::step(v0, load<L>(p + i));
    Vec<L> v = R::merge(R::merge(v0, v1), R::merge(v2, v3));
    L s = v[0];
    for (int64_t l = 1; l < W; ++l) s = R::merge(s, v[l]);
    for (; i < len; ++i) s = R::step(s, widen<L>(p[i]));
    acc = R::merge(acc, static_cast<A>(s));
  }
  return acc;
}

// ---- layout

// Walks the element offsets of a mixed-radix index space (outermost first).
struct Walk {
  int n = 0;
  int64_t size[Shape::kMaxNdim] = {}, stride[Shape::kMaxNdim] = {}, idx[Shape::kMaxNdim] = {};
  int64_t offset = 0;

  void add(int64_t sz, int64_t st) {
    size[n] = sz;
    stride[n++] = st;
  }
  int64_t total() const {
    int64_t t = 1;
    for (int i = 0; i < n; ++i) t *= size[i];
    return t;
  }
  void seek(int64_t linear) {
    offset = 0;
    for (int i = n - 1; i >= 0; --i) {
      idx[i] = linear % size[i];
      linear /= size[i];
      offset += idx[i] * stride[i];
    }
  }
  void next() {
    for (int i = n - 1; i >= 0; --i) {
      if (++idx[i] < size[i]) {
        offset += stride[i];
        return;
      }
      offset -= (size[i] - 1) * stride[i];
      idx[i] = 0;
    }
  }
};

// The input with size-1 axes dropped and neighbours of the same role merged.
struct Layout {
  int n = 0;
  int64_t size[Shape::kMaxNdim] = {};
  bool reduced[Shape::kMaxNdim] = {};
  // The outer axes (all but the last) split into kept and reduced walks.
  void outer_walks(Walk& kept, Walk& red) const {
    int64_t stride = size[n - 1];
    for (int i = n - 2; i >= 0; --i) stride *= size[i];
    for (int i = 0; i < n - 1; ++i) {
      stride /= size[i];
      (reduced[i] ? red : kept).add(size[i], stride);
    }
  }
};

Layout coalesce(const Shape& in, uint32_t mask) {
  Layout l;
  for (int i = 0; i < in.ndim(); ++i) {
    if (in[i] == 1) continue;
    bool r = (mask >> i) & 1u;
    if (l.n > 0 && l.reduced[l.n - 1] == r) {
      l.size[l.n - 1] *= in[i];
    } else {
      l.size[l.n] = in[i];
      l.reduced[l.n++] = r;
    }
  }
  return l;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A buffer of n values of A owned by the calling thread, reused across calls.
template <typename A>
A* scratch(size_t n) {
  thread_local std::vector<A> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// ---- the two paths

// Folds elements [lo, hi) of one output's reduced index space: rows of `row`
// contiguous elements at the offsets `red` walks from `base`.
// `red` is scratch: it is repositioned first.
template <typename R, typename T>
typename R::Acc reduce_rows_range(const T* base, Walk& red, int64_t row, int64_t lo, int64_t hi) {
  if (red.n == 0) return reduce_run<R>(base + lo, hi - lo);  // one row
  auto acc = R::template init<typename R::Acc>();
  int64_t c = lo % row;
  red.seek(lo / row);
  while (lo < hi) {
    int64_t len = std::min(row - c, hi - lo);
    acc = R::merge(acc, reduce_run<R>(base + red.offset + c, len));
    lo += len;
    c = 0;
    red.next();
  }
  return acc;
}

// The last axis is reduced.
template <typename R, typename T>
void reduce_rows(int threads, const T* x, T* y, const Layout& l, int64_t count) {
  using A = typename R::Acc;
  Walk kept, red;
  l.outer_walks(kept, red);
  const int64_t row = l.size[l.n - 1], outs = kept.total(), pieces = ceil_div(count, kPiece);
  if (pieces == 1) {
    cpu::parallel_for(
        threads, outs,
        [&](int64_t b, int64_t e) {
          if (red.n == 0 && kept.n <= 1) {  // [rows, row]: outputs walk the rows in order
            for (int64_t o = b; o < e; ++o) y[o] = put<T>(R::finish(reduce_run<R>(x + o * row, row), count));
            return;
          }
          Walk k = kept, r = red;
          k.seek(b);
          for (int64_t o = b; o < e; ++o, k.next())
            y[o] = put<T>(R::finish(reduce_rows_range<R>(x + k.offset, r, row, 0, count), count));
        },
        std::max<int64_t>(1, kPiece / count));
    return;
  }
  std::vector<A> partial(static_cast<size_t>(outs * pieces));
  cpu::parallel_for(
      threads, outs * pieces,
      [&](int64_t b, int64_t e) {
        Walk k = kept, r = red;
        for (int64_t it = b; it < e; ++it) {
          int64_t o = it / pieces, p = it % pieces;
          k.seek(o);
          partial[it] = reduce_rows_range<R>(x + k.offset, r, row, p * kPiece, std::min(count, (p + 1) * kPiece));
        }
      },
      1);
  for (int64_t o = 0; o < outs; ++o) {
    A acc = partial[o * pieces];
    for (int64_t p = 1; p < pieces; ++p) acc = R::merge(acc, partial[o * pieces + p]);
    y[o] = put<T>(R::finish(acc, count));
  }
}

// acc[0, w) folds in the row x[0, w), elementwise.
template <typename R, typename T>
void accumulate_row(typename R::Acc* acc, const T* x, int64_t w) {
  using A = typename R::Acc;
  constexpr int64_t W = kWidth<A>;
  int64_t j = 0;
  for (; j + W <= w; j += W) {
    Vec<A> a;
    std::memcpy(&a, acc + j, sizeof a);
    a = R::step(a, load<A>(x + j));
    std::memcpy(acc + j, &a, sizeof a);
  }
  for (; j < w; ++j) acc[j] = R::step(acc[j], widen<A>(x[j]));
}

// The last axis is kept: tiles of up to kTile outputs along it, each folding
// whole rows, in at most kMaxPieces pieces of `group` rows. When the kept axis
// is short and the rows of a piece are contiguous, kPack rows are folded side
// by side as one longer row, and the kPack partial accumulators merged last.
template <typename R, typename T>
void reduce_columns(int threads, const T* x, T* y, const Layout& l, int64_t count) {
  using A = typename R::Acc;
  Walk kept, red;
  l.outer_walks(kept, red);
  const int64_t inner = l.size[l.n - 1], outer = kept.total();
  const int64_t tw = std::min(inner, kTile), tiles = ceil_div(inner, tw);
  const int64_t group = std::max(ceil_div(kPiece, tw), ceil_div(count, kMaxPieces)), pieces = ceil_div(count, group);
  const bool pack = inner < kPack && red.n == 1 && red.stride[0] == inner;
  // Folds rows [r0, r1) of tile `t` of outer index `o` into acc[0, w); returns w.
  auto fold = [&](int64_t o, int64_t t, int64_t r0, int64_t r1, A* acc) {
    Walk k = kept, r = red;
    k.seek(o);
    r.seek(r0);
    const T* base = x + k.offset + t * tw;
    const int64_t w = std::min(tw, inner - t * tw);
    if (pack) {  // rows r0.. are contiguous: fold kPack of them at a time
      const int64_t wide = kPack * w;
      std::fill(acc, acc + wide, R::template init<A>());
      const T* p = base + r.offset;
      int64_t i = r0;
      for (; i + kPack <= r1; i += kPack, p += wide) accumulate_row<R>(acc, p, wide);
      for (; i < r1; ++i, p += w) accumulate_row<R>(acc, p, w);
      for (int64_t q = 1; q < kPack; ++q)
        for (int64_t j = 0; j < w; ++j) acc[j] = R::merge(acc[j], acc[q * w + j]);
      return w;
    }
    std::fill(acc, acc + w, R::template init<A>());
    for (int64_t i = r0; i < r1; ++i, r.next()) accumulate_row<R>(acc, base + r.offset, w);
    return w;
  };
  if (pieces == 1) {
    cpu::parallel_for(
        threads, outer * tiles,
        [&](int64_t b, int64_t e) {
          A* acc = scratch<A>(static_cast<size_t>(std::max(tw, kPack * kPack)));
          for (int64_t it = b; it < e; ++it) {
            int64_t o = it / tiles, t = it % tiles;
            int64_t w = fold(o, t, 0, count, acc);
            T* out = y + o * inner + t * tw;
            for (int64_t j = 0; j < w; ++j) out[j] = put<T>(R::finish(acc[j], count));
          }
        },
        std::max<int64_t>(1, kPiece / (count * tw)));
    return;
  }
  const int64_t stride = std::max(tw, kPack * kPack);  // room for a packed fold
  std::vector<A> partial(static_cast<size_t>(outer * tiles * pieces * stride));
  cpu::parallel_for(
      threads, outer * tiles * pieces,
      [&](int64_t b, int64_t e) {
        for (int64_t it = b; it < e; ++it) {
          int64_t p = it % pieces, ot = it / pieces;
          fold(ot / tiles, ot % tiles, p * group, std::min(count, (p + 1) * group), partial.data() + it * stride);
        }
      },
      1);
  for (int64_t ot = 0; ot < outer * tiles; ++ot) {
    int64_t o = ot / tiles, t = ot % tiles, w = std::min(tw, inner - t * tw);
    A* acc = partial.data() + ot * pieces * stride;
    for (int64_t p = 1; p < pieces; ++p)
      for (int64_t j = 0; j < w; ++j) acc[j] = R::merge(acc[j], acc[p * stride + j]);
    T* out = y + o * inner + t * tw;
    for (int64_t j = 0; j < w; ++j) out[j] = put<T>(R::finish(acc[j], count));
  }
}

template <typename R, typename T>
void reduce(int threads, const TensorView& in, const TensorView& out, uint32_t mask) {
  using A = typename R::Acc;
  const T* x = in.ptr<T>();
  T* y = out.ptr<T>();
  const int64_t count = reduce_count(in.shape, mask), outs = out.size();
  if (in.size() == 0) {  // sum 0, prod 1, norm 0 (inference rejects the others)
    std::fill(y, y + outs, put<T>(R::finish(R::template init<A>(), 0)));
    return;
  }
  if (count == 1) {  // only size-1 axes reduce: the output is the input, finished
    cpu::parallel_for(threads, outs, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = put<T>(R::finish(R::step(R::template init<A>(), widen<A>(x[i])), 1));
    });
    return;
  }
  Layout l = coalesce(in.shape, mask);
  if (l.reduced[l.n - 1])
    reduce_rows<R>(threads, x, y, l, count);
  else
    reduce_columns<R>(threads, x, y, l, count);
}

// ---- argmax / argmin

template <typename T, bool kMax>
bool better(T v, T best) {
  if constexpr (kMax)
    return v > best || (v != v && best == best);
  else
    return v < best || (v != v && best == best);
}

template <typename T>
struct ArgResult {
  T value;
  int64_t index;
};

// The first extremum of the contiguous run p[0, n) (n > 0), compared in C
// (16-bit floats converted as they are read).
template <typename C, bool kMax, typename T>
ArgResult<C> arg_run(const T* p, int64_t n) {
  C m = reduce_run<ExtremumReducer<C, kMax>>(p, n);
  int64_t i = 0;
  if (m != m)
    while (cpu::load(p[i]) == cpu::load(p[i])) ++i;
  else
    while (cpu::load(p[i]) != m) ++i;
  return {m, i};
}

// Rows [r0, r1) of a column tile of width w (rows `inner` apart): best[j]
// and idx[j] (the row, as C) end at the first extremum of column j.
template <typename C, bool kMax, typename T>
void arg_fold_rows(const T* base, int64_t inner, int64_t r0, int64_t r1, int64_t w, C* best, C* idx) {
  constexpr int64_t W = kWidth<C>;
  for (int64_t j = 0; j < w; ++j) best[j] = cpu::load(base[r0 * inner + j]);
  std::fill(idx, idx + w, static_cast<C>(r0));
  for (int64_t r = r0 + 1; r < r1; ++r) {
    const T* p = base + r * inner;
    const Vec<C> rv = splat(static_cast<C>(r));
    int64_t j = 0;
    for (; j + W <= w; j += W) {
      Vec<C> v = load<C>(p + j), b, i;
      std::memcpy(&b, best + j, sizeof b);
      std::memcpy(&i, idx + j, sizeof i);
      auto take = (kMax ? (v > b) : (v < b)) | ((v != v) & (b == b));
      b = take ? v : b;
      i = take ? rv : i;
      std::memcpy(best + j, &b, sizeof b);
      std::memcpy(idx + j, &i, sizeof i);
    }
    for (; j < w; ++j) {
      const C v = cpu::load(p[j]);
      if (better<C, kMax>(v, best[j])) best[j] = v, idx[j] = static_cast<C>(r);
    }
  }
}

// Indices of the extrema of T along `axis` (all elements when unset), as
// C = compute_t<T>: the input's dtype, float32 for 16-bit floats.
template <typename T, bool kMax>
void arg_reduce(int threads, const TensorView& in, const TensorView& out, std::optional<int> axis) {
  using C = cpu::compute_t<T>;
  const T* x = in.ptr<T>();
  C* y = out.ptr<C>();
  const int64_t n = in.size();
  if (n == 0) return;  // inference rejects an empty axis unless the output is empty too
  int64_t outer = 1, len = n, inner = 1;
  if (axis) {
    int a = *axis < 0 ? *axis + in.shape.ndim() : *axis;
    len = in.shape[a];
    for (int i = 0; i < a; ++i) outer *= in.shape[i];
    inner = n / outer / len;
  }
  if (inner == 1) {
    const int64_t pieces = ceil_div(len, kPiece);
    std::vector<ArgResult<C>> partial(static_cast<size_t>(outer * pieces));
    cpu::parallel_for(
        threads, outer * pieces,
        [&](int64_t b, int64_t e) {
          for (int64_t it = b; it < e; ++it) {
            int64_t o = it / pieces, p = it % pieces, lo = p * kPiece;
            auto r = arg_run<C, kMax>(x + o * len + lo, std::min(kPiece, len - lo));
            partial[it] = {r.value, r.index + lo};
          }
        },
        std::max<int64_t>(1, kPiece / len));
    for (int64_t o = 0; o < outer; ++o) {
      ArgResult<C> best = partial[o * pieces];
      for (int64_t p = 1; p < pieces; ++p)
        if (better<C, kMax>(partial[o * pieces + p].value, best.value)) best = partial[o * pieces + p];
      y[o] = static_cast<C>(best.index);
    }
    return;
  }
  // Columns: tiles of the kept inner axis, rows in pieces, partials merged in order.
  const int64_t tw = std::min(inner, kTile), tiles = ceil_div(inner, tw);
  const int64_t group = std::max(ceil_div(kPiece, tw), ceil_div(len, kMaxPieces)), pieces = ceil_div(len, group);
  const int64_t items = outer * tiles * pieces;
  std::vector<C> best(static_cast<size_t>(items * tw)), idx(best.size());
  cpu::parallel_for(
      threads, items,
      [&](int64_t b, int64_t e) {
        for (int64_t it = b; it < e; ++it) {
          int64_t p = it % pieces, ot = it / pieces, o = ot / tiles, t = ot % tiles;
          arg_fold_rows<C, kMax>(x + o * len * inner + t * tw, inner, p * group, std::min(len, (p + 1) * group),
                                 std::min(tw, inner - t * tw), best.data() + it * tw, idx.data() + it * tw);
        }
      },
      std::max<int64_t>(1, kPiece / (group * tw)));
  for (int64_t ot = 0; ot < outer * tiles; ++ot) {
    int64_t o = ot / tiles, t = ot % tiles, w = std::min(tw, inner - t * tw);
    C* b0 = best.data() + ot * pieces * tw;
    C* i0 = idx.data() + ot * pieces * tw;
    for (int64_t p = 1; p < pieces; ++p)
      for (int64_t j = 0; j < w; ++j)
        if (better<C, kMax>(b0[p * tw + j], b0[j])) b0[j] = b0[p * tw + j], i0[j] = i0[p * tw + j];
    std::copy(i0, i0 + w, y + o * inner + t * tw);
  }
}

// ---- kernels

template <template <typename> class R>
void reduce_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<ReduceAttrs>();
  uint32_t mask = reduce_axes_mask(in[0].shape, a.axis, a.exclude);
  dispatch_dtype(in[0].dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, int64_t> || cpu::kIsHalfType<T>)
      reduce<R<cpu::compute_t<T>>, T>(ctx.run.num_threads, in[0], out[0], mask);
    else
      KILN_ASSERT(!"reduce: dtype not admitted by inference");
  });
}

template <typename T>
using MaxReducer = ExtremumReducer<T, true>;
template <typename T>
using MinReducer = ExtremumReducer<T, false>;
template <typename T>
using Norm1Reducer = NormReducer<T, 1>;
template <typename T>
using Norm2Reducer = NormReducer<T, 2>;

void norm_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<NormAttrs>();
  uint32_t mask = reduce_axes_mask(in[0].shape, a.axis, false);
  cpu::dispatch_floating(in[0].dtype, [&](auto t) {
    using T = decltype(t);
    using C = cpu::compute_t<T>;
    if (a.ord == 1)
      reduce<Norm1Reducer<C>, T>(ctx.run.num_threads, in[0], out[0], mask);
    else
      reduce<Norm2Reducer<C>, T>(ctx.run.num_threads, in[0], out[0], mask);
  });
}

template <bool kMax>
void arg_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<ArgReduceAttrs>();
  dispatch_dtype(in[0].dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, int64_t> || cpu::kIsHalfType<T>)
      arg_reduce<T, kMax>(ctx.run.num_threads, in[0], out[0], a.axis);
    else
      KILN_ASSERT(!"argmax: dtype not admitted by inference");
  });
}

}  // namespace

void register_cpu_reduce_kernels() {
  constexpr auto kAny = HalfSupport::kAny;  // argmax/argmin: float32 indices for 16-bit inputs
  register_kernel(OpId::kSum, DeviceKind::kCPU, reduce_kernel<SumReducer>, kAny);
  register_kernel(OpId::kMean, DeviceKind::kCPU, reduce_kernel<MeanReducer>, kAny);
  register_kernel(OpId::kMax, DeviceKind::kCPU, reduce_kernel<MaxReducer>, kAny);
  register_kernel(OpId::kMin, DeviceKind::kCPU, reduce_kernel<MinReducer>, kAny);
  register_kernel(OpId::kProd, DeviceKind::kCPU, reduce_kernel<ProdReducer>, kAny);
  register_kernel(OpId::kNorm, DeviceKind::kCPU, norm_kernel, kAny);
  register_kernel(OpId::kArgmax, DeviceKind::kCPU, arg_kernel<true>, kAny);
  register_kernel(OpId::kArgmin, DeviceKind::kCPU, arg_kernel<false>, kAny);
}

}  // namespace kiln
