// CPU kernels of the linalg family: dot and batch_dot.
//
// float32 products run on oneDNN's matmul primitive, wrapping the operands'
// storage without copies (transposes become strides), except on builds
// without AVX-512, where large products with a transposed first source run on
// OpenBLAS (openblas_gemm.h says why) or, batched, copy that source
// untransposed first (see onednn_matmul). Creating a primitive
// costs tens of microseconds, so primitives are cached per (dtype, batch, m,
// k, n, transposes, threads), up to kMaxCachedPlans of them; the cache is shared
// by all engine workers (a mutex guards lookups; a primitive is executed
// concurrently only with a per-call scratchpad, which each thread keeps).
//
// oneDNN (built with OpenMP) runs on omp_get_max_threads() threads, a per-
// thread setting in libgomp: each call sets it to the engine's thread count
// for the device (RunContext::num_threads) first. The thread count is part of
// the cache key because oneDNN fixes its work split when creating a primitive.
//
// bfloat16 and float16 products run the same primitive in that type (float32
// accumulation), or widen to float32 where oneDNN has no kernel for the type.
// float64 and integer products, vector . vector, and tiny float32 products
// (where a oneDNN call costs more than the arithmetic) use the loops below.
// Integer products wrap (computed in the unsigned type of the same width).
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "backends/cpu/gemv.h"
#include "backends/cpu/linalg_kernels.h"
#include "backends/cpu/matrix_copy.h"
#include "backends/cpu/onednn_util.h"
#include "backends/cpu/openblas_gemm.h"
#include "backends/cpu/parallel_claim.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/thread_buffer.h"
#include "backends/cpu/widen.h"
#include "ir/ops/linalg.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

// Below this many multiply-adds a float32 product uses the loops (measured: a
// cached oneDNN call costs a few microseconds).
constexpr int64_t kSmallProduct = 8 * 1024;

// ---- oneDNN matmul with a primitive cache

constexpr size_t kMaxCachedPlans = 1024;

struct MatmulKey {
  DType dtype;
  int64_t batch, m, k, n;
  bool ta, tb;
  int threads;
  bool bias = false;  // a bias row [n] added to every output row (dense layers)
  int act = -1;       // an ActType applied as an eltwise post-op, or -1
  bool operator==(const MatmulKey&) const = default;
};

struct MatmulKeyHash {
  size_t operator()(const MatmulKey& key) const {
    size_t h = static_cast<size_t>(key.dtype) * 0x9e3779b97f4a7c15ull;
    for (int64_t v : {key.batch, key.m, key.k, key.n, int64_t{key.ta}, int64_t{key.tb}, int64_t{key.threads},
                      int64_t{key.bias}, int64_t{key.act}})
      h ^= std::hash<int64_t>{}(v) + 0x9e3779b9 + (h << 6) + (h >> 2);
    return h;
  }
};

struct MatmulPlan {
  dnnl::matmul primitive;
  dnnl::memory::desc src, weights, dst, bias;
  size_t scratchpad_bytes = 0;
};

const dnnl::engine& cpu_engine() { return cpu::onednn::engine(); }

dnnl::memory::desc matrix_desc(const MatmulKey& key, int64_t rows, int64_t cols, bool transposed) {
  using dims = dnnl::memory::dims;
  // Logical [rows, cols]; stored [cols, rows] when transposed.
  dims shape = {rows, cols}, strides = transposed ? dims{1, rows} : dims{cols, 1};
  if (key.batch > 1) {
    shape.insert(shape.begin(), key.batch);
    strides.insert(strides.begin(), rows * cols);
  }
  return dnnl::memory::desc(shape, cpu::onednn::data_type(key.dtype), strides);
}

std::shared_ptr<const MatmulPlan> create_plan(const MatmulKey& key) {
  auto plan = std::make_shared<MatmulPlan>();
  plan->src = matrix_desc(key, key.m, key.k, key.ta);
  plan->weights = matrix_desc(key, key.k, key.n, key.tb);
  plan->dst = matrix_desc(key, key.m, key.n, false);
  std::optional<ActType> act;
  if (key.act >= 0) act = static_cast<ActType>(key.act);
  dnnl::primitive_attr attr = cpu::onednn::post_ops_attr(false, act);
  std::optional<dnnl::matmul::desc> desc;
  if (key.bias) {
    KILN_ASSERT(key.batch == 1);
    plan->bias = dnnl::memory::desc({1, key.n}, cpu::onednn::data_type(key.dtype), dnnl::memory::dims{key.n, 1});
    desc.emplace(plan->src, plan->weights, plan->bias, plan->dst);
  } else {
    desc.emplace(plan->src, plan->weights, plan->dst);
  }
  dnnl::matmul::primitive_desc pd(*desc, attr, cpu_engine());
  plan->scratchpad_bytes = pd.scratchpad_desc().get_size();
  plan->primitive = dnnl::matmul(pd);
  return plan;
}

