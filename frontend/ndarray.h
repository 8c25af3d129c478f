// NDArray: an n-dimensional array on a device, asynchronous by default.
//
//   NDArray x = nd::ones({2, 3});              // returns at once; the fill is queued
//   NDArray y = x * 2 + 1;                     // queued behind the fill
//   std::vector<float> v = y.to_vector<float>();  // waits for y's producer
//   std::cout << y;                            // NumPy-like text, then <NDArray 2x3 @cpu(0)>
//
// An NDArray is a cheap-to-copy handle: copies share storage (like MXNet and
// PyTorch). Operations never block; only reading values does (`wait_to_read`,
// `to_vector`, `item`, printing), and a read rethrows the error of the
// operation that failed producing the value, with that op's name.
//
// Storage is a chunk of device memory with one engine variable. Views
// (`reshape`, `at` on axis 0) share the chunk and its variable, so a write
// through any view orders against every reader of the chunk.
//
// Symbolic arrays exist while hybridize() traces a block (frontend/trace.h):
// they have a shape, a dtype and a device but no storage, and operations on
// them record graph nodes instead of computing. Reading a symbolic array's
// values throws, naming the block being traced.
//
// Thread safety: distinct NDArray handles may be used from different threads;
// the data they share is ordered by the engine.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/attrs.h"
#include "ir/device.h"
#include "ir/dtype.h"
#include "ir/shape.h"
#include "runtime/engine.h"
#include "runtime/storage.h"

namespace kiln {

namespace detail {
// Device memory plus its engine variable. Freed (and its variable deleted)
// when the last handle and the last pending operation using it let go.
// The storage is freed once the variable is idle (every operation pushed on
// it has finished), so operations need not hold the chunk.
struct Chunk {
  storage::Pool* pool;
  storage::Block block;
  engine::Var* var = nullptr;
  Chunk(size_t bytes, Device device);
  ~Chunk();
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;
};
}  // namespace detail

namespace autograd::detail {
struct Node;
}

namespace trace {
// What a symbolic array stands for: output `index` of node `node` in the graph
// of the trace numbered `trace_id` (frontend/trace.h).
struct Symbol {
  uint64_t trace_id = 0;
  int32_t node = -1;
  int32_t index = 0;
  Device device;
};
}  // namespace trace

// How a gradient reaches an array's grad buffer (MXNet's grad_req).
enum class GradReq : int8_t { kNull = 0, kWrite = 1, kAdd = 3 };

struct ArrayOptions {
  DType dtype = DType::kFloat32;
  Device device = Device::cpu(0);
};

class NDArray {
 public:
  NDArray() = default;  // "none": no storage; most operations reject it

  // Allocates uninitialized storage (nothing is queued).
  static NDArray empty(const Shape& shape, ArrayOptions options = {});

