// The CPU kernel of _kiln_fused_elemwise: runs and threads over a loop from
// fused_loop (backends/cpu/fused.h).
#include "backends/cpu/fused.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/elemwise_kernels.h"
#include "backends/cpu/jit/fused_jit.h"
#include "backends/cpu/parallel.h"
#include "runtime/kernel.h"

namespace kiln::cpu {
namespace {

// The value of FusedProgramRef::compiled() meaning "use the interpreter".
char kInterpret;

// Where each broadcast input's element comes from at a position.
struct Broadcast {
  size_t input;
  bool row;
  int64_t inner;  // positions per element (channel), or the row length (row)
  int64_t size;   // elements along the axis
};

// n elements of a 16-bit type at `src` into float32 `dst`, and back.
void widen_chunk(DType t, const void* src, float* dst, int64_t n) {
  if (t == DType::kBfloat16) {
    const auto* x = static_cast<const BFloat16*>(src);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = load(x[i]);
  } else {
    const auto* x = static_cast<const Half*>(src);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = load(x[i]);
  }
}
void narrow_chunk(DType t, const float* src, void* dst, int64_t n) {
  if (t == DType::kBfloat16) {
    auto* y = static_cast<BFloat16*>(dst);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = store<BFloat16>(src[i]);
  } else {
    auto* y = static_cast<Half*>(dst);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = store<Half>(src[i]);
  }
}

}  // namespace

bool fused_jit_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("KILN_JIT");
    return jit::available() && !(env != nullptr && std::strcmp(env, "0") == 0);
  }();
  return enabled;
}

FusedLoopFn fused_loop(const FusedProgramRef& ref) {
  std::atomic<void*>& slot = ref.compiled();
  void* cached = slot.load(std::memory_order_acquire);
  if (cached == nullptr) {
    FusedLoopFn fn = nullptr;
    if (fused_jit_enabled()) {
      std::string error;
      fn = jit::compile_fused(ref.program(), ref.text(), &error);
      if (fn == nullptr) {
        static std::once_flag warned;
        std::call_once(warned, [&] {
          std::fprintf(stderr, "kiln: warning: fused-elementwise JIT failed, using the interpreter: %s\n",
                       error.c_str());
        });
      }
    }
    cached = fn != nullptr ? reinterpret_cast<void*>(fn) : static_cast<void*>(&kInterpret);
    slot.store(cached, std::memory_order_release);  // racing callers store the same function
  }
  return cached == &kInterpret ? nullptr : reinterpret_cast<FusedLoopFn>(cached);
}

