#include "frontend/ndarray.h"

#include <cstring>
#include <ostream>

#include "frontend/invoke.h"
#include "frontend/trace.h"
#include "ir/op.h"
#include "runtime/device_backend.h"
#include "runtime/record_pool.h"

namespace kiln {

namespace detail {

Chunk::Chunk(size_t bytes, Device device) : pool(&storage::pool(device)), block(pool->alloc(bytes)) {
  var = engine::get().new_var();
}

// Operations on the chunk may still be pending (they hold its variable, not
// the chunk): the engine frees the storage once the last one has finished.
Chunk::~Chunk() {
  engine::get().delete_var(var, [pool = pool, block = block] { pool->free(block); });
}

}  // namespace detail

NDArray NDArray::empty(const Shape& shape, ArrayOptions options) {
  check_device(options.device);
  size_t bytes = static_cast<size_t>(shape.size()) * dtype_size(options.dtype);
  return NDArray(std::allocate_shared<detail::Chunk>(PoolAllocator<detail::Chunk>(), bytes, options.device), shape, options.dtype, 0);
}

void NDArray::check_not_none(std::string_view what) const {
  KILN_CHECK(!is_none(), ValueError, "{}: the NDArray is empty (none); create it with nd::zeros, nd::array, ...",
             what);
}

void NDArray::check_readable(std::string_view what) const {
  check_not_none(what);
  if (sym_) trace::throw_read(*this, what);
}

void NDArray::wait_to_read() const {
  check_readable("wait_to_read");
  engine::get().wait_for_var(chunk_->var);
  engine::drain_device(device());
}

void NDArray::wait_to_write() const {
  check_readable("wait_to_write");
  // wait_for_var waits for pending writes only; a no-op that reads and writes
  // the variable orders after every pending reader too (and, reading it,
  // keeps any poison rather than clearing it).
  engine::Var* v = chunk_->var;
  engine::get().push([](engine::RunContext) {}, {v}, {v}, {.device = device(), .name = "wait_to_write"});
  engine::get().wait_for_var(v);
}

namespace {

template <typename To, typename From>
To convert_value(From v) {
  if constexpr (std::is_same_v<From, Half>) {
    return static_cast<To>(half_to_float(v));
  } else if constexpr (std::is_same_v<From, BFloat16>) {
    return static_cast<To>(bf16_to_float(v));
  } else {
    return static_cast<To>(v);
  }
}

// Copies `n` elements stored as `dtype` at `src` into `dst` converted to T.
template <typename T>
void read_converted(const void* src, DType dtype, int64_t n, T* dst) {
  dispatch_dtype(dtype, [&](auto tag) {
    using From = decltype(tag);
    const From* p = static_cast<const From*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = convert_value<T>(p[i]);
  });
}

}  // namespace

template <typename T>
std::vector<T> NDArray::to_vector() const {
  check_readable("to_vector");
  if (!device().is_cpu()) return copy_to(Device::cpu(0)).to_vector<T>();
  wait_to_read();
  std::vector<T> out(static_cast<size_t>(size()));
  read_converted<T>(data(), dtype_, size(), out.data());
  return out;
}

template <typename T>
T NDArray::item() const {
  check_readable("item");
  KILN_CHECK(size() == 1, ValueError, "item(): the array has {} elements (shape {}); item() needs exactly one",
             size(), shape_);
  return to_vector<T>()[0];
}

template std::vector<float> NDArray::to_vector<float>() const;
template std::vector<double> NDArray::to_vector<double>() const;
template std::vector<int32_t> NDArray::to_vector<int32_t>() const;
template std::vector<int64_t> NDArray::to_vector<int64_t>() const;
template std::vector<uint8_t> NDArray::to_vector<uint8_t>() const;
template float NDArray::item<float>() const;
template double NDArray::item<double>() const;
template int32_t NDArray::item<int32_t>() const;
template int64_t NDArray::item<int64_t>() const;

namespace {

// Queues dst = src on the copy lane of copy_lane_device (the destination's
// between CPUs, so the copy overlaps compute on both; the device's otherwise),
// copied by the devices' backend (runtime/device_backend.h). `options` gives
// the priority, name and counted bytes.
void push_copy(const NDArray& src, const NDArray& dst, engine::PushOptions options) {
  options.device = copy_lane_device(src.device(), dst.device());
  options.lane = engine::Lane::kCopy;
  engine::get().push(
      [src, dst](engine::RunContext) {
        copy_bytes(dst.data(), dst.device(), src.data(), src.device(), src.nbytes());
      },
      {src.var()}, {dst.var()}, options);
}

}  // namespace

NDArray NDArray::copy_to(Device device) const {
  check_not_none("copy_to");
  check_device(device);
  if (sym_) {
    KILN_CHECK(device == this->device(), NotSupported,
               "copy_to({}): a traced (hybridized) forward runs on one device; the array is on {}", device,
               this->device());
    return copy();
  }
  NDArray dst = empty(shape_, {dtype_, device});
  push_copy(*this, dst, {.name = "copy_to", .bytes = static_cast<int64_t>(nbytes())});
  return dst;
}

void NDArray::copy_to(const NDArray& dst, int priority, std::string_view name) const {
  check_readable("copy_to");
  dst.check_readable("copy_to");
  KILN_CHECK(nbytes() == dst.nbytes(), ShapeError, "copy_to: the source has {} bytes ({}{}), the destination {} ({}{})",
             nbytes(), dtype_short_name(dtype_), shape_, dst.nbytes(), dtype_short_name(dst.dtype()), dst.shape());
  if (var() == dst.var() && byte_offset() == dst.byte_offset()) return;  // the same storage
  push_copy(*this, dst, {.priority = priority, .name = name});
}

NDArray NDArray::copy() const {
  check_not_none("copy");
  return invoke1(OpId::kCopy, {*this});
}

NDArray NDArray::astype(DType dtype) const {
  check_not_none("astype");
  const OpDef& def = op_def(OpId::kCast);
  return invoke1(OpId::kCast, {*this}, def.parse_attrs(def.name, {{"dtype", std::string(dtype_name(dtype))}}));
}

NDArray NDArray::reshape(const IntTuple& spec) const {
  check_not_none("reshape");
  // The view follows exactly the Reshape op's inference (MXNet's special values).
  const OpDef& def = op_def(OpId::kReshape);
  KILN_CHECK(def.infer != nullptr, NotSupported, "reshape: the Reshape op is not available in this build");
  OpAttrs attrs = def.parse_attrs(def.name, {{"shape", print_attr(spec)}});
  std::vector<TensorType> out;
  if (sym_) return invoke1(OpId::kReshape, {*this}, attrs);  // traced: a Reshape node
  infer_types(def, attrs, std::vector<TensorType>{{shape_, dtype_}}, out);
  return NDArray(chunk_, out[0].shape, dtype_, offset_);
}

NDArray NDArray::at(int64_t i) const {
  check_not_none("at");
  KILN_CHECK(ndim() >= 1, IndexError, "at({}): the array is a scalar (shape [])", i);
  int64_t n = shape_[0];
  KILN_CHECK(i >= -n && i < n, IndexError, "at({}): index out of range for axis 0 of size {} (shape {})", i, n,
             shape_);
  if (i < 0) i += n;
  Shape rest(std::span<const int64_t>(shape_.begin() + 1, shape_.end()));
  if (sym_) {  // traced: slice_axis, then drop the axis
    const OpDef& slice = op_def(OpId::kSliceAxis);
    NDArray row = invoke1(OpId::kSliceAxis, {*this},
                          slice.parse_attrs(slice.name, {{"axis", "0"}, {"begin", std::to_string(i)},
                                                         {"end", std::to_string(i + 1)}}));
    const OpDef& reshape = op_def(OpId::kReshape);
    return invoke1(OpId::kReshape, {row}, reshape.parse_attrs(reshape.name, {{"shape", rest.to_mxnet_string()}}));
  }
  int64_t stride_bytes = rest.size() * static_cast<int64_t>(dtype_size(dtype_));
  return NDArray(chunk_, rest, dtype_, offset_ + i * stride_bytes);
}

NDArray NDArray::T() const {
  check_not_none("T");
  return invoke1(OpId::kTranspose, {*this}, op_def(OpId::kTranspose).parse_attrs("transpose", {}));
}

NDArray& NDArray::assign(const NDArray& src) {
  check_not_none("assign");
  NDArray s = src.device() == device() ? src : src.copy_to(device());
  if (s.dtype() != dtype_) s = s.astype(dtype_);
  if (s.shape() != shape_) {
    const OpDef& def = op_def(OpId::kBroadcastTo);
    s = invoke1(OpId::kBroadcastTo, {s}, def.parse_attrs(def.name, {{"shape", shape_.to_mxnet_string()}}));
  }
  invoke(OpId::kCopy, {s}, {}, {.out = {this, 1}});
  return *this;
}

NDArray& NDArray::assign(double value) {
  check_not_none("assign");
  const OpDef& def = op_def(OpId::kFull);
  invoke(OpId::kFull, {},
         def.parse_attrs(def.name, {{"shape", shape_.to_mxnet_string()},
                                    {"dtype", std::string(dtype_name(dtype_))},
                                    {"value", print_attr(value)}}),
         {.device = device(), .out = {this, 1}});
  return *this;
}

namespace {

NDArray& update(NDArray& self, OpId same_shape, OpId broadcast, const NDArray& o) {
  NDArray inputs[2] = {self, o};
  invoke(o.shape() == self.shape() ? same_shape : broadcast, inputs, {}, {.out = {&self, 1}});
  return self;
}

NDArray& update(NDArray& self, OpId scalar_op, double v) {
  const OpDef& def = op_def(scalar_op);
  invoke(scalar_op, {self}, def.parse_attrs(def.name, {{"scalar", print_attr(v)}}), {.out = {&self, 1}});
  return self;
}

}  // namespace

NDArray& NDArray::operator+=(const NDArray& o) { return update(*this, OpId::kElemwiseAdd, OpId::kBroadcastAdd, o); }
NDArray& NDArray::operator-=(const NDArray& o) { return update(*this, OpId::kElemwiseSub, OpId::kBroadcastSub, o); }
NDArray& NDArray::operator*=(const NDArray& o) { return update(*this, OpId::kElemwiseMul, OpId::kBroadcastMul, o); }
NDArray& NDArray::operator/=(const NDArray& o) { return update(*this, OpId::kElemwiseDiv, OpId::kBroadcastDiv, o); }
NDArray& NDArray::operator+=(double v) { return update(*this, OpId::kPlusScalar, v); }
NDArray& NDArray::operator-=(double v) { return update(*this, OpId::kMinusScalar, v); }
NDArray& NDArray::operator*=(double v) { return update(*this, OpId::kMulScalar, v); }
NDArray& NDArray::operator/=(double v) { return update(*this, OpId::kDivScalar, v); }

}  // namespace kiln
