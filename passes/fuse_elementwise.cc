#include "passes/fuse_elementwise.h"

#include <algorithm>

#include <cstdlib>
#include <map>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>

#include "ir/ops/elemwise.h"
#include "ir/ops/fused.h"
#include "ir/ops/nn.h"
#include "passes/graph_copy.h"

namespace kiln::passes {
namespace {

using Op = FusedOpcode;

// Appends instructions to a program under construction.
struct Emitter {
  FusedProgram& p;
  FusedOperand emit(Op op, FusedOperand a, FusedOperand b = {}, FusedOperand c = {}) {
    p.instrs.push_back({op, {a, b, c}});
    return {.value = p.num_values() - 1};
  }
};

FusedOperand lit(double v) { return {.literal = static_cast<float>(v)}; }

// The instructions computing node `n` from operands `in` (one per input), or
// nullopt when the op (or its attributes) is not fusible. Each form computes
// what the op's float32 kernel does, in the same order of operations.
// Instructions are emitted one statement at a time: the order in which
// function arguments are evaluated is unspecified.
std::optional<FusedOperand> lower(const ir::Node& n, std::span<const FusedOperand> in, Emitter& e) {
  auto scalar = [&] { return lit(n.attrs.as<ScalarAttrs>().scalar); };
  switch (n.op) {
    case OpId::kElemwiseAdd:
    case OpId::kBroadcastAdd:
      return e.emit(Op::kAdd, in[0], in[1]);
    case OpId::kElemwiseSub:
    case OpId::kBroadcastSub:
      return e.emit(Op::kSub, in[0], in[1]);
    case OpId::kElemwiseMul:
    case OpId::kBroadcastMul:
      return e.emit(Op::kMul, in[0], in[1]);
    case OpId::kElemwiseDiv:
    case OpId::kBroadcastDiv:
      return e.emit(Op::kDiv, in[0], in[1]);
    case OpId::kBroadcastPower:
      return e.emit(Op::kPow, in[0], in[1]);
    case OpId::kBroadcastMaximum:
      return e.emit(Op::kMax, in[0], in[1]);
    case OpId::kBroadcastMinimum:
      return e.emit(Op::kMin, in[0], in[1]);
    case OpId::kBroadcastEqual:
      return e.emit(Op::kEq, in[0], in[1]);
    case OpId::kBroadcastNotEqual:
      return e.emit(Op::kNe, in[0], in[1]);
    case OpId::kBroadcastGreater:
      return e.emit(Op::kGt, in[0], in[1]);
    case OpId::kBroadcastGreaterEqual:
      return e.emit(Op::kGe, in[0], in[1]);
    case OpId::kBroadcastLesser:
      return e.emit(Op::kLt, in[0], in[1]);
    case OpId::kBroadcastLesserEqual:
      return e.emit(Op::kLe, in[0], in[1]);
    case OpId::kPlusScalar:
      return e.emit(Op::kAdd, in[0], scalar());
    case OpId::kMinusScalar:
      return e.emit(Op::kSub, in[0], scalar());
    case OpId::kRMinusScalar:
      return e.emit(Op::kSub, scalar(), in[0]);
    case OpId::kMulScalar:
      return e.emit(Op::kMul, in[0], scalar());
    case OpId::kDivScalar:
      return e.emit(Op::kDiv, in[0], scalar());
    case OpId::kRDivScalar:
      return e.emit(Op::kDiv, scalar(), in[0]);
    case OpId::kPowerScalar:
      return e.emit(Op::kPow, in[0], scalar());
    case OpId::kRPowerScalar:
      return e.emit(Op::kPow, scalar(), in[0]);
    case OpId::kMaximumScalar:
      return e.emit(Op::kMax, in[0], scalar());
    case OpId::kMinimumScalar:
      return e.emit(Op::kMin, in[0], scalar());
    case OpId::kEqualScalar:
      return e.emit(Op::kEq, in[0], scalar());
    case OpId::kNotEqualScalar:
      return e.emit(Op::kNe, in[0], scalar());
    case OpId::kGreaterScalar:
      return e.emit(Op::kGt, in[0], scalar());
    case OpId::kGreaterEqualScalar:
      return e.emit(Op::kGe, in[0], scalar());
    case OpId::kLesserScalar:
      return e.emit(Op::kLt, in[0], scalar());
    case OpId::kLesserEqualScalar:
      return e.emit(Op::kLe, in[0], scalar());
    case OpId::kExp:
      return e.emit(Op::kExp, in[0]);
    case OpId::kLog:
      return e.emit(Op::kLog, in[0]);
    case OpId::kSqrt:
      return e.emit(Op::kSqrt, in[0]);
    case OpId::kSquare:
      return e.emit(Op::kSquare, in[0]);
    case OpId::kTanh:
      return e.emit(Op::kTanh, in[0]);
    case OpId::kSigmoid:
      return e.emit(Op::kSigmoid, in[0]);
    case OpId::kRelu:
      return e.emit(Op::kRelu, in[0]);
    case OpId::kAbs:
      return e.emit(Op::kAbs, in[0]);
    case OpId::kNegative:
      return e.emit(Op::kNeg, in[0]);
    case OpId::kClip: {
      const auto& a = n.attrs.as<ClipAttrs>();
      // ClipOp: t = x < lo ? lo : x; t > hi ? hi : t. max/min agree, NaN included.
      return e.emit(Op::kMin, e.emit(Op::kMax, in[0], lit(a.a_min)), lit(a.a_max));
    }
    case OpId::kWhere:
      return e.emit(Op::kWhere, in[0], in[1], in[2]);
    case OpId::kActivation:
      switch (n.attrs.as<ActivationAttrs>().act_type) {
        case ActType::kRelu:
          return e.emit(Op::kRelu, in[0]);
        case ActType::kSigmoid:
          return e.emit(Op::kSigmoid, in[0]);
        case ActType::kTanh:
          return e.emit(Op::kTanh, in[0]);
        case ActType::kSoftrelu:
          return e.emit(Op::kSoftrelu, in[0]);
        case ActType::kSoftsign:
          return e.emit(Op::kSoftsign, in[0]);
      }
      return std::nullopt;
    case OpId::kActivationBackward: {
      // Inputs (out_grad g, forward output y); nn_activation.cc's formulas.
      FusedOperand g = in[0], y = in[1];
      switch (n.attrs.as<ActivationAttrs>().act_type) {
        case ActType::kRelu: {
          FusedOperand positive = e.emit(Op::kGt, y, lit(0));
          return e.emit(Op::kWhere, positive, g, lit(0));
        }
        case ActType::kSigmoid: {
          FusedOperand gy = e.emit(Op::kMul, g, y);
          FusedOperand one_minus_y = e.emit(Op::kSub, lit(1), y);
          return e.emit(Op::kMul, gy, one_minus_y);
        }
        case ActType::kTanh: {
          FusedOperand yy = e.emit(Op::kMul, y, y);
          FusedOperand one_minus = e.emit(Op::kSub, lit(1), yy);
          return e.emit(Op::kMul, g, one_minus);
        }
        case ActType::kSoftsign: {
          FusedOperand s = e.emit(Op::kSub, lit(1), e.emit(Op::kAbs, y));
          FusedOperand gs = e.emit(Op::kMul, g, s);
          return e.emit(Op::kMul, gs, s);
        }
        case ActType::kSoftrelu:
          return std::nullopt;  // expm1
      }
      return std::nullopt;
    }
    case OpId::kAddN: {  // add_n_kernel sums left to right
      if (in.size() < 2) return std::nullopt;
      FusedOperand acc = in[0];
      for (size_t k = 1; k < in.size(); ++k) acc = e.emit(Op::kAdd, acc, in[k]);
      return acc;
    }
    case OpId::kLeakyReLU: {
      const auto& a = n.attrs.as<LeakyReLUAttrs>();
      if (a.act_type != LeakyType::kLeaky || in.size() != 1) return std::nullopt;
      FusedOperand positive = e.emit(Op::kGt, in[0], lit(0));
      FusedOperand scaled = e.emit(Op::kMul, lit(a.slope), in[0]);
      return e.emit(Op::kWhere, positive, in[0], scaled);
    }
    default:
      return std::nullopt;
  }
}

// How a fused node reads an entry of shape `s` when its values have shape `out`.
std::optional<FusedInputKind> input_kind(const Shape& s, const Shape& out) {
  if (s == out) return FusedInputKind::kFull;
  if (s.size() == 1) return FusedInputKind::kScalar;
  int axis = fused_broadcast_axis(s, out);
  if (axis < 0) return std::nullopt;
  return fused_inner_size(out, axis) == 1 ? FusedInputKind::kRow : FusedInputKind::kChannel;
}

// A node whose inputs and output are all float32, all float16 or all
// bfloat16 (so the members of a group, joined through their edges, share it).
bool is_fusible(const ir::Graph& g, const ir::Node& n) {
  if (!n.is_op() || n.num_outputs() != 1 || n.types[0].shape.size() == 0) return false;
  const DType dtype = n.types[0].dtype;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBfloat16) return false;
  const Shape& out = n.types[0].shape;
  bool any_full = false;
  for (const ir::Entry& e : n.inputs) {
    const TensorType& t = g.type(e);
    if (t.dtype != dtype) return false;
    auto kind = input_kind(t.shape, out);
    if (!kind) return false;
    any_full |= *kind == FusedInputKind::kFull;
  }
  if (!any_full) return false;
  FusedProgram scratch;
  Emitter e{scratch};
  std::vector<FusedOperand> in(n.inputs.size(), FusedOperand{.value = 0});
  return lower(n, in, e).has_value();
}

// Group membership while groups grow, with the question that keeps the
// contracted graph acyclic: does a node depend on a group, counting every
// group as one node (so a path may enter a group at one member and leave it
// at another)?
class Groups {
 public:
  explicit Groups(const ir::Graph& g) : g_(g), group_(g.size(), -1), seen_(g.size(), 0) {}

