#include "frontend/invoke.h"

#include <array>
#include <iterator>
#include <utility>

#include "frontend/amp.h"
#include "frontend/autograd.h"
#include "frontend/autograd_tape.h"
#include "frontend/eager_grad_builder.h"
#include "frontend/trace.h"
#include "ir/decompose.h"
#include "runtime/kernel.h"
#include "runtime/record_pool.h"

namespace kiln {
namespace {

// Everything a queued kernel needs: the kernel, its attributes and views of
// its arrays, in one record for the common case of at most kInline arrays.
// It holds no reference to the arrays' chunks: every array of the call is a
// read or a write of the pushed op, and a chunk's storage is freed only once
// its engine variable is idle (NDArray's chunk frees it from delete_var's
// on_idle), so the views stay valid until the op has finished. The worker
// then touches no reference count the frontend thread also touches.
// Recycled through RecordPool: allocated where the op is pushed and returned
// to the pool on the worker that ran it. The attributes are released when
// the record is reused, on the pushing thread (so a loop pushing the same
// attributes, `y = x + 1`, does not bounce their reference count between
// threads); a pooled record may so keep the attributes of its last call.
struct KernelCall {
  static constexpr int kInline = 4;
  KernelCall* pool_next = nullptr;
  KernelFn fn = nullptr;
  OpId op = OpId::kNumOps;
  bool is_train = false;
  int num_in = 0, num_out = 0;
  OpAttrs attrs;
  std::array<TensorView, kInline> inline_views;
  std::vector<TensorView> heap_views;

  // Sizes the view list; returns it.
  TensorView* set_counts(int in, int out) {
    num_in = in;
    num_out = out;
    if (in + out <= kInline) return inline_views.data();
    heap_views.resize(static_cast<size_t>(in + out));
    return heap_views.data();
  }
  TensorView* views() { return num_in + num_out <= kInline ? inline_views.data() : heap_views.data(); }

  void reset() { fn = nullptr; }

