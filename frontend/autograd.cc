#include "frontend/autograd.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "frontend/autograd_tape.h"
#include "frontend/eager_grad_builder.h"
#include "frontend/invoke.h"
#include "frontend/nd_elemwise.h"
#include "frontend/nd_init.h"
#include "ir/grad.h"

namespace kiln {

// ---- NDArray's autograd members

void NDArray::attach_grad(GradReq req) {
  KILN_CHECK(!is_none(), ValueError, "attach_grad: the NDArray is empty (none)");
  KILN_CHECK(!is_symbolic(), NotSupported,
             "attach_grad: the array is symbolic (inside a forward traced by hybridize); attach gradients to the "
             "block's inputs or parameters outside forward");
  auto leaf = std::make_shared<autograd::detail::Node>();
  leaf->req = req;
  leaf->grad = nd::zeros(shape_, {dtype_, device()});
  leaf->output_types = {{shape_, dtype_}};
  set_ag_entry(std::move(leaf), 0);
}

NDArray NDArray::grad() const {
  return ag_node_ && ag_node_->is_leaf() ? ag_node_->grad : NDArray();
}

GradReq NDArray::grad_req() const {
  return ag_node_ && ag_node_->is_leaf() ? ag_node_->req : GradReq::kNull;
}

NDArray NDArray::detach() const {
  // Traced: a BlockGrad node, so the compiled gradient stops here too.
  if (is_symbolic()) return invoke1(OpId::kBlockGrad, {*this});
  return NDArray(chunk_, shape_, dtype_, offset_);
}

bool NDArray::requires_grad() const { return ag_node_ && ag_node_->needs_grad(); }

namespace autograd {
namespace {

thread_local bool t_recording = false;
thread_local bool t_training = false;

}  // namespace

bool is_recording() { return t_recording; }
bool is_training() { return t_training; }
bool set_recording(bool on) { return std::exchange(t_recording, on); }
bool set_training(bool on) { return std::exchange(t_training, on); }

Record::Record(bool train_mode) : prev_recording_(set_recording(true)), prev_training_(set_training(train_mode)) {}
Record::~Record() {
  set_recording(prev_recording_);
  set_training(prev_training_);
}
Pause::Pause(bool train_mode) : prev_recording_(set_recording(false)), prev_training_(set_training(train_mode)) {}
Pause::~Pause() {
  set_recording(prev_recording_);
  set_training(prev_training_);
}
TrainMode::TrainMode() : prev_(set_training(true)) {}
TrainMode::~TrainMode() { set_training(prev_); }
PredictMode::PredictMode() : prev_(set_training(false)) {}
PredictMode::~PredictMode() { set_training(prev_); }

namespace detail {

void record(const OpDef& def, const OpAttrs& attrs, std::span<const NDArray> inputs, std::span<NDArray> outputs) {
  bool any = false;
  for (const NDArray& x : inputs) any = any || x.requires_grad();
  if (!any || !def.differentiable) return;
  KILN_CHECK(def.grad != nullptr, NotSupported,
             "{}: recorded for autograd, but the op has no gradient definition", def.name);
  auto node = std::make_shared<Node>();
  node->def = &def;
  node->attrs = attrs;
  node->is_train = is_training();
  node->inputs.reserve(inputs.size());
  for (const NDArray& x : inputs) {
    node->inputs.push_back(x.requires_grad() ? Edge{x.ag_node(), x.ag_index()} : Edge{});
    node->input_types.push_back({x.shape(), x.dtype()});
    if (def.grad_uses_inputs) node->saved_inputs.push_back(x);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    node->output_types.push_back({outputs[i].shape(), outputs[i].dtype()});
    // An output the gradient never reads keeps its place as a none array.
    if (def.grad_uses_outputs) node->saved_outputs.push_back(def.grad_keeps_output(i) ? outputs[i].detach() : NDArray());
  }
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i].set_ag_entry(node, static_cast<int>(i));
}

NDArray add_grads(const NDArray& a, const NDArray& b) { return a.is_none() ? b : a + b; }

// Nodes reachable from the heads, each after everything it depends on; the
// walk does not go past nodes in `stop`.
std::vector<Node*> topological_order(std::span<const NDArray> heads, const std::unordered_set<Node*>& stop = {}) {
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack;
  for (const NDArray& h : heads) {
    Node* root = h.ag_node().get();
    if (!root || !seen.insert(root).second) continue;
    stack.push_back({root, 0});
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size() && !stop.contains(node)) {
        Node* child = node->inputs[next++].node.get();
        if (child && seen.insert(child).second) stack.push_back({child, 0});
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
  }
  return order;
}

// A custom node's backward (see Node::custom_backward), accumulating into
// the input edges' slots.
// `reaching`: how many edges (and heads) lead to each leaf output, when
// gradients may be written straight into leaf gradient buffers; null otherwise.
template <typename Slot>
void run_custom_backward(Node& node, std::vector<NDArray>& out_grads, Device device, bool retain_graph,
                         bool create_graph, Slot& slot,
                         const std::unordered_map<Node*, std::vector<int>>* reaching) {
  std::vector<NDArray> full(out_grads.size());
  for (size_t k = 0; k < out_grads.size(); ++k) {
    if (!out_grads[k].is_none()) device = out_grads[k].device();
  }
  for (size_t k = 0; k < out_grads.size(); ++k) {
    full[k] = out_grads[k].is_none()
                  ? nd::zeros(node.output_types[k].shape, {node.output_types[k].dtype, device})
                  : out_grads[k];
  }
  std::vector<NDArray> into(node.inputs.size());
  if (reaching != nullptr) {
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const Edge& e = node.inputs[k];
      if (!e.node || !e.node->is_leaf() || e.node->req != GradReq::kWrite || e.node->grad.is_none()) continue;
      auto it = reaching->find(e.node.get());
      if (it != reaching->end() && it->second[static_cast<size_t>(e.index)] == 1) into[k] = e.node->grad;
    }
  }
  std::vector<NDArray> in_grads;
  if (create_graph) {
    KILN_CHECK(node.custom_replay != nullptr, NotSupported,
               "grad(create_graph=true) through this hybridized block is not supported: {}",
               "its forward cannot be replayed imperatively");
    in_grads = node.custom_replay(full);
  } else {
    in_grads = node.custom_backward(full, CustomBackwardArgs{into, retain_graph});
  }
  KILN_ASSERT(in_grads.size() == node.inputs.size());
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const Edge& e = node.inputs[k];
    if (!e.node || !e.node->needs_grad() || in_grads[k].is_none()) continue;
    auto& g = slot(e.node.get())[static_cast<size_t>(e.index)];
    g = add_grads(g, in_grads[k]);
  }
  if (!retain_graph) {
    node.custom_backward = nullptr;  // releases the saved values
    node.custom_replay = nullptr;
    node.freed = true;
  }
}

