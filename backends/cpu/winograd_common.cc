#include "backends/cpu/winograd_common.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::cpu {

namespace dn = onednn;
using dnnl::memory;

std::shared_ptr<const WinogradProduct> winograd_product_plan(int64_t batch, int64_t rows, int64_t inner, int64_t cols,
                                                             int64_t ld_src, int64_t ld_dst, int threads) {
  std::string key = "winograd_matmul|";
  dn::append_key(key, {batch, rows, inner, cols, ld_src, ld_dst, threads});
  return dn::cached<WinogradProduct>(key, [&] {
    WinogradProduct plan;
    plan.src = memory::desc({batch, rows, inner}, memory::data_type::f32, memory::dims{ld_src, inner, 1});
    plan.weights = dn::plain_desc({batch, inner, cols});
    plan.dst = memory::desc({batch, rows, cols}, memory::data_type::f32, memory::dims{ld_dst, cols, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plan.src, plan.weights, plan.dst), dn::scratchpad_attr(),
                                    dn::engine());
    plan.prim = dnnl::matmul(pd);
    plan.scratchpad = dn::scratchpad_bytes(pd);
    return plan;
  });
}

std::shared_ptr<const WinogradProduct> winograd_weight_grad_plan(int64_t batch, int64_t tiles, int64_t C, int64_t K,
                                                                 int64_t ldv, int64_t ldz, memory::data_type operands,
                                                                 bool accumulate, int threads) {
  std::string key = "winograd_wgrad_matmul|";
  dn::append_key(key, {batch, tiles, C, K, ldv, ldz, static_cast<int64_t>(operands), accumulate ? 1 : 0, threads});
  return dn::cached<WinogradProduct>(key, [&] {
    WinogradProduct plan;
    plan.src = memory::desc({batch, C, tiles}, operands, memory::dims{ldv, 1, C});
    plan.weights = memory::desc({batch, tiles, K}, operands, memory::dims{ldz, K, 1});
    plan.dst = dn::plain_desc({batch, C, K});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plan.src, plan.weights, plan.dst),
                                    dn::post_ops_attr(accumulate, std::nullopt), dn::engine());
    plan.prim = dnnl::matmul(pd);
    plan.scratchpad = dn::scratchpad_bytes(pd);
    return plan;
  });
}

void run_winograd_product(const WinogradProduct& plan, const void* src, const void* weights, float* dst) {
  thread_local dnnl::stream stream(dn::engine());
  thread_local std::vector<char> scratch;
  const auto& engine = dn::engine();
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(plan.src, engine, const_cast<void*>(src))},
                                       {DNNL_ARG_WEIGHTS, memory(plan.weights, engine, const_cast<void*>(weights))},
                                       {DNNL_ARG_DST, memory(plan.dst, engine, dst)}};
  if (plan.scratchpad > 0) {
    if (scratch.size() < plan.scratchpad) scratch.resize(plan.scratchpad);
    memory::desc pad({static_cast<memory::dim>(plan.scratchpad)}, memory::data_type::u8, memory::format_tag::a);
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(pad, engine, scratch.data()));
  }
  plan.prim.execute(stream, args);
  stream.wait();
}

}  // namespace kiln::cpu
