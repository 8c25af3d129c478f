#include "frontend/trace.h"

#include <atomic>

#include "frontend/graph_eval.h"
#include "ir/error.h"

namespace kiln::trace {
namespace {

thread_local Tracer* t_current = nullptr;
std::atomic<uint64_t> g_next_id{1};

}  // namespace

Tracer* current() { return t_current; }

Suspend::Suspend() : saved_(t_current) { t_current = nullptr; }
Suspend::~Suspend() { t_current = saved_; }

Tracer::Tracer(std::string what, Device device, std::unordered_map<const void*, std::string> param_names)
    : what_(std::move(what)), id_(g_next_id.fetch_add(1)), prev_(t_current), param_names_(std::move(param_names)) {
  KILN_CHECK(prev_ == nullptr, ValueError, "{}: cannot trace while '{}' is being traced on this thread", what_,
             prev_ ? prev_->what() : std::string());
  traced_.device = device;
  t_current = this;
}

Tracer::~Tracer() {
  if (t_current == this) t_current = prev_;
}

NDArray Tracer::symbolic(ir::Entry e) {
  const TensorType& t = traced_.graph.type(e);
  auto sym = std::make_shared<const Symbol>(Symbol{id_, e.node, e.index, traced_.device});
  return NDArray::symbolic(std::move(sym), t.shape, t.dtype);
}

NDArray Tracer::add_input(std::string name, TensorType type) {
  ir::Entry e = traced_.graph.add_input(std::move(name), type);
  traced_.inputs.push_back(e.node);
  return symbolic(e);
}

NDArray Tracer::param(const nn::Parameter& p, Device device) {
  KILN_CHECK(device == traced_.device, DeviceError,
             "{}: Parameter '{}' was asked for on {}, but the block is traced on {} (its inputs' device)", what_,
             p.name(), device, traced_.device);
  auto it = param_entries_.find(p.id());
  if (it == param_entries_.end()) {
    KILN_CHECK(p.is_initialized(), ValueError,
               "{}: Parameter '{}' is used before initialization: call initialize() on the block", what_, p.name());
    auto named = param_names_.find(p.id());
    std::string name = named != param_names_.end() ? named->second : p.name();
    // Two distinct parameters may share a registration name ("weight") when
    // they are not reachable from the traced block: keep node names unique.
    std::string unique = name;
    for (int i = 1; traced_.graph.find(unique); ++i) unique = fmt::format("{}_{}", name, i);
    ir::Entry e = traced_.graph.add_param(unique, {p.shape(), p.dtype()}, p.is_aux());
    traced_.params.emplace_back(e.node, p);
    it = param_entries_.emplace(p.id(), e).first;
  }
  return symbolic(it->second);
}

ir::Entry Tracer::entry_of(const NDArray& a, std::string_view op, size_t index) {
  if (a.is_symbolic()) {
    KILN_CHECK(a.symbol()->trace_id == id_, ValueError,
               "{}: {} input {} is a symbolic array of another trace (a value kept from an earlier hybridized call "
               "or another block's trace cannot be used here)",
               what_, op, index);
    return {a.symbol()->node, a.symbol()->index};
  }
  KILN_CHECK(!a.is_none(), ValueError, "{}: {} input {} is an empty (none) NDArray", what_, op, index);
  KILN_CHECK(a.device() == traced_.device, DeviceError,
             "{}: {} input {} is a constant array on {}, but the block is traced on {}", what_, op, index, a.device(),
             traced_.device);
  // A concrete array captured by forward: a constant of the graph.
  const void* key = a.data();
  auto it = const_entries_.find(key);
  if (it != const_entries_.end() && traced_.graph.type(it->second) == TensorType{a.shape(), a.dtype()}) return it->second;
  auto slot = static_cast<int32_t>(traced_.consts.size());
  ir::Entry e = traced_.graph.add_const(fmt::format("const{}", slot), {a.shape(), a.dtype()}, slot);
  traced_.consts.emplace_back(e.node, a);
  const_entries_[key] = e;
  return e;
}

std::vector<NDArray> Tracer::record(OpId op, std::span<const NDArray> inputs, const OpAttrs& attrs,
                                    std::span<NDArray> out) {
  KILN_CHECK(!finished_, InternalError, "{}: trace already finished", what_);
  const OpDef& def = op_def(op);
  std::vector<ir::Entry> entries;
  entries.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) entries.push_back(entry_of(inputs[i], def.name, i));
  // Dropout masks and random values are drawn anew per call, not as traced.
  OpAttrs recorded = draws_per_call(op) ? attrs_for_trace(op, attrs) : attrs;
  std::vector<ir::Entry> outs = traced_.graph.add_op(op, std::move(recorded), entries);
  std::vector<NDArray> results;
  results.reserve(outs.size());
  for (ir::Entry e : outs) results.push_back(symbolic(e));
  if (!out.empty()) {
    KILN_CHECK(out.size() == results.size(), ValueError, "{}: {} output array(s) given, op has {}", def.name,
               out.size(), results.size());
    for (size_t i = 0; i < out.size(); ++i) {
      KILN_CHECK(out[i].is_symbolic(), NotSupported,
                 "{}: {} writes in place into an array that is not part of the traced graph (a captured constant); "
                 "a hybridized forward can only create new values",
                 what_, def.name);
      KILN_CHECK(out[i].shape() == results[i].shape() && out[i].dtype() == results[i].dtype(), ShapeError,
                 "{}: output {} is {}{} but the op produces {}{}", def.name, i, dtype_short_name(out[i].dtype()),
                 out[i].shape(), dtype_short_name(results[i].dtype()), results[i].shape());
      out[i] = results[i];
    }
  }
  return results;
}

TracedGraph Tracer::finish(std::span<const NDArray> outputs) {
  KILN_CHECK(!finished_, InternalError, "{}: trace already finished", what_);
  std::vector<ir::Entry> outs;
  for (size_t i = 0; i < outputs.size(); ++i) outs.push_back(entry_of(outputs[i], "the block's output", i));
  traced_.graph.set_outputs(std::move(outs));
  finished_ = true;
  if (t_current == this) t_current = prev_;
  return std::move(traced_);
}

void throw_read(const NDArray& a, std::string_view what) {
  Tracer* t = current();
  if (t != nullptr && a.symbol()->trace_id == t->id()) {
    throw ValueError(fmt::format(
        "{}: {} reads the values of an array while hybridize() traces the block's forward; the array is symbolic "
        "(shape {}, no data yet). Code whose control flow or results depend on array values cannot be compiled: "
        "keep it out of forward, or do not hybridize this block",
        t->what(), what, a.shape()));
  }
  throw ValueError(fmt::format(
      "{}: the array (shape {}) is a symbolic value of a finished trace (hybridize); it has no data. Use the "
      "outputs of the hybridized call instead",
      what, a.shape()));
}

}  // namespace kiln::trace