// Writes a leaf's gradient `g` (its slot) into its buffer according to its
// GradReq and marks it fresh (for Trainer::step); false when there is nothing
// to write (grad_req null, or no gradient reached it).
bool write_leaf_grad(Node& leaf, const std::vector<NDArray>& g) {
  if (leaf.req == GradReq::kNull || g.empty() || g[0].is_none()) return false;
  leaf.fresh_grad = true;
  if (g[0].var() == leaf.grad.var()) return true;  // written there by a custom node
  if (leaf.req == GradReq::kAdd) {
    leaf.grad += g[0];
  } else {
    leaf.grad.assign(g[0]);
  }
  return true;
}

// The core of backward and grad: returns the gradient reaching each node output.
std::unordered_map<Node*, std::vector<NDArray>> run_backward(std::span<const NDArray> heads,
                                                             std::span<const NDArray> head_grads,
                                                             bool retain_graph, bool create_graph,
                                                             bool train_mode,
                                                             const std::unordered_set<Node*>& keep = {},
                                                             bool into_leaf_grads = false,
                                                             const std::unordered_set<Node*>& stop = {}) {
  KILN_CHECK(head_grads.empty() || head_grads.size() == heads.size(), ValueError,
             "backward: {} head gradients for {} heads", head_grads.size(), heads.size());
  std::unordered_map<Node*, std::vector<NDArray>> grads;
  auto slot = [&](Node* n) -> std::vector<NDArray>& {
    auto& g = grads[n];
    if (g.empty()) g.resize(n->output_types.size());
    return g;
  };
  bool prev_recording = set_recording(create_graph);
  bool prev_training = set_training(train_mode);
  struct Restore {
    bool r, t;
    ~Restore() {
      set_recording(r);
      set_training(t);
    }
  } restore{prev_recording, prev_training};

  for (size_t i = 0; i < heads.size(); ++i) {
    const NDArray& h = heads[i];
    KILN_CHECK(h.requires_grad(), ValueError,
               "backward: head {} ({}{}) is not on a tape; compute it inside autograd::Record from arrays "
               "that have attach_grad()",
               i, dtype_short_name(h.dtype()), h.shape());
    NDArray hg = head_grads.empty() ? nd::ones_like(h) : head_grads[i];
    KILN_CHECK(hg.shape() == h.shape(), ShapeError, "backward: head gradient {} has shape {}, head has {}", i,
               hg.shape(), h.shape());
    auto& g = slot(h.ag_node().get())[static_cast<size_t>(h.ag_index())];
    g = add_grads(g, hg);
  }

  std::vector<Node*> order = topological_order(heads, stop);
  // For backward() (into_leaf_grads), two counts over the leaves:
  // - `reaching`: edges and heads reaching each leaf output; a custom node may
  //   write the gradient of a write-mode leaf that only it reaches into its
  //   buffer;
  // - `edges_left`: edges into each leaf the walk has not taken yet; a leaf's
  //   buffer is written when it drops to zero, right behind the op that
  //   produced its gradient, rather than after the whole walk. A leaf some
  //   edge of which is never taken (its node got no gradient) is left to
  //   backward(); heads are not edges (a head's gradient is in its slot from
  //   the start).
  std::unordered_map<Node*, std::vector<int>> reaching;
  std::unordered_map<Node*, int> edges_left;
  if (into_leaf_grads) {
    auto count = [&](Node* leaf, int index) {
      auto& c = reaching[leaf];
      if (c.empty()) c.resize(std::max<size_t>(leaf->output_types.size(), 1));
      if (static_cast<size_t>(index) >= c.size()) c.resize(static_cast<size_t>(index) + 1);
      ++c[static_cast<size_t>(index)];
    };
    for (const NDArray& h : heads)
      if (h.ag_node() && h.ag_node()->is_leaf()) count(h.ag_node().get(), h.ag_index());
    for (Node* node : order) {
      for (const Edge& e : node->inputs) {
        if (!e.node || !e.node->is_leaf()) continue;
        count(e.node.get(), e.index);
        ++edges_left[e.node.get()];
      }
    }
  }
  auto took_edges_of = [&](Node* node) {
    if (!into_leaf_grads) return;
    for (const Edge& e : node->inputs) {
      if (!e.node || !e.node->is_leaf() || --edges_left[e.node.get()] != 0) continue;
      auto it = grads.find(e.node.get());
      if (it != grads.end() && write_leaf_grad(*e.node, it->second)) grads.erase(it);
    }
  };
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    if (node->is_leaf() || stop.contains(node)) continue;
    auto found = grads.find(node);
    if (found == grads.end()) continue;
    KILN_CHECK(!node->freed, ValueError,
               "backward: the tape through {} was freed by an earlier backward; pass retain_graph = true to "
               "differentiate twice",
               node->name());
    std::vector<NDArray>& out_grads = found->second;
    if (node->custom) {
      run_custom_backward(*node, out_grads, heads[0].device(), retain_graph, create_graph, slot,
                          into_leaf_grads ? &reaching : nullptr);
      if (!keep.contains(node)) grads.erase(node);
      took_edges_of(node);
      continue;
    }
    Device device = heads[0].device();
    for (const NDArray& g : out_grads)
      if (!g.is_none()) device = g.device();
    EagerGradBuilder b(device);
    std::vector<GradValue> in_vals, out_vals, og_vals;
    for (const NDArray& x : node->saved_inputs) in_vals.push_back(b.add(create_graph ? x : x.detach()));
    for (size_t k = 0; k < node->saved_outputs.size(); ++k) {
      NDArray y = node->saved_outputs[k];
      if (create_graph && !y.is_none()) y.set_ag_entry(node->shared_from_this(), static_cast<int>(k));
      out_vals.push_back(b.add(std::move(y)));
    }
    for (size_t k = 0; k < out_grads.size(); ++k) {
      // Outputs nobody used get zero gradients when a sibling output has one,
      // or none where the GradFn takes none.
      if (out_grads[k].is_none() && node->def->grad_takes_none_out_grads) {
        og_vals.push_back(GradValue{});
        continue;
      }
      NDArray g = out_grads[k].is_none()
                      ? nd::zeros(node->output_types[k].shape, {node->output_types[k].dtype, device})
                      : out_grads[k];
      og_vals.push_back(b.add(g));
    }
    size_t n_in = node->inputs.size();
    std::unique_ptr<bool[]> needs(new bool[n_in]);  // not vector<bool>: GradArgs needs contiguous bools
    for (size_t k = 0; k < n_in; ++k) needs[k] = node->inputs[k].node && node->inputs[k].node->needs_grad();
    std::vector<GradValue> in_grads(n_in);
    GradArgs args{node->attrs, in_vals, out_vals, og_vals, {needs.get(), n_in}, node->input_types};
    {
      bool prev = set_training(node->is_train);
      try {
        node->def->grad(b, args, in_grads);
      } catch (Error& e) {
        set_training(prev);
        e.add_context(fmt::format("backward of {}", node->def->name));
        throw;
      }
      set_training(prev);
    }
    for (size_t k = 0; k < node->inputs.size(); ++k) {
      const Edge& e = node->inputs[k];
      if (!e.node || !needs[k] || in_grads[k].is_none()) continue;
      auto& g = slot(e.node.get())[static_cast<size_t>(e.index)];
      g = add_grads(g, b.value(in_grads[k]));
    }
    if (!retain_graph) {
      node->saved_inputs.clear();
      node->saved_outputs.clear();
      node->freed = true;
    }
    if (!keep.contains(node)) grads.erase(node);  // consumed: free the memory early
    took_edges_of(node);
  }
  return grads;
}

