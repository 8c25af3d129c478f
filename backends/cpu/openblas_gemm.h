// Internal to the CPU kernels: float32 matrix products through OpenBLAS's
// cblas_sgemm, for the products oneDNN's gemm runs slowly on this build's
// target.
//
//   if (cpu::openblas::takes({m, k, n, ta, tb})) return cpu::openblas::sgemm(threads, {m, k, n, ta, tb}, a, b, c);
//
// Which products (takes): on builds without AVX-512, float32 products whose
// first source is transposed (the weight gradients x^T . dy) of at least
// kMinWork multiply-adds. oneDNN 2.6's AVX2 gemm runs those at 70-90 GFLOP/s
// where OpenBLAS runs 130-165 (AMD EPYC, Zen 3, two threads: 1024x4096x256
// and 256x4096x1024); the other layouts run as fast or faster on oneDNN, and
// AVX-512 builds keep oneDNN for everything. KILN_OPENBLAS=0 turns it off
// (read once), for comparisons.
//
// Threads: Kiln links OpenBLAS's OpenMP build, so it runs on libgomp's
// threads like oneDNN; sgemm sets omp_set_num_threads(threads) for the
// calling thread first. Calls from several threads at once are safe (OpenBLAS
// queues parallel regions). Results depend on OpenBLAS's summation order,
// which differs from oneDNN's in the last bits; they do not depend on the
// thread count beyond that.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::cpu::openblas {

// Row-major C[m][n] = op(A) op(B) with op(A) m x k, op(B) k x n; A is stored
// [k][m] when ta (else [m][k]), B [n][k] when tb (else [k][n]); dense.
struct Product {
  int64_t m, k, n;
  bool ta, tb;
};

// Whether this build's target is one where oneDNN's gemm is slow with a
// transposed first source (no AVX-512). linalg.cc reads the same two facts
// for the products that do not come here (batched ones).
#if defined(__AVX512F__)
inline constexpr bool kSlowTransposedSources = false;
#else
inline constexpr bool kSlowTransposedSources = true;
#endif
inline constexpr int64_t kMinWork = int64_t{1} << 24;  // m * k * n multiply-adds

// Whether Kiln runs this float32 product on OpenBLAS (see above).
bool takes(const Product& p);

// C = op(A) op(B) on `threads` OpenMP threads. Requires m, k, n below 2^31.
void sgemm(int threads, const Product& p, const float* a, const float* b, float* c);

// The loaded library's configuration, its threading and what Kiln runs on it
// ("OpenBLAS 0.3.21 DYNAMIC_ARCH ... Zen ... (OpenMP): float32 products with a
// transposed first source", or why nothing); for `kiln info`.
std::string description();

}  // namespace kiln::cpu::openblas
