// oneDNN plumbing for CPU kernels: the engine, per-thread streams and
// scratchpads, a process-wide plan cache, layout conversions and temporaries.
//
//   struct ConvPlan { dnnl::convolution_forward prim; size_t scratchpad = 0; onednn::Conversion src, dst; };
//   auto plan = onednn::cached<ConvPlan>(key, [&] { return make_plan(...); });
//   onednn::Call call(ctx.run);                       // sets the OpenMP thread count
//   call.run(plan->prim, plan->scratchpad,
//            {{DNNL_ARG_SRC, call.in(plan->src, x.data)}, {DNNL_ARG_DST, call.out(plan->dst, y.data)}});
//   call.finish();                                    // reorders outputs into the user's buffers
//
// Plans (primitives plus the layouts they chose) are created once per key and
// kept for the life of the process; lookups are thread safe, and creation runs
// outside the lock. Keys are strings that start with the plan kind ("conv_fwd|")
// and must hold everything the plan depends on, including the thread count:
// oneDNN fixes its work split when it creates a primitive. Primitives run with
// a user scratchpad kept per thread, so engine workers of different devices
// may execute one cached primitive at once.
//
// User arrays are dense and row-major ("plain" layouts), float32 or 16-bit. A Conversion
// describes how a user array maps to a layout a primitive picked (blocked
// formats, format_tag::any); `Call` reorders through temporaries from the
// device's storage pool, freed when the Call ends.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/ops/nn.h"
#include "ir/shape.h"
#include "runtime/engine.h"
#include "runtime/storage.h"

namespace kiln::cpu::onednn {

using dnnl::memory;

const dnnl::engine& engine();

// Descriptors (f32 unless `dt` says otherwise): row-major `dims`, or
// format_tag::any (the primitive chooses).
memory::desc plain_desc(const memory::dims& dims, memory::data_type dt = memory::data_type::f32);
memory::desc any_desc(const memory::dims& dims, memory::data_type dt = memory::data_type::f32);
// Dense `dims` whose axis `innermost` varies fastest and the others row-major
// in their order: channel-last data ({N, C, H, W} stored as NHWC: axis 1) and
// channel-last convolution weights ({O, I, kh, kw} as OHWI: axis 1; grouped
// {G, O/G, I/G, kh, kw} as G, O/G, kh, kw, I/G: axis 2).
memory::desc channels_last_desc(const memory::dims& dims, memory::data_type dt, size_t innermost = 1);
memory::data_type data_type(DType t);  // float32, bfloat16 or float16
// Whether oneDNN computes convolutions and matrix products with `t` data on
// this CPU (float32 always; bfloat16 on AVX-512 machines, natively where the
// CPU has AVX512-BF16 or AMX; float16 where this oneDNN has kernels for it).
// Kernels widen to float32 otherwise (runtime/kernel_widen.h).
bool computes_in(DType t);
memory::dims to_dims(const Shape& s);

// Appends "d0x d1x ..|" to a key.
void append_key(std::string& key, const memory::dims& dims);

// Primitive attributes with a user-managed scratchpad (what Call::run expects).
dnnl::primitive_attr scratchpad_attr();
// scratchpad_attr() with post-ops applied to the primitive's result, in this
// order: a `sum` (dst += the destination's previous contents; see
// Call::accumulate) when `sum`, then the activation `act` when given (relu,
// sigmoid, tanh or softrelu: ir/ops/fused_layers.h).
dnnl::primitive_attr post_ops_attr(bool sum, std::optional<ActType> act);
// "sum|", "relu|", "sum|relu|" or "" for plan keys.
std::string post_ops_key(bool sum, std::optional<ActType> act);
template <typename PrimitiveDesc>
size_t scratchpad_bytes(const PrimitiveDesc& pd) {
  return pd.scratchpad_desc().get_size();
}

namespace detail {
std::shared_ptr<const void> cache_find(const std::string& key);
// Returns the value now stored under `key` (an earlier insert wins a race).
std::shared_ptr<const void> cache_insert(const std::string& key, std::shared_ptr<const void> value);
}  // namespace detail

// The plan stored under `key`, created by `make()` (returning T) on first use.
template <typename T, typename Make>
std::shared_ptr<const T> cached(const std::string& key, Make&& make) {
  if (auto found = detail::cache_find(key)) return std::static_pointer_cast<const T>(found);
  std::shared_ptr<const void> made = std::make_shared<const T>(make());
  return std::static_pointer_cast<const T>(detail::cache_insert(key, std::move(made)));
}

// `from` -> `to` layouts of one array, with the reorder between them (none
// when the layouts are equal). Inputs convert user -> primitive, outputs
// primitive -> user.
struct Conversion {
  memory::desc from, to;
  std::optional<dnnl::reorder> reorder;
  Conversion() = default;
  Conversion(const memory::desc& from, const memory::desc& to);
};

// Below this much work (multiply-adds, or elements times window size) a
// call runs on one thread: waking OpenMP workers costs microseconds on an idle
// machine and milliseconds on a busy one, more than small problems take.
inline constexpr int64_t kParallelWork = 1 << 20;

// One kernel call: thread count, temporaries, pending output reorders.
// Conversions and primitives passed in must outlive finish().
class Call {
 public:
  // Uses run.num_threads threads, or one when `work` < kParallelWork.
  Call(const engine::RunContext& run, int64_t work);
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  int threads() const { return threads_; }
  // User data in layout `desc`, wrapped without copying.
  memory wrap(const memory::desc& desc, const void* data) const;
  // An input: the user's buffer (layout c.from) as layout c.to.
  memory in(const Conversion& c, const void* data);
  // An output: memory in layout c.from that finish() leaves in `data` (layout c.to).
  memory out(const Conversion& c, void* data);
  // An output the primitive accumulates into (the sum post-op): memory in
  // layout c.from that starts as `init` (the user's layout, read through the
  // input conversion `init_conv` = c reversed) and that finish() leaves in
  // `data`. `init` may be `data`.
  memory accumulate(const Conversion& c, const Conversion& init_conv, const void* init, void* data);
  // A temporary in layout `desc`, valid until the Call ends.
  memory temp(const memory::desc& desc);
  void run(const dnnl::primitive& p, size_t scratchpad, std::unordered_map<int, memory> args);
  // The calling thread's stream (what run and finish execute on).
  static dnnl::stream& stream();
  // Runs the pending output reorders and waits for the stream.
  void finish();

 private:
  engine::RunContext run_;
  int threads_;
  std::vector<storage::Block> temps_;
  std::vector<std::pair<const dnnl::reorder*, std::pair<memory, memory>>> pending_;
};

}  // namespace kiln::cpu::onednn