void fused_run(const FusedProgramRef& ref, FusedLoopFn loop, void* const* bufs, const Shape* in_shapes,
               const Shape& out, int num_threads, DType dtype) {
  const FusedProgram& p = ref.program();
  const int64_t n = out.size();
  if (n == 0) return;
  const size_t k = p.inputs.size(), num_bufs = k + p.outputs.size();
  const bool narrow = dtype != DType::kFloat32;
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  // Element i of buffer `base`.
  auto at = [elem](void* base, int64_t i) -> void* { return static_cast<char*>(base) + i * elem; };
  auto is_point = [&](size_t j) {  // an input read at [0] for every position of a run
    return j < k && (p.inputs[j] == FusedInputKind::kScalar || p.inputs[j] == FusedInputKind::kChannel);
  };
  std::vector<Broadcast> bcast;
  for (size_t j = 0; j < k; ++j) {
    bool row = p.inputs[j] == FusedInputKind::kRow;
    if (!row && p.inputs[j] != FusedInputKind::kChannel) continue;
    int axis = fused_broadcast_axis(in_shapes[j], out);
    bcast.push_back({j, row, row ? out[axis] : fused_inner_size(out, axis), out[axis]});
  }
  auto run_loop = [&](void** b, int64_t begin, int64_t end) {
    if (loop != nullptr)
      loop(b, begin, end);
    else
      fused_interpret(p, b, begin, end);
  };
  // Outputs written over an input (in-place): the compiled loop takes its
  // buffers as noalias, so such outputs go to a small per-thread buffer,
  // copied out after each chunk of positions has been read. 16-bit calls
  // stage every array in such buffers, so they need nothing more.
  std::vector<size_t> aliased;
  for (size_t o = 0; o < p.outputs.size() && !narrow; ++o)
    for (size_t j = 0; j < k; ++j)
      if (bufs[k + o] == bufs[j]) {
        aliased.push_back(k + o);
        break;
      }
  constexpr int64_t kChunk = 2048;
  // 16-bit: chunks of positions through float32 buffers, one per array
  // (a point input: one element).
  auto call_narrow = [&](void** b, int64_t begin, int64_t end) {
    // Per thread, reused: a call may cover one short run (a channel's plane).
    thread_local std::vector<float> scratch;
    thread_local std::vector<void*> c;
    if (scratch.size() < num_bufs * kChunk) scratch.resize(num_bufs * kChunk);
    c.resize(num_bufs);
    for (size_t j = 0; j < num_bufs; ++j) c[j] = scratch.data() + j * kChunk;
    for (size_t j = 0; j < k; ++j)
      if (is_point(j)) widen_chunk(dtype, b[j], static_cast<float*>(c[j]), 1);
    for (int64_t pos = begin; pos < end; pos += kChunk) {
      const int64_t len = std::min(kChunk, end - pos);
      for (size_t j = 0; j < k; ++j)
        if (!is_point(j)) widen_chunk(dtype, at(b[j], pos), static_cast<float*>(c[j]), len);
      run_loop(c.data(), 0, len);
      for (size_t j = k; j < num_bufs; ++j) narrow_chunk(dtype, static_cast<float*>(c[j]), at(b[j], pos), len);
    }
  };
  auto call = [&](void** b, int64_t begin, int64_t end) {
    if (narrow) return call_narrow(b, begin, end);
    if (aliased.empty()) return run_loop(b, begin, end);
    thread_local std::vector<float> scratch;
    if (scratch.size() < aliased.size() * kChunk) scratch.resize(aliased.size() * kChunk);
    std::vector<void*> c(b, b + num_bufs);
    for (int64_t pos = begin; pos < end; pos += kChunk) {
      const int64_t len = std::min(kChunk, end - pos);
      for (size_t j = 0; j < num_bufs; ++j) c[j] = is_point(j) ? b[j] : at(b[j], pos);
      for (size_t a = 0; a < aliased.size(); ++a) c[aliased[a]] = scratch.data() + a * kChunk;
      run_loop(c.data(), 0, len);
      for (size_t a = 0; a < aliased.size(); ++a)
        std::memcpy(at(b[aliased[a]], pos), scratch.data() + a * kChunk, static_cast<size_t>(len) * sizeof(float));
    }
  };
  // Cheap programs split at the default grain; each instruction adds work.
  const int64_t grain = std::max<int64_t>(kDefaultGrain / (1 + static_cast<int64_t>(p.instrs.size()) / 4), 4096);
  parallel_for(
      num_threads, n,
      [&](int64_t begin, int64_t end) {
        std::vector<void*> b(bufs, bufs + num_bufs);
        if (bcast.empty()) return call(b.data(), begin, end);
        // Runs: every channel input constant, every row input contiguous.
        for (int64_t pos = begin; pos < end;) {
          int64_t len = end - pos;
          for (const Broadcast& c : bcast) {
            if (c.row) {
              int64_t col = pos % c.inner;
              len = std::min(len, c.inner - col);
              b[c.input] = at(bufs[c.input], col);
            } else {
              len = std::min(len, c.inner - pos % c.inner);
              b[c.input] = at(bufs[c.input], (pos / c.inner) % c.size);
            }
          }
          for (size_t j = 0; j < num_bufs; ++j) {
            bool offset = j >= k || p.inputs[j] == FusedInputKind::kFull;
            if (offset) b[j] = at(bufs[j], pos);
          }
          call(b.data(), 0, len);
          pos += len;
        }
      },
      grain);
}

namespace {

void fused_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const FusedProgramRef& ref = ctx.attrs.as<FusedElemwiseAttrs>().program;
  FusedLoopFn loop = fused_loop(ref);
  constexpr size_t kMax = 64;
  void* bufs[kMax];
  Shape shapes[kMax];
  std::vector<void*> big_bufs;
  std::vector<Shape> big_shapes;
  void** b = bufs;
  Shape* s = shapes;
  if (in.size() + out.size() > kMax) {
    big_bufs.resize(in.size() + out.size());
    big_shapes.resize(in.size());
    b = big_bufs.data();
    s = big_shapes.data();
  }
  for (size_t i = 0; i < in.size(); ++i) {
    b[i] = in[i].data;
    s[i] = in[i].shape;
  }
  for (size_t i = 0; i < out.size(); ++i) b[in.size() + i] = out[i].data;
  fused_run(ref, loop, b, s, out[0].shape, ctx.run.num_threads, out[0].dtype);
}

void fused_prepare(const OpAttrs& attrs) { fused_loop(attrs.as<FusedElemwiseAttrs>().program); }

}  // namespace

}  // namespace kiln::cpu

namespace kiln {

void register_cpu_fused_kernels() {
  register_kernel(OpId::kFusedElemwise, DeviceKind::kCPU, cpu::fused_kernel, HalfSupport::kAny);
  register_kernel_prepare(OpId::kFusedElemwise, DeviceKind::kCPU, cpu::fused_prepare);
}

}  // namespace kiln