  int32_t of(ir::NodeId v) const { return group_[static_cast<size_t>(v)]; }
  const std::vector<ir::NodeId>& members(int32_t gr) const { return members_[static_cast<size_t>(gr)]; }
  size_t count() const { return members_.size(); }

  void add(ir::NodeId v, int32_t gr) {  // gr == count(): a new group
    if (gr == static_cast<int32_t>(members_.size())) members_.emplace_back();
    members_[static_cast<size_t>(gr)].push_back(v);
    group_[static_cast<size_t>(v)] = gr;
  }

  // Whether `u` (not in `gr`) reads from `gr`, directly or through other nodes.
  bool depends_on(ir::NodeId u, int32_t gr) {
    // Inputs have lower ids than their readers, so a path that ends in `gr`
    // climbs above gr's first member only by passing through a group with a
    // member at or after it. An ungrouped node below the first member of
    // every such group has no such group among its ancestors: pruned.
    const ir::NodeId first = members(gr).front();
    ir::NodeId below = first;
    for (const std::vector<ir::NodeId>& m : members_)
      if (m.back() >= first) below = std::min(below, m.front());
    ++stamp_;
    std::vector<ir::NodeId> stack{u};
    while (!stack.empty()) {
      ir::NodeId x = stack.back();
      stack.pop_back();
      if (seen_[static_cast<size_t>(x)] == stamp_ || (x < below && of(x) < 0)) continue;
      if (of(x) == gr) return true;
      seen_[static_cast<size_t>(x)] = stamp_;
      if (of(x) < 0) {
        for (const ir::Entry& e : g_.node(x).inputs)
          if (e.node >= 0) stack.push_back(e.node);  // a const node's input is its slot, not a node
        continue;
      }
      for (ir::NodeId m : members(of(x))) {
        seen_[static_cast<size_t>(m)] = stamp_;
        for (const ir::Entry& e : g_.node(m).inputs) stack.push_back(e.node);
      }
    }
    return false;
  }