std::shared_ptr<const MatmulPlan> find_plan(const MatmulKey& key) {
  // Leaked: operations finishing during exit() still look plans up.
  static std::mutex& mutex = *new std::mutex;
  static auto& cache = *new std::unordered_map<MatmulKey, std::shared_ptr<const MatmulPlan>, MatmulKeyHash>;
  {
    std::lock_guard lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  auto plan = create_plan(key);  // outside the lock: creation is slow and thread safe
  std::lock_guard lock(mutex);
  if (cache.size() >= kMaxCachedPlans) cache.clear();  // many shapes: start over rather than grow
  return cache.emplace(key, std::move(plan)).first->second;
}

// oneDNN 2.6's AVX2 gemm runs a transposed source (the weight gradients
// x^T . dy) at about 80 GFLOP/s where the same product untransposed runs at
// 140-150 (AMD EPYC, Zen 3, no AVX-512: `kiln train --model gpt`, 256x4096
// by 4096x1024). Single float32 products of that kind go to OpenBLAS
// (matmul below; 16-bit ones widen to float32 there on such builds); batched
// ones reaching here first copy their transposed source into a contiguous
// [batch, m, k] buffer (a few ms for 4 MiB) and run untransposed. AVX-512
// builds pass the strides to oneDNN as before.
constexpr bool kUntransposeSource = cpu::openblas::kSlowTransposedSources;

void onednn_matmul(MatmulKey key, const void* a, const void* b, void* c, const void* bias = nullptr) {
  omp_set_num_threads(key.threads);
  if (kUntransposeSource && key.ta && key.m * key.k * key.n >= cpu::openblas::kMinWork) {
    const size_t elem = dtype_size(key.dtype);
    std::byte* untransposed = cpu::thread_buffer<std::byte>(static_cast<size_t>(key.batch * key.m * key.k) * elem);
    cpu::StridedLayout l;  // [batch][m][k] from [batch][k][m]
    l.push(key.batch, key.m * key.k, key.m * key.k);
    l.push(key.m, key.k, 1);
    l.push(key.k, 1, key.m);
    cpu::strided_copy(key.threads, elem, untransposed, a, l);
    a = untransposed;
    key.ta = false;
  }
  auto plan = find_plan(key);
  thread_local dnnl::stream stream(cpu_engine());
  thread_local std::vector<char> scratch;
  if (scratch.size() < plan->scratchpad_bytes) scratch.resize(plan->scratchpad_bytes);
  const auto& engine = cpu_engine();
  dnnl::memory src(plan->src, engine, const_cast<void*>(a));
  dnnl::memory weights(plan->weights, engine, const_cast<void*>(b));
  dnnl::memory dst(plan->dst, engine, c);
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
  if (key.bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(plan->bias, engine, const_cast<void*>(bias)));
  if (plan->scratchpad_bytes > 0) {
    dnnl::memory::desc pad_desc({static_cast<int64_t>(plan->scratchpad_bytes)}, dnnl::memory::data_type::u8,
                                dnnl::memory::format_tag::a);
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(pad_desc, engine, scratch.data()));
  }
  plan->primitive.execute(stream, args);
  stream.wait();
}

// ---- loops

template <typename T>
struct MulTypeOf {
  using type = T;
};
template <>
struct MulTypeOf<int32_t> {
  using type = uint32_t;
};
template <>
struct MulTypeOf<int64_t> {
  using type = uint64_t;
};
template <typename T>
using MulType = typename MulTypeOf<T>::type;

// sum_i a[i] * b[i], in four vector accumulators merged in double for floats.
template <typename T>
T vector_dot(const T* a, const T* b, int64_t n) {
  using M = MulType<T>;
  constexpr int64_t kLanes = 32;
  M lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
#pragma omp simd
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += static_cast<M>(a[i + l]) * static_cast<M>(b[i + l]);
  for (int64_t l = 0; i < n; ++i, ++l) lanes[l] += static_cast<M>(a[i]) * static_cast<M>(b[i]);
  std::conditional_t<std::is_floating_point_v<T>, double, M> sum = 0;
  for (M v : lanes) sum += v;
  return static_cast<T>(sum);
}

