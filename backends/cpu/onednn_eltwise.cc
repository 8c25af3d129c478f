#include "backends/cpu/onednn_eltwise.h"

#include <fmt/format.h>

#include <optional>
#include <string>

#include "backends/cpu/onednn_util.h"

namespace kiln::cpu::onednn {
namespace {

// A forward and a backward primitive for one (algorithm, dtype, size,
// threads); empty when oneDNN refused the dtype.
struct EltwisePlan {
  std::optional<dnnl::eltwise_forward> fwd;
  std::optional<dnnl::eltwise_backward> bwd;
  size_t fwd_scratch = 0, bwd_scratch = 0;
  memory::desc desc;
};

bool admitted(DType t) {
  return t == DType::kFloat32 || ((t == DType::kBfloat16 || t == DType::kFloat16) && computes_in(t));
}

// Work per element, in multiply-adds, for Call's one-thread cutoff: the
// activations oneDNN runs here are polynomials of a few dozen terms.
constexpr int64_t kWorkPerElement = 32;

std::shared_ptr<const EltwisePlan> plan_for(const engine::RunContext& run, dnnl::algorithm alg, DType t, int64_t n) {
  const int threads = n * kWorkPerElement < kParallelWork ? 1 : run.num_threads;
  const std::string key = fmt::format("eltwise|{}|{}|{}|{}|", static_cast<int>(alg), static_cast<int>(t), n, threads);
  return cached<EltwisePlan>(key, [&] {
    EltwisePlan p;
    p.desc = plain_desc({static_cast<memory::dim>(n)}, data_type(t));
    try {
      dnnl::eltwise_forward::primitive_desc fpd(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, p.desc, 0.f, 0.f), scratchpad_attr(),
          engine());
      dnnl::eltwise_backward::primitive_desc bpd(dnnl::eltwise_backward::desc(alg, p.desc, p.desc, 0.f, 0.f),
                                                 scratchpad_attr(), engine(), fpd);
      p.fwd.emplace(fpd);
      p.bwd.emplace(bpd);
      p.fwd_scratch = scratchpad_bytes(fpd);
      p.bwd_scratch = scratchpad_bytes(bpd);
    } catch (const dnnl::error&) {
      p.fwd.reset();
      p.bwd.reset();
    }
    return p;
  });
}

}  // namespace

bool eltwise_forward(const engine::RunContext& run, dnnl::algorithm alg, DType t, const void* x, void* y, int64_t n) {
  if (n < kEltwiseMinElements || !admitted(t)) return false;
  auto plan = plan_for(run, alg, t, n);
  if (!plan->fwd) return false;
  Call call(run, n * kWorkPerElement);
  call.run(*plan->fwd, plan->fwd_scratch,
           {{DNNL_ARG_SRC, call.wrap(plan->desc, x)}, {DNNL_ARG_DST, call.wrap(plan->desc, y)}});
  call.finish();
  return true;
}

bool eltwise_backward(const engine::RunContext& run, dnnl::algorithm alg, DType t, const void* dy, const void* x,
                      void* dx, int64_t n) {
  if (n < kEltwiseMinElements || !admitted(t)) return false;
  auto plan = plan_for(run, alg, t, n);
  if (!plan->bwd) return false;
  Call call(run, n * kWorkPerElement);
  call.run(*plan->bwd, plan->bwd_scratch,
           {{DNNL_ARG_SRC, call.wrap(plan->desc, x)},
            {DNNL_ARG_DIFF_DST, call.wrap(plan->desc, dy)},
            {DNNL_ARG_DIFF_SRC, call.wrap(plan->desc, dx)}});
  call.finish();
  return true;
}

}  // namespace kiln::cpu::onednn
