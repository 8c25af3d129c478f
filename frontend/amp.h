// Mixed precision (automatic mixed precision, as PyTorch's autocast and
// MXNet's AMP): run each op in the dtype the policy gives it.
//
//   {
//     amp::Autocast autocast(DType::kBfloat16);  // this thread, until the scope ends
//     autograd::Record record;
//     loss = loss_fn(net(x), y);                 // Dense and Conv2D in bfloat16, the loss in float32
//   }
//   loss.backward();                             // gradients reach the float32 parameters through the casts
//
// The policy (ir/amp.h) is applied at invoke: each input whose dtype differs
// from what the op's policy asks is cast first, by an ordinary `Cast` op that
// autograd records, so gradients flow back through it in the input's dtype.
// Parameters stay float32; a parameter's low-precision copy (a leaf array
// with a gradient) is made once per outermost scope and reused for every
// use inside it, never once per use. Hybridized blocks called inside a scope
// are compiled with the amp-cast pass for the scope's dtype instead
// (passes/amp_cast.h), which applies the same policy to the graph; their
// cache entries are kept per dtype.
//
// Scopes nest: the innermost decides; Autocast(dtype, false) turns autocast
// off inside a region that must run as written.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "frontend/ndarray.h"
#include "ir/op.h"

namespace kiln::amp {

class Autocast {
 public:
  // dtype: float16 or bfloat16 (ValueError otherwise).
  explicit Autocast(DType dtype = DType::kBfloat16, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  std::optional<DType> previous_;
};

// The innermost scope's dtype on this thread; nullopt outside scopes (or in a disabled one).
std::optional<DType> active();

namespace detail {
// For invoke: `inputs` cast as the active policy asks of `def` into `cast`.
// Returns false (and leaves `cast` alone) when no cast is due.
bool cast_inputs(const OpDef& def, std::span<const NDArray> inputs, std::vector<NDArray>& cast);
}  // namespace detail

}  // namespace kiln::amp
