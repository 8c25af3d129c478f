// Derived forms of weights (Winograd-transformed, reordered into a oneDNN
// primitive's blocked layout) kept between inference calls, so that a model
// whose weights do not change pays for the transform once instead of per call.
//
//   auto u = cpu::weight_cache_find("winograd4|64x64|", w, w_bytes, u_bytes,
//                                   [&](void* out) { transform(w, out); });
//   if (u) use(u->data());   // else: compute into scratch as before (cache off)
//
// An entry is keyed by `kind` (what the derived form is: its algorithm and
// shapes; everything the bytes depend on besides the weights) and the
// weights' address, and keeps a copy of the bytes it was derived from. A
// lookup compares the weights' current bytes with that copy (memcmp: a read
// of twice the weights, against a transform that writes up to 4x their size),
// so an entry can never be stale: a weight changed in place, a parameter
// replaced by another array at the same address, or BatchNorm statistics
// folded into a changed weight all miss and rebuild the entry. No version
// counters are involved.
//
// Kernels use it for inference only (KernelContext::is_train false): a
// training step changes its weights every time, and would pay for the copy
// and the compare without a hit.
//
// The cache holds at most KILN_WEIGHT_CACHE_MB MiB (default 512; 0 turns it
// off: weight_cache_find returns null), counting the copies and the derived
// forms; beyond that the least recently used entries are dropped (entries in
// use stay alive until released). Hybridized ResNet-18 at batch 256 holds
// about 200 MiB (F(4x4) weights are 4x the 3x3 weights). Entries of weights
// that changed are never found again: an entry that no lookup found in the
// last max(256, 4 x entries) lookups leaves at the next miss, so a training
// run that evaluates in predict mode now and then does not keep the old ones. weight_cache_set_limit changes the limit for
// the process; weight_cache_enable turns lookups off and on without dropping
// entries (A/B benchmarks, tests).
//
// Thread safety: all functions may be called concurrently; entries are
// immutable once returned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace kiln::cpu {

// One derived form: `bytes` bytes, 64-byte aligned.
class DerivedWeights {
 public:
  virtual ~DerivedWeights() = default;
  virtual const void* data() const = 0;
  virtual size_t bytes() const = 0;
};

// The derived form `kind` of the `source_bytes` bytes at `source`: the cached
// one if its copy of the source equals the current bytes, else a new one of
// `bytes` bytes filled by `make(out)` (and cached). Null when the cache is
// off or the entry alone would exceed the limit: the caller computes it
// itself.
std::shared_ptr<const DerivedWeights> weight_cache_find(const std::string& kind, const void* source,
                                                        size_t source_bytes, size_t bytes,
                                                        const std::function<void(void*)>& make);

struct WeightCacheStats {
  int64_t hits = 0, misses = 0;  // since start or weight_cache_clear
  int64_t entries = 0;
  int64_t bytes = 0;  // copies and derived forms held
};
WeightCacheStats weight_cache_stats();
// Drops every entry and zeroes the counters.
void weight_cache_clear();
// Sets the limit in bytes (0: off; entries beyond it are dropped now);
// returns the previous limit.
int64_t weight_cache_set_limit(int64_t bytes);
// While disabled weight_cache_find returns null and the entries stay;
// returns whether it was enabled.
bool weight_cache_enable(bool enabled);

}  // namespace kiln::cpu