  bool is_none() const { return chunk_ == nullptr && sym_ == nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t size() const { return shape_.size(); }
  DType dtype() const { return dtype_; }
  Device device() const { return chunk_ ? chunk_->block.device : sym_ ? sym_->device : Device::cpu(0); }
  size_t nbytes() const { return static_cast<size_t>(size()) * dtype_size(dtype_); }

  // Blocks until every pending write to this array has finished; rethrows the
  // producer's error. (Name as in MXNet.)
  void wait_to_read() const;
  // Blocks until every pending read and write has finished.
  void wait_to_write() const;

  // Copies the values out, converted to T. Blocks.
  template <typename T>
  std::vector<T> to_vector() const;
  // The single value of a size-1 array, converted to T. Blocks. Throws
  // ValueError for larger arrays.
  template <typename T = float>
  T item() const;

  std::string to_string() const;  // NumPy-like, ends with "<NDArray 2x3 @cpu(0)>"

  // A new array with the same values on `device` (queued on copy lanes).
  NDArray copy_to(Device device) const;
  // Queues dst = this on a copy lane (the destination's, or the GPU's when
  // one is involved), between any devices; `dst` must have the same number
  // of bytes (its shape may differ). A no-op when both are the same storage.
  // `name` (what the profiler shows; a literal: it must outlive the op).
  // MXNet's copyto(other).
  void copy_to(const NDArray& dst, int priority = 0, std::string_view name = "copy_to") const;
  NDArray copy() const;
  NDArray astype(DType dtype) const;
  // A view with a new shape (MXNet's special values 0, -1, -2, -3, -4 allowed).
  NDArray reshape(const IntTuple& shape) const;
  // A view of element `i` along axis 0 (negative counts from the end).
  NDArray at(int64_t i) const;
  // Transpose reversing the axes (a new array).
  NDArray T() const;

  // In-place assignment (MXNet's x[:] = v): queued writes into this storage.
  // `src` is broadcast to this shape and converted to this dtype.
  NDArray& assign(const NDArray& src);
  NDArray& assign(double value);

  NDArray& operator+=(const NDArray& o);
  NDArray& operator-=(const NDArray& o);
  NDArray& operator*=(const NDArray& o);
  NDArray& operator/=(const NDArray& o);
  NDArray& operator+=(double v);
  NDArray& operator-=(double v);
  NDArray& operator*=(double v);
  NDArray& operator/=(double v);

  // Autograd (frontend/autograd.h). attach_grad makes this array a leaf of
  // the tape with a zero gradient buffer of the same shape; grad() returns
  // that buffer (none before attach_grad). Copies of the handle share it.
  void attach_grad(GradReq req = GradReq::kWrite);
  NDArray grad() const;
  GradReq grad_req() const;
  // The same values without the tape: no gradient flows through the result.
  NDArray detach() const;
  // True for leaves with a gradient buffer and for results recorded on a tape.
  bool requires_grad() const;

  // For invoke and backends: the storage chunk, byte offset of this view, raw
  // pointer (valid only while the engine orders the access).
  const std::shared_ptr<detail::Chunk>& chunk() const { return chunk_; }
  int64_t byte_offset() const { return offset_; }
  engine::Var* var() const { return chunk_ ? chunk_->var : nullptr; }
  void* data() const { return static_cast<char*>(chunk_->block.ptr) + offset_; }
  // The tape entry: node and output index (null node: not on a tape).
  const std::shared_ptr<autograd::detail::Node>& ag_node() const { return ag_node_; }
  int ag_index() const { return ag_index_; }
  void set_ag_entry(std::shared_ptr<autograd::detail::Node> node, int index) {
    ag_node_ = std::move(node);
    ag_index_ = index;
  }

  // Rebinds this handle to `other`'s storage view (used by invoke for outputs).
  NDArray(std::shared_ptr<detail::Chunk> chunk, Shape shape, DType dtype, int64_t offset)
      : chunk_(std::move(chunk)), shape_(shape), dtype_(dtype), offset_(offset) {}

  // Symbolic arrays (frontend/trace.h).
  static NDArray symbolic(std::shared_ptr<const trace::Symbol> symbol, Shape shape, DType dtype) {
    NDArray a;
    a.sym_ = std::move(symbol);
    a.shape_ = shape;
    a.dtype_ = dtype;
    return a;
  }
  bool is_symbolic() const { return sym_ != nullptr; }
  const std::shared_ptr<const trace::Symbol>& symbol() const { return sym_; }

 private:
  void check_not_none(std::string_view what) const;
  // check_not_none, and throws (naming the traced block) for symbolic arrays.
  void check_readable(std::string_view what) const;

  std::shared_ptr<detail::Chunk> chunk_;
  Shape shape_;
  DType dtype_ = DType::kFloat32;
  int64_t offset_ = 0;  // bytes into the chunk
  std::shared_ptr<autograd::detail::Node> ag_node_;
  int ag_index_ = 0;
  std::shared_ptr<const trace::Symbol> sym_;
};

std::ostream& operator<<(std::ostream& os, const NDArray& a);

extern template std::vector<float> NDArray::to_vector<float>() const;
extern template std::vector<double> NDArray::to_vector<double>() const;
extern template std::vector<int32_t> NDArray::to_vector<int32_t>() const;
extern template std::vector<int64_t> NDArray::to_vector<int64_t>() const;
extern template std::vector<uint8_t> NDArray::to_vector<uint8_t>() const;
extern template float NDArray::item<float>() const;
extern template double NDArray::item<double>() const;
extern template int32_t NDArray::item<int32_t>() const;
extern template int64_t NDArray::item<int64_t>() const;

}  // namespace kiln
