#include "frontend/kvstore.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "frontend/invoke.h"
#include "ir/dtype.h"
#include "ir/ops/nn.h"

namespace kiln::kv {

namespace detail {

namespace {

template <typename T>
void add_into(T* out, const T* a, const T* b, int64_t n) {
  if constexpr (std::is_arithmetic_v<T>) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(a[i] + b[i]);
  } else if constexpr (std::is_same_v<T, Half>) {  // halves: add in float
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_half(half_to_float(a[i]) + half_to_float(b[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
  }
}

}  // namespace

void sum_async(const std::vector<NDArray>& inputs, const NDArray& out, int priority) {
  KILN_ASSERT(!inputs.empty());
  if (!out.device().is_cpu()) {
    // On a GPU every input is on out's device (reduce_flat staged them): the
    // registry's add_n (or copy) kernel of that device writes out in place.
    NDArray dst = out;
    const InvokeOptions options{.out = {&dst, 1}, .priority = priority};
    if (inputs.size() == 1) {
      invoke(OpId::kCopy, std::span<const NDArray>(inputs), {}, options);
    } else {
      invoke(OpId::kAddN, std::span<const NDArray>(inputs),
             OpAttrs::make(AddNAttrs{static_cast<int>(inputs.size())}), options);
    }
    return;
  }
  std::vector<engine::Var*> reads;
  for (const NDArray& a : inputs) {
    if (std::find(reads.begin(), reads.end(), a.var()) == reads.end()) reads.push_back(a.var());
  }
  engine::Var* writes[] = {out.var()};
  engine::get().push(
      [inputs, out](engine::RunContext) {
        dispatch_dtype(out.dtype(), [&](auto zero) {
          using T = decltype(zero);
          if constexpr (std::is_same_v<T, bool>) {
            throw TypeError("KVStore: cannot sum bool arrays");
          } else {
            T* o = static_cast<T*>(out.data());
            int64_t n = out.size();
            if (inputs.size() == 1) {
              std::memmove(o, inputs[0].data(), out.nbytes());
              return;
            }
            add_into(o, static_cast<const T*>(inputs[0].data()), static_cast<const T*>(inputs[1].data()), n);
            for (size_t i = 2; i < inputs.size(); ++i) add_into(o, o, static_cast<const T*>(inputs[i].data()), n);
          }
        });
      },
      reads, writes, {.device = out.device(), .lane = engine::Lane::kCompute, .priority = priority, .name = "kv_sum"});
}

}  // namespace detail

namespace {

using detail::sum_async;

// Adds every value on `home` with one kernel. CPU devices share host memory,
// so the kernel reads a value of another CPU device in place (the engine
// still orders it after the value's writer); other values are first staged
// on `home` by a copy.
void reduce_flat(const std::vector<NDArray>& values, Device home, const NDArray& dst, int priority) {
  std::vector<NDArray> local;
  for (const NDArray& v : values) {
    if (v.device() == home || (v.device().is_cpu() && home.is_cpu())) {
      local.push_back(v);
    } else {
      NDArray staged = NDArray::empty(v.shape(), {v.dtype(), home});
      v.copy_to(staged, priority, "kv_copy");
      local.push_back(staged);
    }
  }
  sum_async(local, dst, priority);
}

// Pairwise tree: level by level, value 2i+1 is added to value 2i on the
// latter's device; the last addition writes `dst`. values[0] should be on dst's
// device so the result needs no final copy.
void reduce_tree(std::vector<NDArray> values, const NDArray& dst, int priority) {
  while (values.size() > 2) {
    std::vector<NDArray> next;
    for (size_t i = 0; i < values.size(); i += 2) {
      if (i + 1 == values.size()) {
        next.push_back(values[i]);
        continue;
      }
      NDArray partial = NDArray::empty(values[i].shape(), {values[i].dtype(), values[i].device()});
      reduce_flat({values[i], values[i + 1]}, values[i].device(), partial, priority);
      next.push_back(partial);
    }
    values = std::move(next);
  }
  reduce_flat(values, dst.device(), dst, priority);
}

class LocalStore final : public KVStore {
 public:
  std::string_view type() const override { return "local"; }

