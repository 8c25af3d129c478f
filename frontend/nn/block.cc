#include "frontend/nn/block.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <ostream>
#include <typeinfo>
#include <unordered_set>

#include <fmt/ranges.h>

#include "frontend/cached_op.h"
#include "frontend/formats/mxnet/export.h"
#include "frontend/trace.h"

namespace kiln::nn {

namespace detail {

struct BlockState {
  std::string name;  // the name it was last registered under ("" for a root)
  std::vector<Block::Child> children;
  std::vector<std::pair<std::string, Parameter>> params;
  std::vector<std::pair<int, ForwardPreHook>> pre_hooks;
  std::vector<std::pair<int, ForwardHook>> hooks;
  int next_hook_id = 0;
  bool hybridized = false;
  std::shared_ptr<CachedOp> cached_op;  // while hybridized
};

}  // namespace detail

namespace {

// The block whose default multi-input forward is running on this thread: its
// default single-input forward must not call back (neither was overridden).
thread_local const Block* t_default_multi_forward = nullptr;

// The exception object the innermost block already prefixed: outer blocks
// rethrow it unchanged, so a message names one block, the one that failed.
// Reset when the outermost call exits, so a later exception that happens to
// reuse the address is prefixed again.
thread_local const void* t_error_with_block = nullptr;
thread_local int t_call_depth = 0;

void check_name(std::string_view what, const std::string& name, std::string_view block) {
  KILN_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError,
             "{}: {} name '{}' must be non-empty and must not contain '.' (structural names join them with '.')", block,
             what, name);
}

void collect(const Block& b, const std::string& prefix, ParameterDict& out, std::unordered_set<const void*>& seen) {
  for (auto& [name, p] : b.own_parameters()) {
    if (seen.insert(p.id()).second) out.insert(prefix + name, p);
  }
  for (auto& [name, child] : b.children()) collect(*child, prefix + name + ".", out, seen);
}

}  // namespace

void HookHandle::detach() {
  auto s = state_.lock();
  if (!s) return;
  auto drop = [&](auto& v) { std::erase_if(v, [&](const auto& h) { return h.first == id_; }); };
  drop(s->pre_hooks);
  drop(s->hooks);
}

Block::Block() : state_(std::make_shared<detail::BlockState>()) {}
Block::~Block() = default;

NDArray Block::forward(const NDArray& x) {
  KILN_CHECK(t_default_multi_forward != this, NotSupported,
             "the block overrides neither forward(const NDArray&) nor forward(std::span<const NDArray>)");
  std::vector<NDArray> out = forward(std::span<const NDArray>(&x, 1));
  KILN_CHECK(out.size() == 1, ValueError, "called with one input, forward returned {} outputs", out.size());
  return out[0];
}

std::vector<NDArray> Block::forward(std::span<const NDArray> xs) {
  KILN_CHECK(xs.size() == 1, ValueError, "called with {} inputs, but the block only overrides the single-input forward",
             xs.size());
  const Block* prev = std::exchange(t_default_multi_forward, this);
  struct Restore {
    const Block* prev;
    ~Restore() { t_default_multi_forward = prev; }
  } restore{prev};
  return {forward(xs[0])};
}

template <typename In, typename Call>
auto Block::call_with_hooks(In inputs, Call&& call) {
  // Copies, so that a hook may detach itself (or others) while running.
  auto pre_hooks = state_->pre_hooks;
  for (auto& [_, h] : pre_hooks) h(*this, inputs);
  auto guarded = [&] {
    struct Depth {
      Depth() { ++t_call_depth; }
      ~Depth() { --t_call_depth; }
    } depth;
    try {
      return call();
    } catch (Error& e) {
      if (t_error_with_block != &e) {
        e.add_context(display_name());
      }
      t_error_with_block = t_call_depth == 1 ? nullptr : &e;
      throw;
    }
  };
  auto out = guarded();
  auto hooks = state_->hooks;
  if constexpr (std::is_same_v<decltype(out), NDArray>) {
    for (auto& [_, h] : hooks) h(*this, inputs, std::span<const NDArray>(&out, 1));
  } else {
    for (auto& [_, h] : hooks) h(*this, inputs, std::span<const NDArray>(out));
  }
  return out;
}

