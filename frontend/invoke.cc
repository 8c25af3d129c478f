#include "frontend/invoke.h"

#include <array>
#include <iterator>
#include <utility>

#include "frontend/autograd.h"
#include "frontend/autograd_tape.h"
#include "frontend/trace.h"
#include "runtime/kernel.h"
#include "runtime/record_pool.h"

namespace kiln {
namespace {

// Everything a queued kernel needs, in one allocation for the common case of
// at most kInline arrays. Holding the NDArrays keeps their chunks (storage and
// engine variables) alive until the kernel has run.
// Recycled through RecordPool: allocated where the op is pushed, returned to
// the pool (and its arrays released) on the worker that ran it.
struct KernelCall {
  static constexpr int kInline = 4;
  KernelCall* pool_next = nullptr;
  KernelFn fn = nullptr;
  OpAttrs attrs;
  bool is_train = false;
  int num_in = 0, num_out = 0;
  std::array<NDArray, kInline> inline_arrays;
  std::vector<NDArray> heap_arrays;

  NDArray* arrays() { return num_in + num_out <= kInline ? inline_arrays.data() : heap_arrays.data(); }

  void reset() {
    fn = nullptr;
    attrs = OpAttrs();
    for (NDArray& a : inline_arrays) a = NDArray();
    heap_arrays.clear();
    num_in = num_out = 0;
  }

  void run(const engine::RunContext& rc) {
    constexpr int kMaxViews = 16;
    std::array<TensorView, kMaxViews> small;
    std::vector<TensorView> big;
    int n = num_in + num_out;
    TensorView* views = small.data();
    if (n > kMaxViews) {
      big.resize(static_cast<size_t>(n));
      views = big.data();
    }
    NDArray* a = arrays();
    for (int i = 0; i < n; ++i) views[i] = TensorView{a[i].data(), a[i].shape(), a[i].dtype()};
    KernelContext ctx{rc, attrs, is_train};
    fn(ctx, {views, static_cast<size_t>(num_in)}, {views + num_in, static_cast<size_t>(num_out)});
  }
};

// Owns a pooled KernelCall inside the pushed closure.
class PooledCall {
 public:
  explicit PooledCall(KernelCall* call) : call_(call) {}
  PooledCall(PooledCall&& o) noexcept : call_(std::exchange(o.call_, nullptr)) {}
  PooledCall& operator=(PooledCall&&) = delete;
  ~PooledCall() {
    if (call_) RecordPool<KernelCall>::free(call_);
  }
  void operator()(engine::RunContext rc) { call_->run(rc); }

 private:
  KernelCall* call_;
};

// The outputs of one call: up to 4 without a heap allocation.
class Outputs {
 public:
  void resize(size_t n) {
    n_ = n;
    if (n > inline_.size()) heap_.resize(n);
  }
  void push_back(NDArray a) {
    resize(n_ + 1);
    (*this)[n_ - 1] = std::move(a);
  }
  NDArray& operator[](size_t i) { return n_ <= inline_.size() ? inline_[i] : heap_[i]; }
  std::span<NDArray> span() { return {n_ <= inline_.size() ? inline_.data() : heap_.data(), n_}; }
  size_t size() const { return n_; }

