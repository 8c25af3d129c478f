// invoke: the single entry point that runs an operator on NDArrays.
//
//   NDArray y = invoke1(OpId::kExp, {x});
//   auto parts = invoke(OpId::kSplit, {x}, OpAttrs::make(SplitAttrs{.num_outputs = 2}));
//   invoke(OpId::kCopy, {src}, {}, {.out = {&dst, 1}});    // write into existing storage
//
// At the call: checks that every input is on one device (DeviceError naming
// both otherwise), infers output shapes and dtypes (ShapeError/TypeError naming
// the op and input types; nothing is queued on error), allocates the outputs
// (or checks `out` against the inferred types), and pushes the kernel to the
// engine on the device's compute lane. Returns at once.
#pragma once

#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "frontend/ndarray.h"
#include "ir/op.h"

namespace kiln {

struct InvokeOptions {
  // Device for ops without inputs (init and random ops); ignored otherwise.
  std::optional<Device> device;
  // Existing arrays to write the outputs into (in-place). Their shapes and
  // dtypes must equal the inferred ones.
  std::span<NDArray> out;
  int priority = 0;
};

std::vector<NDArray> invoke(OpId op, std::span<const NDArray> inputs, const OpAttrs& attrs = {},
                            const InvokeOptions& options = {});
inline std::vector<NDArray> invoke(OpId op, std::initializer_list<NDArray> inputs, const OpAttrs& attrs = {},
                                   const InvokeOptions& options = {}) {
  return invoke(op, std::span<const NDArray>(inputs.begin(), inputs.size()), attrs, options);
}

// Single-output form (throws InternalError for multi-output ops).
NDArray invoke1(OpId op, std::span<const NDArray> inputs, const OpAttrs& attrs = {},
                const InvokeOptions& options = {});
inline NDArray invoke1(OpId op, std::initializer_list<NDArray> inputs, const OpAttrs& attrs = {},
                       const InvokeOptions& options = {}) {
  return invoke1(op, std::span<const NDArray>(inputs.begin(), inputs.size()), attrs, options);
}

}  // namespace kiln