std::vector<NDArray> partial_grads(std::span<const NDArray> heads, std::span<const NDArray> head_grads,
                                   std::span<const NDArray> variables) {
  std::unordered_set<Node*> stop;
  for (const NDArray& v : variables) {
    KILN_ASSERT(v.requires_grad());
    stop.insert(v.ag_node().get());
  }
  // Heads that no variable reaches contribute nothing (and are not on a tape).
  std::vector<NDArray> live_heads, live_head_grads;
  for (size_t i = 0; i < heads.size(); ++i) {
    if (!heads[i].requires_grad()) continue;
    live_heads.push_back(heads[i]);
    if (!head_grads.empty()) live_head_grads.push_back(head_grads[i]);
  }
  std::vector<NDArray> out;
  if (live_heads.empty()) {
    out.resize(variables.size());
    return out;
  }
  auto grads = run_backward(live_heads, live_head_grads, true, true, is_training(), stop, false, stop);
  for (const NDArray& v : variables) {
    auto it = grads.find(v.ag_node().get());
    out.push_back(it == grads.end() ? NDArray() : it->second[static_cast<size_t>(v.ag_index())]);
  }
  return out;
}

}  // namespace detail

void backward(std::span<const NDArray> heads, std::span<const NDArray> head_grads, const BackwardOptions& options) {
  auto grads = detail::run_backward(heads, head_grads, options.retain_graph, false, options.train_mode, {}, true);
  Pause pause;
  // The leaves run_backward did not write during the walk (heads that are
  // leaves, leaves behind a node that received no gradient).
  for (auto& [node, g] : grads) {
    if (node->is_leaf()) detail::write_leaf_grad(*node, g);
  }
}

std::vector<NDArray> grad(std::span<const NDArray> heads, std::span<const NDArray> variables,
                          std::span<const NDArray> head_grads, bool retain_graph, bool create_graph) {
  for (size_t i = 0; i < variables.size(); ++i) {
    KILN_CHECK(variables[i].requires_grad(), ValueError,
               "grad: variable {} has no gradient buffer; call attach_grad() before recording", i);
  }
  std::unordered_set<detail::Node*> keep;
  for (const NDArray& v : variables) keep.insert(v.ag_node().get());
  auto grads = detail::run_backward(heads, head_grads, retain_graph || create_graph, create_graph, true, keep);
  std::vector<NDArray> out;
  for (const NDArray& v : variables) {
    auto it = grads.find(v.ag_node().get());
    NDArray g = it == grads.end() ? NDArray() : it->second[static_cast<size_t>(v.ag_index())];
    out.push_back(g.is_none() ? nd::zeros_like(v) : g);
  }
  return out;
}

}  // namespace autograd
}  // namespace kiln
