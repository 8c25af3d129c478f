#include "backends/cpu/weight_cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/error.h"

namespace kiln::cpu {
namespace {

constexpr size_t kAlign = 64;

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The source's copy and the derived form in one aligned allocation.
class Entry final : public DerivedWeights {
 public:
  Entry(std::string key, const void* source, size_t source_bytes, size_t bytes)
      : key_(std::move(key)), source_bytes_(source_bytes), bytes_(bytes) {
    const size_t total = round_up(source_bytes) + round_up(std::max<size_t>(bytes, 1));
    memory_ = static_cast<char*>(std::aligned_alloc(kAlign, total));
    if (memory_ == nullptr) throw OutOfMemory(fmt::format("weight cache: cannot allocate {} bytes", total));
    std::memcpy(memory_, source, source_bytes);
  }
  ~Entry() override { std::free(memory_); }
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;

  const void* data() const override { return memory_ + round_up(source_bytes_); }
  size_t bytes() const override { return bytes_; }
  void* mutable_data() { return memory_ + round_up(source_bytes_); }
  size_t footprint() const { return round_up(source_bytes_) + round_up(bytes_); }
  const std::string& key() const { return key_; }
  uint64_t last_use = 0;  // the cache's lookup count at its last hit or its creation (under the cache's lock)
  bool derived_from(const void* source, size_t source_bytes) const {
    return source_bytes == source_bytes_ && std::memcmp(memory_, source, source_bytes) == 0;
  }

 private:
  std::string key_;
  size_t source_bytes_, bytes_;
  char* memory_ = nullptr;
};

int64_t initial_limit() {
  const char* env = std::getenv("KILN_WEIGHT_CACHE_MB");
  if (env == nullptr || *env == '\0') return int64_t{512} << 20;
  return std::max<int64_t>(0, std::atoll(env)) << 20;
}

// Entries most recently used first; `index` finds them by key. One key may
// name several entries: an executor's memory plan gives one address to the
// folded weights of several layers in turn (so `kind` and the address do not
// identify a layer), and then each layer's bytes have an entry of their own.
struct Cache {
  using Iterator = std::list<std::shared_ptr<Entry>>::iterator;
  std::mutex mutex;
  int64_t limit = initial_limit();
  bool enabled = true;
  int64_t bytes = 0, hits = 0, misses = 0;
  uint64_t lookups = 0;
  std::list<std::shared_ptr<Entry>> lru;
  std::unordered_multimap<std::string, Iterator> index;

  void erase(Iterator it) {
    bytes -= static_cast<int64_t>((*it)->footprint());
    auto [b, e] = index.equal_range((*it)->key());
    for (auto i = b; i != e; ++i)
      if (i->second == it) {
        index.erase(i);
        break;
      }
    lru.erase(it);
  }
  void trim() {
    while (bytes > limit && !lru.empty()) erase(std::prev(lru.end()));
  }
  // Drops the entries no lookup found in the last max(kMinIdle, kIdleFactor x
  // entries) lookups: weights that changed (a model evaluated between
  // training steps) leave soon instead of filling the cache up to its limit,
  // while a model in use hits each of its entries once per call.
  void drop_idle() {
    static constexpr uint64_t kMinIdle = 256, kIdleFactor = 4;
    const uint64_t idle = std::max<uint64_t>(kMinIdle, kIdleFactor * lru.size());
    while (!lru.empty() && lookups - lru.back()->last_use > idle) erase(std::prev(lru.end()));
  }
  // Moves `entry` to the front if it is still cached.
  void touch(const Entry* entry) {
    auto [b, e] = index.equal_range(entry->key());
    for (auto i = b; i != e; ++i)
      if (i->second->get() == entry) {
        lru.splice(lru.begin(), lru, i->second);
        return;
      }
  }
};

// Entries one key may name: beyond this the least recently used of them goes
// (a model whose weights change between inference calls would otherwise fill
// the cache with entries that never hit again).
constexpr size_t kMaxPerKey = 16;

Cache& cache() {
  static Cache* c = new Cache;  // leaked: kernels may still run while statics are destroyed
  return *c;
}

}  // namespace

std::shared_ptr<const DerivedWeights> weight_cache_find(const std::string& kind, const void* source,
                                                        size_t source_bytes, size_t bytes,
                                                        const std::function<void(void*)>& make) {
  Cache& c = cache();
  std::string key = fmt::format("{}@{}", kind, fmt::ptr(source));
  std::vector<std::shared_ptr<Entry>> candidates;
  {
    std::lock_guard lock(c.mutex);
    if (!c.enabled || c.limit <= 0 || static_cast<int64_t>(round_up(source_bytes) + round_up(bytes)) > c.limit) return nullptr;
    auto [b, e] = c.index.equal_range(key);
    for (auto i = b; i != e; ++i) candidates.push_back(*i->second);
  }
  // Compared outside the lock: entries never change once published. Another
  // layer's bytes differ early, so a wrong candidate costs little.
  for (const auto& found : candidates) {
    if (!found->derived_from(source, source_bytes)) continue;
    std::lock_guard lock(c.mutex);
    ++c.hits;
    found->last_use = ++c.lookups;
    c.touch(found.get());
    return found;
  }
  auto entry = std::make_shared<Entry>(key, source, source_bytes, bytes);
  make(entry->mutable_data());
  std::lock_guard lock(c.mutex);
  ++c.misses;
  entry->last_use = ++c.lookups;
  c.drop_idle();
  if (c.index.count(key) >= kMaxPerKey) {  // drop the key's least recently used entry
    Cache::Iterator oldest = c.lru.end();
    for (auto it = c.lru.begin(); it != c.lru.end(); ++it)
      if ((*it)->key() == key) oldest = it;
    if (oldest != c.lru.end()) c.erase(oldest);
  }
  c.lru.push_front(entry);
  c.index.emplace(key, c.lru.begin());
  c.bytes += static_cast<int64_t>(entry->footprint());
  c.trim();
  return entry;
}

WeightCacheStats weight_cache_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  return {.hits = c.hits, .misses = c.misses, .entries = static_cast<int64_t>(c.lru.size()), .bytes = c.bytes};
}

void weight_cache_clear() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  c.lru.clear();
  c.index.clear();
  c.bytes = c.hits = c.misses = 0;
  c.lookups = 0;
}

int64_t weight_cache_set_limit(int64_t bytes) {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  const int64_t previous = c.limit;
  c.limit = std::max<int64_t>(0, bytes);
  c.trim();
  return previous;
}

bool weight_cache_enable(bool enabled) {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  return std::exchange(c.enabled, enabled);
}

}  // namespace kiln::cpu