// A hybridized block called outside any trace runs from its CachedOp; inside
// a trace (a hybridized parent is being traced) its forward is inlined into
// the parent's graph.
// The CachedOp is created by hybridize(), never here: calls may come from
// several threads at once and must only read the block's state.
CachedOp* Block::active_cached_op() const {
  if (!state_->hybridized || trace::current() != nullptr) return nullptr;
  return state_->cached_op.get();
}

std::string Block::display_name() const {
  return state_->name.empty() ? type_name() : fmt::format("{} '{}'", type_name(), state_->name);
}

NDArray Block::operator()(const NDArray& x) {
  return call_with_hooks(std::span<const NDArray>(&x, 1), [&] {
    if (CachedOp* op = active_cached_op()) {
      std::vector<NDArray> out = op->call(*this, std::span<const NDArray>(&x, 1));
      KILN_CHECK(out.size() == 1, ValueError, "called with one input, forward returned {} outputs", out.size());
      return out[0];
    }
    return forward(x);
  });
}

std::vector<NDArray> Block::operator()(std::span<const NDArray> xs) {
  return call_with_hooks(xs, [&] {
    if (CachedOp* op = active_cached_op()) return op->call(*this, xs);
    return forward(xs);
  });
}

Block& Block::register_child(std::string name, std::shared_ptr<Block> block) {
  KILN_CHECK(block != nullptr, ValueError, "{}: register_child('{}') got a null block", type_name(), name);
  check_name("child", name, type_name());
  KILN_CHECK(block->state_ != state_, ValueError, "{}: a block cannot be its own child ('{}')", type_name(), name);
  KILN_CHECK(dynamic_cast<const HybridBlock*>(this) == nullptr || dynamic_cast<const HybridBlock*>(block.get()),
             ValueError,
             "{}: children of a HybridBlock must be HybridBlocks too, but child '{}' is a {} "
             "(use its Hybrid variant, e.g. HybridLambda, HybridSequential)",
             type_name(), name, block->type_name());
  for (auto& [n, _] : state_->children) {
    KILN_CHECK(n != name, ValueError, "{}: a child named '{}' is already registered", type_name(), name);
  }
  block->state_->name = name;
  state_->children.emplace_back(std::move(name), std::move(block));
  return *state_->children.back().second;
}

Parameter Block::register_parameter(std::string name, Parameter p) {
  KILN_CHECK(!p.is_none(), ValueError, "{}: register_parameter('{}') got an empty Parameter", type_name(), name);
  check_name("parameter", name, type_name());
  for (auto& [n, _] : state_->params) {
    KILN_CHECK(n != name, ValueError, "{}: a parameter named '{}' is already registered", type_name(), name);
  }
  if (p.name().empty()) p.set_name(name);
  state_->params.emplace_back(std::move(name), p);
  return p;
}

Parameter Block::register_parameter(std::string name, Shape shape, ParameterOptions options) {
  Parameter p(name, shape, std::move(options));
  return register_parameter(std::move(name), std::move(p));
}

const std::vector<Block::Child>& Block::children() const { return state_->children; }

Block& Block::child(std::string_view name) const {
  std::vector<std::string_view> names;
  for (auto& [n, c] : state_->children) {
    if (n == name) return *c;
    names.push_back(n);
  }
  throw IndexError(fmt::format("{}: no child named '{}' (children: {})", type_name(), name, fmt::join(names, ", ")));
}

ParameterDict Block::own_parameters() const {
  ParameterDict out;
  for (auto& [n, p] : state_->params) out.insert(n, p);
  return out;
}

