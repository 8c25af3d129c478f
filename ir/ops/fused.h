// _kiln_fused_elemwise: a group of elementwise ops of one dtype (float32,
// float16 or bfloat16) that the fuse-elementwise pass
// (passes/fuse_elementwise.h) replaced by one node.
// Kiln-internal: it appears only after the gradient graph is built, is not
// differentiable and is never exported.
//
//   FusedProgram p = FusedProgram::parse("in=f,s;%2=mul(%0,%1);%3=relu(%2);out=%3,%2");
//   OpAttrs a = OpAttrs::make(FusedElemwiseAttrs{FusedProgramRef::make(std::move(p))});
//   // a node _kiln_fused_elemwise(x, s) {program="..."} : f32[..], f32[..]
//
// The program is SSA over float32 values: %0..%k-1 are the node's inputs,
// instruction j defines %(k+j), and `out=` lists the values the node outputs
// (in order; a value may appear once). An operand is a value or a float
// literal (`mul(%0,0.5)`). Every value has the output shape; inputs are read
// according to their kind in `in=`:
//   f  full: the output's shape;
//   s  scalar: one element, read for every position;
//   c  channel: one non-1 axis that the output has, followed by a non-1 axis
//      of the output ((1,C,1,1) against (N,C,H,W)): constant over runs of
//      the inner axes;
//   r  row: one non-1 axis that the output has, followed by size-1 axes only
//      ((C) or (1,C) against (N,C)): contiguous over runs of C.
// At least one input is full; the output shape is the first full input's.
//
// Semantics are the unfused kernels' for float32 (backends/cpu/elemwise*.cc,
// nn_activation.cc), each opcode's formula written once in
// ir/ops/elemwise_math.h: comparisons give 1 or 0, max/min propagate NaN,
// relu(NaN) is 0, where(c, x, y) picks x where c != 0. The node's inputs
// share one dtype, which its outputs have; for float16/bfloat16 the program
// still computes in float32 on the loaded inputs and each output is rounded
// once (the unfused ops would round after every op: the fused node is at
// least as accurate).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/attrs.h"
#include "ir/ops/elemwise_math.h"

namespace kiln {

// The instruction set (KILN_FUSED_OPCODES, FusedOpcode) and each opcode's
// scalar math live in ir/ops/elemwise_math.h.
std::string_view fused_opcode_name(FusedOpcode op);
int fused_opcode_arity(FusedOpcode op);

enum class FusedInputKind : uint8_t { kFull, kScalar, kChannel, kRow };

// A value (value >= 0) or a literal.
struct FusedOperand {
  int32_t value = -1;
  float literal = 0;
  bool is_value() const { return value >= 0; }
  bool operator==(const FusedOperand&) const = default;
};

struct FusedInstr {
  FusedOpcode op{};
  std::array<FusedOperand, 3> args{};  // the first arity(op) are used
  bool operator==(const FusedInstr&) const = default;
};

struct FusedProgram {
  std::vector<FusedInputKind> inputs;
  std::vector<FusedInstr> instrs;  // instruction j defines value inputs.size() + j
  std::vector<int32_t> outputs;    // values

  int32_t num_values() const { return static_cast<int32_t>(inputs.size() + instrs.size()); }
  // The text form above; parse(to_string()) == *this.
  std::string to_string() const;
  // Throws ValueError naming the position and what was expected.
  static FusedProgram parse(std::string_view text);
  // Throws ValueError unless operands refer to earlier values, arities match,
  // at least one input is full and outputs are distinct values.
  void validate() const;
  bool operator==(const FusedProgram&) const = default;
};

// An immutable, shared program with its text, plus a slot where the CPU
// backend caches the compiled function (set once, read by every call).
class FusedProgramRef {
 public:
  FusedProgramRef() = default;
  static FusedProgramRef make(FusedProgram program);

  const FusedProgram& program() const { return *state_->program; }
  const std::string& text() const { return state_->text; }
  bool empty() const { return state_ == nullptr; }
  // Backend cache: an opaque pointer set at most once (compare-and-set).
  std::atomic<void*>& compiled() const { return state_->compiled; }

  bool operator==(const FusedProgramRef& o) const {
    return state_ == o.state_ || (state_ && o.state_ && state_->text == o.state_->text);
  }

 private:
  struct State {
    std::shared_ptr<const FusedProgram> program;
    std::string text;
    mutable std::atomic<void*> compiled{nullptr};
  };
  std::shared_ptr<const State> state_;
};

// The axis of `out` along which a channel/row input of shape `in` varies
// (its one non-1 axis, aligned to the right), or -1 when `in` has no such
// axis, several, or one whose size differs from out's.
int fused_broadcast_axis(const Shape& in, const Shape& out);
// The product of out's axes after `axis`: 1 for a row input, more for a channel input.
int64_t fused_inner_size(const Shape& out, int axis);

FusedProgramRef parse_attr(std::string_view s, FusedProgramRef*);
std::string print_attr(const FusedProgramRef& v);

struct FusedElemwiseAttrs {
  FusedProgramRef program;
  template <typename V>
  void fields(V& v) {
    v("program", program, kRequired);
  }
};

}  // namespace kiln