// A dense layer on a few samples splits its rows over threads from this many
// multiply-adds (a 128x256 layer: 128 KiB of weights). Below it, handing rows
// to a helper costs more than they save: d2l's MLP (512 -> 256 -> 128 -> 2)
// splits its first two layers. Measured on two quiet cores (kiln bench mlp,
// hybridized): 4.7-5.2 us per call at 2^15 against 7.1-7.4 us at 2^17 (first
// layer only) and 7.0-7.1 us on one thread.
constexpr int64_t kGemvParallelWork = int64_t{1} << 15;

// The split's units are multiples of gemv_rows' row blocks.
constexpr int64_t kGemvSplitRows = 8;

// One product of the batch: rows [r0, r1) of c [m, n].
template <typename T>
void gemm_rows(const MatmulDims& d, const T* a, const T* b, T* c, int64_t r0, int64_t r1) {
  using M = MulType<T>;
  for (int64_t i = r0; i < r1; ++i) {
    M* row = reinterpret_cast<M*>(c + i * d.n);
    std::fill(row, row + d.n, M(0));
    for (int64_t p = 0; p < d.k; ++p) {
      M aip = static_cast<M>(d.ta ? a[p * d.m + i] : a[i * d.k + p]);
      if (d.tb) {
        const T* bp = b + p;  // column p of b^T: stride k
        for (int64_t j = 0; j < d.n; ++j) row[j] += aip * static_cast<M>(bp[j * d.k]);
      } else {
        const T* bp = b + p * d.n;
#pragma omp simd
        for (int64_t j = 0; j < d.n; ++j) row[j] += aip * static_cast<M>(bp[j]);
      }
    }
  }
}

template <typename T>
void gemm_loops(int threads, const MatmulDims& d, const T* a, const T* b, T* c) {
  std::vector<T> packed;
  MatmulDims dd = d;
  if (d.tb && d.n > 1) {  // untranspose b once per product so the inner loop is contiguous
    packed.resize(static_cast<size_t>(d.k * d.n));
    dd.tb = false;
  }
  for (int64_t s = 0; s < d.batch; ++s) {
    const T* as = a + s * d.m * d.k;
    const T* bs = b + s * d.k * d.n;
    T* cs = c + s * d.m * d.n;
    if (d.m == 1 && d.n == 1) {
      cs[0] = vector_dot(as, bs, d.k);
      continue;
    }
    if (!packed.empty()) {
      for (int64_t j = 0; j < d.n; ++j)
        for (int64_t p = 0; p < d.k; ++p) packed[p * d.n + j] = bs[j * d.k + p];
      bs = packed.data();
    }
    cpu::parallel_for(
        threads, d.m, [&](int64_t r0, int64_t r1) { gemm_rows(dd, as, bs, cs, r0, r1); },
        std::max<int64_t>(1, cpu::kDefaultGrain / std::max<int64_t>(1, d.n * d.k)));
  }
}

template <typename T>
void matmul(const KernelContext& ctx, const MatmulDims& d, const TensorView& a, const TensorView& b,
            const TensorView& c) {
  T* out = c.ptr<T>();
  if (c.size() == 0) return;
  if (d.k == 0) {
    std::fill(out, out + c.size(), T(0));
    return;
  }
  const int threads = std::max(1, ctx.run.num_threads);
  if constexpr (std::is_same_v<T, float>) {
    if (d.batch == 1 && d.m <= cpu::kGemvMaxSamples && d.tb && !d.ta) {
      // A few rows times rows of b (a Dense layer on a few samples).
      cpu::dense_f32(ctx.run, {d.m, d.k, d.n}, a.ptr<float>(), b.ptr<float>(), nullptr, std::nullopt, out);
      return;
    }
    if (d.batch == 1 && cpu::openblas::takes({d.m, d.k, d.n, d.ta, d.tb})) {
      cpu::openblas::sgemm(threads, {d.m, d.k, d.n, d.ta, d.tb}, a.ptr<float>(), b.ptr<float>(), out);
      return;
    }
    if (d.batch * d.m * d.n * d.k > kSmallProduct && !(d.m == 1 && d.n == 1)) {
      onednn_matmul({DType::kFloat32, d.batch, d.m, d.k, d.n, d.ta, d.tb, threads}, a.data, b.data, out);
      return;
    }
  }
  gemm_loops<T>(threads, d, a.ptr<T>(), b.ptr<T>(), out);
}

