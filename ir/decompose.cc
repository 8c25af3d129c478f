#include "ir/decompose.h"

#include <array>
#include <cstdlib>
#include <string_view>

#include "ir/error.h"
#include "ir/ops/attention.h"

namespace kiln {
namespace {

constexpr size_t kNumOps = static_cast<size_t>(OpId::kNumOps);

struct Table {
  std::array<DecomposeFn, kNumOps> fns{};
  std::array<bool, kNumOps> forced{};
};

const Table& table() {
  static const Table t = [] {
    Table t;
    t.fns[static_cast<size_t>(OpId::kAttention)] = decompose_attention;
    t.fns[static_cast<size_t>(OpId::kAttentionBackward)] = decompose_attention_backward;
    const char* env = std::getenv("KILN_DECOMPOSE");
    std::string_view rest = env == nullptr ? "" : env;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string_view name = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
      for (size_t i = 0; i < kNumOps; ++i) {
        if (t.fns[i] != nullptr && (name == "all" || name == op_def(static_cast<OpId>(i)).name)) t.forced[i] = true;
      }
    }
    return t;
  }();
  return t;
}

}  // namespace

DecomposeFn decomposition(OpId op) { return table().fns[static_cast<size_t>(op)]; }

bool decomposition_forced(OpId op) { return table().forced[static_cast<size_t>(op)]; }

}  // namespace kiln