ParameterDict Block::collect_params(const std::string& select) const {
  ParameterDict out;
  std::unordered_set<const void*> seen;
  collect(*this, "", out, seen);
  return select.empty() ? out : out.select(select);
}

void Block::initialize(const init::Initializer& init, const std::vector<Device>& devices, bool force_reinit) {
  for (auto& [name, p] : collect_params()) {
    Parameter q = p;
    q.set_name(name);
    q.initialize(init, devices, force_reinit);
  }
}

void Block::zero_grad() { collect_params().zero_grad(); }

void Block::cast(DType dtype) {
  for (auto& [_, p] : state_->params) p.cast(dtype);
  for (auto& [_, c] : state_->children) c->cast(dtype);
}

void Block::hybridize(const HybridizeOptions& options) {
  for (auto& [_, c] : state_->children) c->hybridize(options);
}

void Block::apply(const std::function<void(Block&)>& fn) {
  for (auto& [_, c] : state_->children) c->apply(fn);
  fn(*this);
}

HookHandle Block::register_forward_pre_hook(ForwardPreHook hook) {
  int id = state_->next_hook_id++;
  state_->pre_hooks.emplace_back(id, std::move(hook));
  return HookHandle(state_, id);
}

HookHandle Block::register_forward_hook(ForwardHook hook) {
  int id = state_->next_hook_id++;
  state_->hooks.emplace_back(id, std::move(hook));
  return HookHandle(state_, id);
}

std::string Block::to_string() const {
  if (state_->children.empty()) return type_name() + "()";
  std::string s = type_name() + "(\n";
  for (auto& [name, c] : state_->children) s += fmt::format("  ({}): {}\n", name, indent_lines(c->to_string(), 2));
  return s + ")";
}

std::string Block::type_name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string full = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  // Drop namespaces (and "(anonymous namespace)::"), but not inside template arguments.
  size_t end = full.find('<');
  size_t cut = full.rfind("::", end == std::string::npos ? std::string::npos : end);
  return cut == std::string::npos ? full : full.substr(cut + 2);
}

void HybridBlock::hybridize(const HybridizeOptions& options) {
  KILN_CHECK(!options.amp || *options.amp == DType::kBfloat16 || *options.amp == DType::kFloat16, ValueError,
             "{}: hybridize's amp must be float16 or bfloat16, got {}", display_name(), *options.amp);
  state().hybridized = options.active;
  // As in Gluon, hybridize() starts a fresh cache.
  state().cached_op = options.active ? std::make_shared<CachedOp>(16, options.amp) : nullptr;
  Block::hybridize(options);
}

bool HybridBlock::is_hybridized() const { return state().hybridized; }

const CachedOp* HybridBlock::cached_op() const { return state().cached_op.get(); }

std::pair<std::string, std::string> HybridBlock::export_model(const std::string& prefix, int epoch) const {
  const CachedOp* op = state().cached_op.get();
  std::shared_ptr<const trace::TracedGraph> t = op ? op->graph_for_export() : nullptr;
  KILN_CHECK(t != nullptr, ValueError,
             "{}: export_model needs a traced graph: call hybridize() and run the block once first (as Gluon's "
             "export does)",
             display_name());
  ArrayMap values;
  for (const auto& [id, p] : t->params) values.emplace(t->graph.node(id).name, p.data(t->device));
  // Captured constants: variables in the JSON, values in the params file.
  for (const auto& [id, a] : t->consts) values.emplace(t->graph.node(id).name, a);
  try {
    return mxnet::export_graph(prefix, epoch, t->graph, values);
  } catch (Error& e) {
    e.add_context(fmt::format("{}: export_model('{}')", display_name(), prefix));
    throw;
  }
}

std::ostream& operator<<(std::ostream& os, const Block& b) { return os << b.to_string(); }

std::string indent_lines(const std::string& s, int spaces) {
  std::string out;
  std::string pad(static_cast<size_t>(spaces), ' ');
  for (char c : s) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

}  // namespace kiln::nn