  void run(const engine::RunContext& rc) {
    TensorView* v = views();
    KernelContext ctx{rc, attrs, is_train, op};
    fn(ctx, {v, static_cast<size_t>(num_in)}, {v + num_in, static_cast<size_t>(num_out)});
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

// The outputs of one call: up to 4 without a heap allocation, constructed
// only as they are added.
class Outputs {
 public:
  Outputs() = default;
  Outputs(const Outputs&) = delete;
  Outputs& operator=(const Outputs&) = delete;
  ~Outputs() {
    if (n_ <= kInline)
      for (size_t i = 0; i < n_; ++i) inline_data()[i].~NDArray();
  }

  void push_back(NDArray&& a) {
    if (n_ < kInline) [[likely]] {
      ::new (static_cast<void*>(inline_data() + n_)) NDArray(std::move(a));
      ++n_;
      return;
    }
    push_back_heap(std::move(a));
  }
  void push_back(const NDArray& a) { push_back(NDArray(a)); }
  NDArray& operator[](size_t i) { return n_ <= kInline ? inline_data()[i] : heap_[i]; }
  std::span<NDArray> span() { return {n_ <= kInline ? inline_data() : heap_.data(), n_}; }
  size_t size() const { return n_; }

 private:
  static constexpr size_t kInline = 4;
  void push_back_heap(NDArray&& a) {
    if (n_ == kInline) {  // move the inline ones to the heap
      heap_.reserve(2 * kInline);
      for (size_t i = 0; i < kInline; ++i) {
        heap_.push_back(std::move(inline_data()[i]));
        inline_data()[i].~NDArray();
      }
    }
    heap_.push_back(std::move(a));
    ++n_;
  }
  NDArray* inline_data() { return std::launder(reinterpret_cast<NDArray*>(inline_)); }
  alignas(NDArray) unsigned char inline_[kInline * sizeof(NDArray)];
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

// Records the call on the autograd tape when recording; outputs written
// into options.out take the tape entries of the call's outputs.
void record_call(const OpDef& def, const OpAttrs& attrs, std::span<const NDArray> inputs, const InvokeOptions& options,
                 Outputs& outputs) {
  if (!autograd::is_recording()) return;
  autograd::detail::record(def, attrs, inputs, outputs.span());
  for (size_t i = 0; i < options.out.size(); ++i)
    options.out[i].set_ag_entry(outputs[i].ag_node(), outputs[i].ag_index());
}

// Runs `def` as its decomposition (ir/decompose.h) on the inputs' device.
// The ops it emits are not recorded; the op itself is, below, so its
// gradient is its own GradFn (whose ops decompose in turn where a device has
// no kernel for them); autocast is off inside, as the decomposition computes
// as its op's kernel would. `out_types` is a copy: the ops invoked here reuse
// invoke's per-thread type buffers.
void run_decomposed(const OpDef& def, DecomposeFn fn, std::span<const NDArray> inputs, const OpAttrs& attrs,
                    const InvokeOptions& options, Device device, std::vector<TensorType> out_types,
                    Outputs& outputs) {
  EagerGradBuilder b(device);
  std::vector<GradValue> results;
  {
    autograd::Pause pause(autograd::is_training());
    amp::Autocast no_autocast(DType::kBfloat16, false);  // the policy applied to the op's own inputs above
    std::vector<GradValue> in;
    for (const NDArray& x : inputs) in.push_back(b.add(x));
    results = fn(b, in, attrs);
    KILN_ASSERT(results.size() == out_types.size());
    for (size_t i = 0; i < results.size(); ++i) {
      const NDArray& r = b.value(results[i]);
      KILN_CHECK(r.shape() == out_types[i].shape && r.dtype() == out_types[i].dtype, InternalError,
                 "internal error: {}'s decomposition gives output {} as {}{}, the op {}{}", def.name, i,
                 dtype_short_name(r.dtype()), r.shape(), dtype_short_name(out_types[i].dtype), out_types[i].shape);
      if (options.out.empty()) {
        outputs.push_back(r);
      } else {
        invoke(OpId::kCopy, {r}, {}, {.out = options.out.subspan(i, 1)});
        outputs.push_back(options.out[i]);
      }
    }
  }
  record_call(def, attrs, inputs, options, outputs);
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
  std::vector<NDArray> cast_inputs;
  if (amp::active()) [[unlikely]] {
    if (amp::detail::cast_inputs(def, inputs, cast_inputs)) inputs = cast_inputs;
  }
  Device device = common_device(def, inputs, options);

  thread_local std::vector<TensorType> in_types, out_types;
  in_types.clear();
  for (const NDArray& x : inputs) in_types.push_back({x.shape(), x.dtype()});
  infer_types(def, attrs, in_types, out_types);
  if (DecomposeFn decompose = decomposition(op)) [[unlikely]] {
    if (decomposition_forced(op) || !has_kernel(op, device.kind))
      return run_decomposed(def, decompose, inputs, attrs, options, device, out_types, outputs);
  }
  KernelFn fn = find_kernel(def, device, in_types, out_types);

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
      outputs.push_back(o);
    }
  } else {
    for (const TensorType& t : out_types) {
      outputs.push_back(NDArray::empty(t.shape, {t.dtype, device}));
      new_bytes += static_cast<int64_t>(outputs[outputs.size() - 1].nbytes());
    }
  }

  KernelCall* call = RecordPool<KernelCall>::alloc();
  PooledCall owner(call);
  call->fn = fn;
  call->op = op;
  if (!call->attrs.same(attrs)) call->attrs = attrs;
  call->is_train = autograd::is_training();
  TensorView* views = call->set_counts(static_cast<int>(inputs.size()), static_cast<int>(outputs.size()));
  for (const NDArray& x : inputs) *views++ = TensorView{x.data(), x.shape(), x.dtype()};
  for (const NDArray& o : outputs.span()) *views++ = TensorView{o.data(), o.shape(), o.dtype()};

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
  record_call(def, attrs, inputs, options, outputs);
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
