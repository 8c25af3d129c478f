#include "backends/cpu/openblas_gemm.h"

#include <cblas.h>
#include <omp.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "ir/error.h"

namespace kiln::cpu::openblas {

namespace {

bool enabled() {
  static const bool on = [] {
    const char* env = std::getenv("KILN_OPENBLAS");
    return kSlowTransposedSources && !(env != nullptr && std::strcmp(env, "0") == 0);
  }();
  return on;
}

bool fits_int(int64_t v) { return v >= 0 && v < INT_MAX; }

}  // namespace

bool takes(const Product& p) {
  return enabled() && p.ta && p.m * p.k * p.n >= kMinWork && fits_int(p.m) && fits_int(p.k) && fits_int(p.n);
}

void sgemm(int threads, const Product& p, const float* a, const float* b, float* c) {
  KILN_ASSERT(fits_int(p.m) && fits_int(p.k) && fits_int(p.n));
  omp_set_num_threads(threads);
  const int m = static_cast<int>(p.m), k = static_cast<int>(p.k), n = static_cast<int>(p.n);
  cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a,
              p.ta ? m : k, b, p.tb ? k : n, 0.0f, c, n);
}

std::string description() {
  std::string config = openblas_get_config();  // the library loaded: "OpenBLAS 0.3.21 DYNAMIC_ARCH ... Zen ..."
  while (!config.empty() && config.back() == ' ') config.pop_back();
  const int threading = openblas_get_parallel();
  const char* parallel = threading == 2 ? "OpenMP" : threading == 1 ? "pthreads" : "sequential";
  std::string use;
  if (!kSlowTransposedSources)
    use = "not used (oneDNN runs every product on AVX-512 builds)";
  else if (!enabled())
    use = "off (KILN_OPENBLAS=0)";
  else
    use = "float32 products with a transposed first source";
  return fmt::format("{} ({}): {}", config, parallel, use);
}

}  // namespace kiln::cpu::openblas
