// Scaled dot-product attention, fused (_kiln_attention) against its
// decomposition (nd::attention_reference): forward + backward time at a
// training shape, forward time for one generated token, and the peak of the
// device pool's bytes in use for forward + backward as the sequence grows
// (the fused op keeps O(T) per head, the decomposition its [T, T] scores and
// their gradients).
#include <algorithm>

#include "bench/bench.h"
#include "frontend/autograd.h"
#include "frontend/nd.h"
#include "frontend/nd_attention.h"
#include "runtime/engine.h"
#include "runtime/storage.h"

namespace kiln::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

using AttentionFn = NDArray (*)(const NDArray&, const NDArray&, const NDArray&, const nd::AttentionOptions&);

// Forward and backward of sum(attention(q, k, v)), causal, waited for.
void forward_backward(AttentionFn attention, NDArray& q, NDArray& k, NDArray& v) {
  {
    autograd::Record record;
    autograd::backward({nd::sum(attention(q, k, v, {.causal = true}))});
  }
  engine::wait_all();
}

struct Inputs {
  NDArray q, k, v;
  explicit Inputs(Shape s) {
    nd::random::seed(11);
    q = nd::random::normal(s);
    k = nd::random::normal(s);
    v = nd::random::normal(s);
    for (NDArray* x : {&q, &k, &v}) x->attach_grad();
    engine::wait_all();
  }
};

double seconds(AttentionFn attention, const Options& o) {
  Inputs in({32, 4, 128, 64});
  forward_backward(attention, in.q, in.k, in.v);  // warm-up: pools, plans
  return best_of(o.repeat, [&] {
    auto start = Clock::now();
    forward_backward(attention, in.q, in.k, in.v);
    return seconds_since(start);
  });
}

std::vector<Figure> bench_time(const Options& o) {
  const double fused = seconds(nd::scaled_dot_product_attention, o);
  const double reference = seconds(nd::attention_reference, o);
  return {{"attention_fused_fwd_bwd_ms", fused * 1e3, "ms"},
          {"attention_reference_fwd_bwd_ms", reference * 1e3, "ms"},
          {"attention_fused_speedup", reference / fused, "x"}};
}

// Generation: one new query per sequence against a cache of 256 keys,
// forward only (inference).
double decode_seconds(AttentionFn attention, const Options& o) {
  nd::random::seed(12);
  NDArray q = nd::random::normal({32, 4, 1, 64}), k = nd::random::normal({32, 4, 256, 64});
  NDArray v = nd::random::normal({32, 4, 256, 64});
  attention(q, k, v, {.causal = true}).wait_to_read();
  return best_of(std::max(o.repeat, 10), [&] {
    auto start = Clock::now();
    attention(q, k, v, {.causal = true}).wait_to_read();
    return seconds_since(start);
  });
}

std::vector<Figure> bench_decode(const Options& o) {
  return {{"attention_decode_fused_us", decode_seconds(nd::scaled_dot_product_attention, o) * 1e6, "us"},
          {"attention_decode_reference_us", decode_seconds(nd::attention_reference, o) * 1e6, "us"}};
}

constexpr int64_t kLengths[] = {256, 512, 1024, 2048, 4096};

// Bytes in use at the peak of one forward + backward, beyond the inputs and
// their gradient buffers (measured once: peaks do not depend on timing).
double peak_mib(AttentionFn attention, int64_t t) {
  Inputs in({1, 4, t, 64});
  forward_backward(attention, in.q, in.k, in.v);  // gradient buffers exist from here on
  storage::Pool& pool = storage::pool(Device::cpu(0));
  // No cached blocks: a request would otherwise take a cached block up to
  // twice its size (left by an earlier, larger run) and count all of it.
  pool.release_cached();
  const int64_t base = pool.stats().in_use;
  pool.reset_peak();
  forward_backward(attention, in.q, in.k, in.v);
  return static_cast<double>(pool.stats().peak_in_use - base) / kMiB;
}

std::vector<Figure> bench_memory(const Options&) {
  std::vector<Figure> f;
  for (int64_t t : kLengths) {
    f.push_back({fmt::format("attention_fused_peak_mb_T{}", t), peak_mib(nd::scaled_dot_product_attention, t), "MiB"});
    f.push_back({fmt::format("attention_reference_peak_mb_T{}", t), peak_mib(nd::attention_reference, t), "MiB"});
  }
  return f;
}

std::vector<std::string> memory_figures() {
  std::vector<std::string> names;
  for (int64_t t : kLengths) {
    names.push_back(fmt::format("attention_fused_peak_mb_T{}", t));
    names.push_back(fmt::format("attention_reference_peak_mb_T{}", t));
  }
  return names;
}

}  // namespace

void register_attention_benchmarks() {
  add({"attention_time",
       {"attention_fused_fwd_bwd_ms", "attention_reference_fwd_bwd_ms", "attention_fused_speedup"},
       &bench_time});
  add({"attention_decode", {"attention_decode_fused_us", "attention_decode_reference_us"}, &bench_decode});
  add({"attention_memory", memory_figures(), &bench_memory});
}

}  // namespace kiln::bench
