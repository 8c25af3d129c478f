// What the two Winograd convolutions (conv_winograd.h, conv_winograd_bf16.h)
// share: scratch from the device's pool, and their batched matrix products,
// one oneDNN matmul per call over
// the transform positions, with row strides padded apart, run on the calling
// thread's stream (inside a parallel region oneDNN runs it on that thread
// alone; outside, on its own threads).
//
//   auto plan = cpu::winograd_product_plan(16, rows, C, K, ldv, ldz, f32, threads);
//   cpu::run_winograd_product(*plan, v, u, z);         // Z[b] = V[b] . U[b]
//
// Plans are cached per shape, strides, types, accumulation and thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/onednn_util.h"
#include "ir/device.h"
#include "runtime/storage.h"

namespace kiln::cpu {

// Pool blocks freed at scope end.
class WinogradScratch {
 public:
  explicit WinogradScratch(Device device) : pool_(storage::pool(device)) {}
  ~WinogradScratch() {
    for (const storage::Block& b : blocks_) pool_.free(b);
  }
  WinogradScratch(const WinogradScratch&) = delete;
  WinogradScratch& operator=(const WinogradScratch&) = delete;
  template <typename T = float>
  T* get(int64_t n) {
    blocks_.push_back(pool_.alloc(static_cast<size_t>(n) * sizeof(T)));
    return static_cast<T*>(blocks_.back().ptr);
  }

 private:
  storage::Pool& pool_;
  std::vector<storage::Block> blocks_;
};

struct WinogradProduct {
  dnnl::matmul prim;
  size_t scratchpad = 0;
  dnnl::memory::desc src, weights, dst;
};

// Z[b] = V[b] . U[b] for b < batch: V [batch][rows][inner] (batch stride
// ld_src), U [batch][inner][cols] dense, Z [batch][rows][cols] (batch stride
// ld_dst), all float32.
std::shared_ptr<const WinogradProduct> winograd_product_plan(int64_t batch, int64_t rows, int64_t inner, int64_t cols,
                                                             int64_t ld_src, int64_t ld_dst, int threads);

// dU[b] (+)= V[b]ᵀ . dZ[b] for b < batch, the weight gradient's product: V
// [batch][tiles][C] (batch stride ldv) read transposed, dZ [batch][tiles][K]
// (batch stride ldz), both of type `operands` (f32 or bf16); dU [batch][C][K]
// float32, added to when `accumulate`.
std::shared_ptr<const WinogradProduct> winograd_weight_grad_plan(int64_t batch, int64_t tiles, int64_t C, int64_t K,
                                                                 int64_t ldv, int64_t ldz,
                                                                 dnnl::memory::data_type operands, bool accumulate,
                                                                 int threads);

// Runs `plan` on (src, weights, dst) on the calling thread's stream and waits.
void run_winograd_product(const WinogradProduct& plan, const void* src, const void* weights, float* dst);

}  // namespace kiln::cpu