// bfloat16 and float16 products: oneDNN's matmul in that type where it has
// kernels, else the float32 kernel on widened copies.
void matmul_16bit(const KernelContext& ctx, const MatmulDims& d, std::span<const TensorView> in,
                  std::span<const TensorView> out) {
  const TensorView& c = out[0];
  if (c.size() == 0) return;
  if (d.k == 0 || !cpu::onednn::computes_in(c.dtype)) return cpu::widen(ctx, in, out);
  const int threads = std::max(1, ctx.run.num_threads);
  onednn_matmul({c.dtype, d.batch, d.m, d.k, d.n, d.ta, d.tb, threads}, in[0].data, in[1].data, c.data);
}

template <MatmulDims (*kDims)(const Shape&, const Shape&, const DotAttrs&)>
void product_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  MatmulDims d = kDims(in[0].shape, in[1].shape, ctx.attrs.as<DotAttrs>());
  switch (in[0].dtype) {
    case DType::kBfloat16:
    case DType::kFloat16:
      return matmul_16bit(ctx, d, in, out);
    case DType::kFloat32:
      return matmul<float>(ctx, d, in[0], in[1], out[0]);
    case DType::kFloat64:
      return matmul<double>(ctx, d, in[0], in[1], out[0]);
    case DType::kInt32:
      return matmul<int32_t>(ctx, d, in[0], in[1], out[0]);
    case DType::kInt64:
      return matmul<int64_t>(ctx, d, in[0], in[1], out[0]);
    default:
      KILN_ASSERT(!"dot: dtype not admitted by inference");
  }
}

}  // namespace

void cpu::dense_f32(const engine::RunContext& run, DenseDims d, const float* x, const float* w, const float* bias,
                    std::optional<ActType> act, float* y) {
  if (d.m == 0 || d.n == 0) return;
  const int threads = std::max(1, run.num_threads);
  if (d.m <= cpu::kGemvMaxSamples) {
    // Units of rows are claimed by the threads, each its own share first
    // (backends/cpu/parallel_claim.h), so each core streams the same rows
    // every call and keeps them in its cache, and a helper thread that is
    // not running does not hold the call up. A unit is about 2^14
    // multiply-adds (32 rows of a 512-wide layer): its claim and gemv_rows
    // call cost little, and a caller whose helper is late takes the helper's
    // share over in steps of a fraction of a microsecond.
    const int64_t per_block = kGemvSplitRows * d.m * std::max<int64_t>(1, d.k);
    const int64_t unit = kGemvSplitRows * std::max<int64_t>(1, (int64_t{1} << 14) / per_block);
    cpu::parallel_claim(d.m * d.n * d.k >= kGemvParallelWork ? threads : 1, (d.n + unit - 1) / unit,
                        [&](int64_t u0, int64_t u1) {
                          cpu::gemv_rows(d, x, w, bias, act, y, u0 * unit, std::min(d.n, u1 * unit));
                        });
    return;
  }
  if (d.k > 0 && d.m * d.n * d.k > kSmallProduct) {
    MatmulKey key{DType::kFloat32, 1, d.m, d.k, d.n, false, true, threads, bias != nullptr, act ? int(*act) : -1};
    onednn_matmul(key, x, w, y, bias);
    return;
  }
  if (d.k == 0) std::fill(y, y + d.m * d.n, 0.0f);
  else gemm_loops<float>(threads, {1, d.m, d.k, d.n, false, true}, x, w, y);
  for (int64_t i = 0; i < d.m; ++i) cpu::bias_act(y + i * d.n, bias, d.n, act);
}

void cpu::dense_onednn(const engine::RunContext& run, DenseDims d, DType dtype, const void* x, const void* w,
                       const void* bias, std::optional<ActType> act, void* y) {
  KILN_ASSERT(d.k > 0);
  if (d.m == 0 || d.n == 0) return;
  const int threads = std::max(1, run.num_threads);
  onednn_matmul({dtype, 1, d.m, d.k, d.n, false, true, threads, bias != nullptr, act ? int(*act) : -1}, x, w, y, bias);
}

void register_cpu_linalg_kernels() {
  register_kernel(OpId::kDot, DeviceKind::kCPU, product_kernel<dot_dims>, HalfSupport::kAny);
  register_kernel(OpId::kBatchDot, DeviceKind::kCPU, product_kernel<batch_dot_dims>, HalfSupport::kAny);
}

}  // namespace kiln