 private:
  const ir::Graph& g_;
  std::vector<int32_t> group_;
  std::vector<std::vector<ir::NodeId>> members_;
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
};

}  // namespace

ir::Graph fuse_elementwise(const ir::Graph& g, PassContext& ctx) {
  const auto num_nodes = static_cast<ir::NodeId>(g.size());
  Groups groups(g);
  for (ir::NodeId v = 0; v < num_nodes; ++v) {
    const ir::Node& n = g.node(v);
    if (!is_fusible(g, n)) continue;
    auto chosen = static_cast<int32_t>(groups.count());
    for (const ir::Entry& e : n.inputs) {
      int32_t cand = groups.of(e.node);
      if (cand < 0 || g.type(e).shape != n.types[0].shape) continue;
      bool ok = true;  // no other input reaches the group from outside it
      for (const ir::Entry& u : n.inputs) ok = ok && (groups.of(u.node) == cand || !groups.depends_on(u.node, cand));
      if (ok) {
        chosen = cand;
        break;
      }
    }
    groups.add(v, chosen);
  }

  // Units of the new graph: a group of two or more nodes, or a single node.
  std::vector<int32_t> unit(g.size());
  std::vector<std::vector<ir::NodeId>> units;
  for (ir::NodeId v = 0; v < num_nodes; ++v) {
    int32_t gr = groups.of(v);
    if (gr >= 0 && groups.members(gr).size() > 1) {
      if (groups.members(gr).front() == v) {
        units.push_back(groups.members(gr));
        for (ir::NodeId m : groups.members(gr)) unit[m] = static_cast<int32_t>(units.size() - 1);
      }
      continue;
    }
    units.push_back({v});
    unit[v] = static_cast<int32_t>(units.size() - 1);
  }
  if (units.size() == g.size()) return g;

  // Readers outside the unit, and graph outputs, keep a member's value.
  std::map<std::pair<ir::NodeId, int32_t>, bool> read_outside;
  for (ir::NodeId v = 0; v < num_nodes; ++v)
    for (const ir::Entry& e : g.node(v).inputs)
      if (e.node >= 0 && unit[e.node] != unit[v]) read_outside[{e.node, e.index}] = true;
  for (const ir::Entry& e : g.outputs()) read_outside[{e.node, e.index}] = true;

  // Units in a topological order of the contracted graph, ties by first node.
  std::vector<std::vector<int32_t>> succ(units.size());
  std::vector<int32_t> pending(units.size(), 0);
  for (ir::NodeId v = 0; v < num_nodes; ++v)
    for (const ir::Entry& e : g.node(v).inputs)
      if (e.node >= 0 && unit[e.node] != unit[v]) {
        succ[unit[e.node]].push_back(unit[v]);
        ++pending[unit[v]];
      }
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> ready;
  for (size_t u = 0; u < units.size(); ++u)
    if (pending[u] == 0) ready.push(static_cast<int32_t>(u));

  GraphCopy copy(g);
  ir::Graph& dst = copy.graph();
  size_t emitted = 0;
  while (!ready.empty()) {
    int32_t u = ready.top();
    ready.pop();
    ++emitted;
    for (int32_t s : succ[u])
      if (--pending[s] == 0) ready.push(s);
    const std::vector<ir::NodeId>& nodes = units[u];
    if (nodes.size() == 1) {
      copy.copy_node(nodes[0]);
      continue;
    }
    // Build the program: external entries become inputs, in order of first use.
    const Shape& shape = g.node(nodes[0]).types[0].shape;
    FusedProgram program;
    std::vector<ir::Entry> inputs;
    std::map<std::pair<ir::NodeId, int32_t>, int32_t> input_of;
    for (ir::NodeId m : nodes)
      for (const ir::Entry& e : g.node(m).inputs)
        if (unit[e.node] != u && !input_of.contains({e.node, e.index})) {
          input_of[{e.node, e.index}] = static_cast<int32_t>(inputs.size());
          inputs.push_back(e);
          program.inputs.push_back(*input_kind(g.type(e).shape, shape));
        }
    Emitter emitter{program};
    std::map<ir::NodeId, FusedOperand> value_of;
    std::vector<ir::NodeId> kept;
    for (ir::NodeId m : nodes) {
      const ir::Node& n = g.node(m);
      std::vector<FusedOperand> in;
      for (const ir::Entry& e : n.inputs) {
        auto it = input_of.find({e.node, e.index});
        in.push_back(it != input_of.end() ? FusedOperand{.value = it->second} : value_of.at(e.node));
      }
      std::optional<FusedOperand> r = lower(n, in, emitter);
      KILN_ASSERT(r.has_value());
      value_of[m] = *r;
      // A group nobody reads (dead code) keeps its last value, for
      // eliminate-dead-code to remove.
      if (read_outside.contains({m, 0}) || (m == nodes.back() && kept.empty())) {
        program.outputs.push_back(r->value);
        kept.push_back(m);
      }
    }
    // Instructions are numbered after the inputs, which were all known first.
    std::vector<ir::Entry> mapped;
    for (const ir::Entry& e : inputs) mapped.push_back(copy.map(e));
    OpAttrs attrs = OpAttrs::make(FusedElemwiseAttrs{FusedProgramRef::make(std::move(program))});
    std::vector<ir::Entry> outs = dst.add_op(OpId::kFusedElemwise, attrs, mapped, "fused/" + g.node(nodes.back()).name);
    for (size_t i = 0; i < kept.size(); ++i) copy.map_entry({kept[i], 0}, outs[i]);
    ctx.current().fused += static_cast<int64_t>(nodes.size());
  }
  KILN_CHECK(emitted == units.size(), InternalError, "internal error: fuse-elementwise made a cycle");
  ctx.current().changed = true;
  return copy.finish();
}

namespace {

// KILN_FUSE, read once: unset (the default), "0" (never) or "1" (on GPUs too).
std::string_view fuse_setting() {
  static const std::string setting = [] {
    const char* env = std::getenv("KILN_FUSE");
    return std::string(env == nullptr ? "" : env);
  }();
  return setting;
}

}  // namespace

bool fuse_elementwise_enabled() { return fuse_setting() != "0"; }

bool fuse_elementwise_on(Device device) {
  if (!fuse_elementwise_enabled()) return false;
  if (!device.is_cuda() || fuse_setting() == "1") return true;
#if defined(KILN_HAVE_NVRTC)
  // The CUDA backend's generated kernels (backends/cuda/fused_nvrtc.h), unless
  // they are turned off for its interpreter.
  static const bool generated = [] {
    const char* env = std::getenv("KILN_CUDA_FUSED");
    return env == nullptr || std::string_view(env) != "interpret";
  }();
  return generated;
#else
  return false;
#endif
}

}  // namespace kiln::passes
