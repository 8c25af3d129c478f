#include "runtime/kernel_widen.h"

#include <algorithm>
#include <vector>

#include "ir/amp.h"
#include "ir/ops/elemwise.h"

namespace kiln {
namespace {

const OpAttrs& cast_attrs(DType to) {
  // Leaked: adaptor calls may run during exit().
  static const OpAttrs& f32 = *new OpAttrs(OpAttrs::make(CastAttrs{DType::kFloat32}));
  static const OpAttrs& f16 = *new OpAttrs(OpAttrs::make(CastAttrs{DType::kFloat16}));
  static const OpAttrs& bf16 = *new OpAttrs(OpAttrs::make(CastAttrs{DType::kBfloat16}));
  return to == DType::kFloat32 ? f32 : to == DType::kFloat16 ? f16 : bf16;
}

void cast(const KernelContext& ctx, KernelFn cast_kernel, const TensorView& from, const TensorView& to) {
  KernelContext c{ctx.run, cast_attrs(to.dtype), ctx.is_train, OpId::kCast};
  cast_kernel(c, {&from, 1}, {&to, 1});
}

}  // namespace

void run_widened(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out,
                 WidenTemps& temps) {
  KILN_ASSERT(ctx.op != OpId::kNumOps);
  const OpDef& def = op_def(ctx.op);
  const Device device = ctx.run.device;
  KernelFn kernel = find_kernel(def, device);
  KernelFn cast_kernel = find_kernel(op_def(OpId::kCast), device);
  auto widen = [&](const TensorView& v) {
    if (!is_16bit_float(v.dtype)) return v;
    TensorView w{temps.alloc(static_cast<size_t>(v.size()) * sizeof(float)), v.shape, DType::kFloat32};
    return w;
  };
  std::vector<TensorView> wide_in, wide_out;
  wide_in.reserve(in.size());
  wide_out.reserve(out.size());
  for (const TensorView& v : in) {
    wide_in.push_back(widen(v));
    if (is_16bit_float(v.dtype)) cast(ctx, cast_kernel, v, wide_in.back());
  }
  for (const TensorView& v : out) wide_out.push_back(widen(v));
  KernelContext c{ctx.run, ctx.attrs, ctx.is_train, ctx.op};
  kernel(c, wide_in, wide_out);
  for (size_t i = 0; i < out.size(); ++i)
    if (is_16bit_float(out[i].dtype)) cast(ctx, cast_kernel, wide_out[i], out[i]);
  for (int m : def.mutate_inputs) {
    const auto k = static_cast<size_t>(m);
    if (k < in.size() && is_16bit_float(in[k].dtype)) cast(ctx, cast_kernel, wide_in[k], in[k]);
  }
}

}  // namespace kiln