 private:
  std::array<NDArray, 4> inline_;
  std::vector<NDArray> heap_;
  size_t n_ = 0;
};

Device common_device(const OpDef& def, std::span<const NDArray> inputs, const InvokeOptions& options) {
  if (inputs.empty()) {
    Device d = options.device.value_or(Device::cpu(0));
    check_device(d);
    return d;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(!inputs[i].is_none(), ValueError, "{}: input {} is an empty (none) NDArray", def.name, i);
    if (inputs[i].is_symbolic()) trace::throw_read(inputs[i], def.name);
  }
  Device d = inputs[0].device();
  for (size_t i = 1; i < inputs.size(); ++i) {
    KILN_CHECK(inputs[i].device() == d, DeviceError,
               "{}: input 0 is on {} but input {} is on {}; copy explicitly with copy_to()", def.name, d, i,
               inputs[i].device());
  }
  return d;
}

bool contains(std::span<engine::Var* const> vars, engine::Var* v) {
  for (auto* x : vars)
    if (x == v) return true;
  return false;
}

// invoke and invoke1: fills `outputs`.
void invoke_into(OpId op, std::span<const NDArray> inputs, const OpAttrs& attrs, const InvokeOptions& options,
                 Outputs& outputs) {
  const OpDef& def = op_def(op);
  KILN_CHECK(def.infer != nullptr, NotSupported, "{}: this operator is not implemented in this build", def.name);
  if (trace::Tracer* tracer = trace::current()) [[unlikely]] {
    for (NDArray& a : tracer->record(op, inputs, attrs, options.out)) outputs.push_back(std::move(a));
    return;
  }
  Device device = common_device(def, inputs, options);

  thread_local std::vector<TensorType> in_types, out_types;
  in_types.clear();
  for (const NDArray& x : inputs) in_types.push_back({x.shape(), x.dtype()});
  infer_types(def, attrs, in_types, out_types);
  KernelFn fn = find_kernel(def, device);

  outputs.resize(out_types.size());
  int64_t new_bytes = 0;
  if (!options.out.empty()) {
    KILN_CHECK(options.out.size() == out_types.size(), ValueError, "{}: {} output array(s) given, op has {}",
               def.name, options.out.size(), out_types.size());
    for (size_t i = 0; i < out_types.size(); ++i) {
      const NDArray& o = options.out[i];
      KILN_CHECK(!o.is_none() && o.shape() == out_types[i].shape && o.dtype() == out_types[i].dtype, ShapeError,
                 "{}: output {} is {}{} but the op produces {}{}", def.name, i, dtype_short_name(o.dtype()),
                 o.shape(), dtype_short_name(out_types[i].dtype), out_types[i].shape);
      KILN_CHECK(o.device() == device, DeviceError, "{}: output {} is on {} but the inputs are on {}", def.name, i,
                 o.device(), device);
      outputs[i] = o;
    }
  } else {
    for (size_t i = 0; i < out_types.size(); ++i) {
      outputs[i] = NDArray::empty(out_types[i].shape, {out_types[i].dtype, device});
      new_bytes += static_cast<int64_t>(outputs[i].nbytes());
    }
  }

  KernelCall* call = RecordPool<KernelCall>::alloc();
  PooledCall owner(call);
  call->fn = fn;
  call->attrs = attrs;
  call->is_train = autograd::is_training();
  call->num_in = static_cast<int>(inputs.size());
  call->num_out = static_cast<int>(outputs.size());
  if (call->num_in + call->num_out > KernelCall::kInline)
    call->heap_arrays.resize(static_cast<size_t>(call->num_in + call->num_out));
  NDArray* arrays = call->arrays();
  for (int i = 0; i < call->num_in; ++i) arrays[i] = inputs[static_cast<size_t>(i)];
  for (int i = 0; i < call->num_out; ++i) arrays[call->num_in + i] = outputs[static_cast<size_t>(i)];

  // Variables: outputs and mutated inputs are written; other inputs read.
  constexpr size_t kMaxVars = 16;
  std::array<engine::Var*, kMaxVars> small_reads, small_writes;
  std::vector<engine::Var*> big_reads, big_writes;
  engine::Var** reads = small_reads.data();
  engine::Var** writes = small_writes.data();
  if (inputs.size() > kMaxVars || outputs.size() + def.mutate_inputs.size() > kMaxVars) {
    big_reads.resize(inputs.size());
    big_writes.resize(outputs.size() + def.mutate_inputs.size());
    reads = big_reads.data();
    writes = big_writes.data();
  }
  size_t nr = 0, nw = 0;
  for (const NDArray& o : outputs.span()) writes[nw++] = o.var();
  for (int m : def.mutate_inputs) writes[nw++] = inputs[static_cast<size_t>(m)].var();
  for (const NDArray& x : inputs) {
    engine::Var* v = x.var();
    if (!contains({writes, nw}, v) && !contains({reads, nr}, v)) reads[nr++] = v;
  }

  engine::get().push(std::move(owner), {reads, nr},
                     {writes, nw},
                     {.device = device,
                      .lane = engine::Lane::kCompute,
                      .priority = options.priority,
                      .name = def.name,
                      .bytes = new_bytes});
  if (autograd::is_recording()) {
    autograd::detail::record(def, attrs, inputs, outputs.span());
    for (size_t i = 0; i < options.out.size(); ++i)
      options.out[i].set_ag_entry(outputs[i].ag_node(), outputs[i].ag_index());
  }
}

}  // namespace

std::vector<NDArray> invoke(OpId op, std::span<const NDArray> inputs, const OpAttrs& attrs,
                            const InvokeOptions& options) {
  Outputs outputs;
  invoke_into(op, inputs, attrs, options, outputs);
  std::span<NDArray> all = outputs.span();
  return {std::make_move_iterator(all.begin()), std::make_move_iterator(all.end())};
}

NDArray invoke1(OpId op, std::span<const NDArray> inputs, const OpAttrs& attrs, const InvokeOptions& options) {
  Outputs outputs;
  invoke_into(op, inputs, attrs, options, outputs);
  KILN_ASSERT(outputs.size() == 1);
  return std::move(outputs[0]);
}

}  // namespace kiln