 protected:
  void reduce(const Key&, Entry& entry, const std::vector<NDArray>& values, int priority) override {
    if (!entry.home_fixed) {
      if (entry.stored.device() != Device::cpu(0)) entry.stored = entry.stored.copy_to(Device::cpu(0));
      entry.home_fixed = true;
    }
    reduce_flat(values, Device::cpu(0), entry.stored, priority);
  }
};

class DeviceStore final : public KVStore {
 public:
  std::string_view type() const override { return "device"; }

 protected:
  void reduce(const Key&, Entry& entry, const std::vector<NDArray>& values, int priority) override {
    detail::reduce_device_tree(entry.stored, entry.home_fixed, load_, values, priority);
  }

 private:
  std::unordered_map<Device, int64_t> load_;
};

}  // namespace

void detail::fix_home(NDArray& stored, bool& home_fixed, std::unordered_map<Device, int64_t>& load,
                      const std::vector<NDArray>& values) {
  if (home_fixed) return;
  // The least loaded device among the values' (first one on ties): keys
  // spread over the devices in proportion to their bytes, deterministically.
  Device home = values[0].device();
  for (const NDArray& v : values) {
    if (load[v.device()] < load[home]) home = v.device();
  }
  load[home] += static_cast<int64_t>(stored.nbytes());
  if (stored.device() != home) stored = stored.copy_to(home);
  home_fixed = true;
}

void detail::reduce_device_tree(NDArray& stored, bool& home_fixed, std::unordered_map<Device, int64_t>& load,
                                const std::vector<NDArray>& values, int priority) {
  fix_home(stored, home_fixed, load, values);
  Device home = stored.device();
  std::vector<NDArray> ordered;  // home's values first, then the others in order
  for (const NDArray& v : values) {
    if (v.device() == home) ordered.push_back(v);
  }
  for (const NDArray& v : values) {
    if (v.device() != home) ordered.push_back(v);
  }
  reduce_tree(std::move(ordered), stored, priority);
}

std::unique_ptr<KVStore> KVStore::create(std::string_view type) {
  if (type == "local") return std::make_unique<LocalStore>();
  if (type == "device") return std::make_unique<DeviceStore>();
  if (type == "nccl") return detail::create_nccl();
  if (type == "dist_sync") return detail::create_dist_sync();
  throw ValueError(fmt::format("KVStore: unknown type '{}'; expected local, device, nccl or dist_sync", type));
}

const KVStore::Entry& KVStore::entry(const Key& key, std::string_view what) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    throw ValueError(fmt::format("KVStore({}) {}: unknown key '{}'; call init('{}', value) first ({} keys known)",
                                 type(), what, key, key, entries_.size()));
  }
  return it->second;
}

KVStore::Entry& KVStore::entry(const Key& key, std::string_view what) {
  return const_cast<Entry&>(static_cast<const KVStore*>(this)->entry(key, what));
}

void KVStore::check_arrays(const Key& key, const Entry& e, const std::vector<NDArray>& arrays, std::string_view what,
                           std::string_view role) const {
  KILN_CHECK(!arrays.empty(), ValueError, "KVStore({}) {} of key '{}': no {} given", type(), what, key, role);
  for (size_t i = 0; i < arrays.size(); ++i) {
    const NDArray& a = arrays[i];
    KILN_CHECK(!a.is_none() && !a.is_symbolic(), ValueError, "KVStore({}) {} of key '{}': {} {} is {}", type(), what,
               key, role, i, a.is_none() ? "empty (none)" : "symbolic (inside a traced forward)");
    KILN_CHECK(a.shape() == e.stored.shape(), ShapeError,
               "KVStore({}) {} of key '{}': {} {} has shape {} on {}, but the key was initialized with shape {}",
               type(), what, key, role, i, a.shape(), a.device(), e.stored.shape());
    KILN_CHECK(a.dtype() == e.stored.dtype(), TypeError,
               "KVStore({}) {} of key '{}': {} {} has dtype {} on {}, but the key was initialized with dtype {}",
               type(), what, key, role, i, a.dtype(), a.device(), e.stored.dtype());
    const std::string why = unreachable(a.device());
    KILN_CHECK(why.empty(), DeviceError, "KVStore({}) {} of key '{}': {} {} is on {}, which this store cannot reach{}",
               type(), what, key, role, i, a.device(), why);
  }
}

void KVStore::init(const Key& key, const NDArray& value) {
  KILN_CHECK(!entries_.contains(key), ValueError, "KVStore({}) init: key '{}' is already initialized", type(), key);
  KILN_CHECK(!value.is_none() && !value.is_symbolic(), ValueError, "KVStore({}) init of key '{}': the value is {}",
             type(), key, value.is_none() ? "empty (none)" : "symbolic (inside a traced forward)");
  KILN_CHECK(value.dtype() != DType::kBool, TypeError, "KVStore({}) init of key '{}': bool arrays cannot be summed",
             type(), key);
  const std::string why = unreachable(value.device());
  KILN_CHECK(why.empty(), DeviceError, "KVStore({}) init of key '{}': the value is on {}, which this store cannot reach{}",
             type(), key, value.device(), why);
  entries_.emplace(key, Entry{.stored = value.copy()});
}

void KVStore::push(const Key& key, const std::vector<NDArray>& values, int priority) {
  Entry& e = entry(key, "push");
  check_arrays(key, e, values, "push", "value");
  reduce(key, e, values, priority);
}

void KVStore::push_batch(const std::vector<PushItem>& items) {
  std::vector<Entry*> entries;
  for (const PushItem& item : items) {
    Entry& e = entry(item.key, "push");
    check_arrays(item.key, e, item.values, "push", "value");
    entries.push_back(&e);
  }
  reduce_batch(items, entries);
}

void KVStore::reduce_batch(const std::vector<PushItem>& items, const std::vector<Entry*>& entries) {
  for (size_t i = 0; i < items.size(); ++i) reduce(items[i].key, *entries[i], items[i].values, items[i].priority);
}

std::vector<detail::BucketRange> detail::plan_buckets(const std::vector<BucketItem>& items, size_t limit) {
  KILN_CHECK(limit > 0, ValueError, "KVStore(nccl): the bucket size must be > 0 bytes");
  std::vector<BucketRange> buckets;
  size_t bytes = 0;  // in the open bucket, the last of `buckets`
  for (size_t i = 0; i < items.size(); ++i) {
    const bool fits = i > 0 && items[i].group == items[i - 1].group && bytes + items[i].bytes <= limit;
    if (fits) {
      buckets.back().end = i + 1;
      bytes += items[i].bytes;
      continue;
    }
    buckets.push_back({i, i + 1});
    // An item over the limit closes its bucket at once.
    bytes = items[i].bytes > limit ? limit + 1 : items[i].bytes;
  }
  return buckets;
}

size_t detail::nccl_bucket_bytes() {
  const char* env = std::getenv("KILN_NCCL_BUCKET_MB");
  double mb = env != nullptr ? std::atof(env) : 25.0;
  KILN_CHECK(mb > 0, ValueError, "KVStore(nccl): KILN_NCCL_BUCKET_MB must be a number > 0, got '{}'",
             env != nullptr ? env : "");
  return static_cast<size_t>(mb * 1024 * 1024);
}

void KVStore::pull(const Key& key, const std::vector<NDArray>& outs, int priority) {
  const Entry& e = entry(key, "pull");
  check_arrays(key, e, outs, "pull", "out");
  for (const NDArray& o : outs) e.stored.copy_to(o, priority, "kv_copy");
}

void KVStore::pushpull(const Key& key, const std::vector<NDArray>& values, const std::vector<NDArray>& outs,
                       int priority) {
  Entry& e = entry(key, "pushpull");
  check_arrays(key, e, values, "pushpull", "value");
  check_arrays(key, e, outs, "pushpull", "out");
  reduce(key, e, values, priority);
  for (const NDArray& o : outs) e.stored.copy_to(o, priority, "kv_copy");
}

void KVStore::broadcast(const Key& key, const NDArray& value, const std::vector<NDArray>& outs, int priority) {
  if (!entries_.contains(key)) {
    init(key, value);
  } else {
    Entry& e = entry(key, "broadcast");
    check_arrays(key, e, {value}, "broadcast", "value");
    value.copy_to(e.stored, priority, "kv_copy");
  }
  sync_from_root(key, entry(key, "broadcast"), priority);
  pull(key, outs, priority);
}

Device KVStore::home(const Key& key) const { return entry(key, "home").stored.device(); }

}  // namespace kiln::kv
