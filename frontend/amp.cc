#include "frontend/amp.h"

#include <map>
#include <tuple>

#include "frontend/invoke.h"
#include "ir/amp.h"
#include "ir/ops/elemwise.h"

namespace kiln::amp {
namespace {

struct State {
  std::optional<DType> dtype;
  int depth = 0;  // scopes open on this thread (enabled or not)
  // A parameter's low-precision copy per (storage, offset, dtype), for the outermost scope.
  std::map<std::tuple<const void*, int64_t, DType>, NDArray> weight_casts;
};

State& state() {
  thread_local State s;
  return s;
}

bool is_parameter(const NDArray& x) {
  return x.grad_req() != GradReq::kNull && x.ag_node() != nullptr && x.chunk() != nullptr;
}

NDArray cast(const NDArray& x, DType to) {
  State& s = state();
  const bool reuse = is_parameter(x);
  if (reuse) {
    auto key = std::make_tuple(static_cast<const void*>(x.chunk().get()), x.byte_offset(), to);
    auto it = s.weight_casts.find(key);
    if (it != s.weight_casts.end() && it->second.shape() == x.shape()) return it->second;
    NDArray c = x.astype(to);
    s.weight_casts.emplace(key, c);
    return c;
  }
  return x.astype(to);
}

}  // namespace

Autocast::Autocast(DType dtype, bool enabled) {
  KILN_CHECK(is_16bit_float(dtype), ValueError, "autocast: dtype must be float16 or bfloat16, got {}", dtype);
  State& s = state();
  previous_ = s.dtype;
  s.dtype = enabled ? std::optional<DType>(dtype) : std::nullopt;
  ++s.depth;
}

Autocast::~Autocast() {
  State& s = state();
  s.dtype = previous_;
  if (--s.depth == 0) s.weight_casts.clear();
}

std::optional<DType> active() { return state().dtype; }

bool detail::cast_inputs(const OpDef& def, std::span<const NDArray> inputs, std::vector<NDArray>& cast_to) {
  const State& s = state();
  if (!s.dtype || def.id == OpId::kCast) return false;
  std::vector<DType> have;
  have.reserve(inputs.size());
  for (const NDArray& x : inputs) have.push_back(x.dtype());
  std::vector<DType> want = amp_input_dtypes(def, have, *s.dtype);
  if (want == have) return false;
  cast_to.clear();
  for (size_t i = 0; i < inputs.size(); ++i) cast_to.push_back(want[i] == have[i] ? inputs[i] : cast(inputs[i], want[i]));
  return true;
}

}  // namespace kiln::amp
