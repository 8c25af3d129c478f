// ONNX graph -> ir::Graph: the walk over the nodes, the values, folding of
// nodes known at import, and NodeContext (contracts: model.h, node_context.h).
#include <unordered_map>

#include <fmt/ranges.h>

#include "frontend/formats/onnx/model_state.h"
#include "frontend/formats/onnx/node_context.h"
#include "frontend/formats/onnx/patterns.h"
#include "frontend/graph_eval.h"

namespace kiln::onnx {

namespace {

std::map<std::string, ConvertFn, std::less<>>& converter_table() {
  static std::map<std::string, ConvertFn, std::less<>> table;
  return table;
}


}  // namespace

const std::map<std::string, ConvertFn, std::less<>>& converters() { return converter_table(); }

bool register_converter(std::string_view op_type, ConvertFn fn) {
  converter_table().emplace(std::string(op_type), fn);
  return true;
}

int normalize_onnx_axis(const NodeContext& n, int64_t axis, int rank) {
  KILN_CHECK(axis >= -rank && axis < std::max(rank, 1), IndexError, "axis {} is out of range for rank {}", axis, rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

class GraphBuilder {
 public:
  GraphBuilder(const Model::State& st, std::span<const TensorType> input_types, std::span<const NDArray> known)
      : st_(st) {
    const pb::GraphProto& g = st.proto.graph();
    for (size_t i = 0; i < st.inputs.size(); ++i) {
      const TensorType& t = input_types[i];
      values_[st.inputs[i].name] = Value{.type = t, .entry = out_.graph.add_input(st.inputs[i].name, t)};
      if (i < known.size() && !known[i].is_none()) values_[st.inputs[i].name].known = known[i];
    }
    for (const pb::TensorProto& t : g.initializer()) {
      const NDArray& a = st.initializers.at(t.name());
      values_[t.name()] = Value{.type = {a.shape(), a.dtype()},
                                .known = a,
                                .is_param = st.params.contains(t.name()),
                                .is_aux = st.aux.contains(t.name())};
    }
  }

  Imported run() {
    const pb::GraphProto& g = st_.proto.graph();
    for (const pb::NodeProto& node : fuse_patterns(g, st_.initializers)) convert(node);
    std::vector<ir::Entry> outputs;
    for (const pb::ValueInfoProto& v : g.output()) outputs.push_back(entry_of(v.name(), out_.graph, out_.consts));
    out_.graph.set_outputs(std::move(outputs));
    return std::move(out_);
  }

  const Value& value(const std::string& name, const pb::NodeProto& node) const {
    auto it = values_.find(name);
    KILN_CHECK(it != values_.end(), ValueError, "input '{}' names no graph input, initializer or earlier node output",
               name);
    return it->second;
  }

  // The value as an entry of `g` (the graph built, or a scratch graph of a fold).
  ir::Entry entry_of(const std::string& name, ir::Graph& g, std::vector<NDArray>& consts) {
    auto it = values_.find(name);
    KILN_CHECK(it != values_.end(), ValueError, "'{}' names no graph input, initializer or node output", name);
    Value& v = it->second;
    if (&g != &out_.graph) {  // a fold: every input is known and not a param
      consts.push_back(v.known);
      return g.add_const(unique(g, name), v.type, static_cast<int32_t>(consts.size() - 1));
    }
    if (v.entry) return *v.entry;
    KILN_ASSERT(!v.known.is_none());
    if (v.is_param) {
      v.entry = g.add_param(name, v.type, v.is_aux);  // inputs and op nodes never take an initializer's name
    } else {
      consts.push_back(v.known);
      v.entry = g.add_const(unique(g, name), v.type, static_cast<int32_t>(consts.size() - 1));
    }
    return *v.entry;
  }

  void define(const std::string& name, Value v) { values_[name] = std::move(v); }
  ir::Graph& graph() { return out_.graph; }

  // A node name not yet in `g` and not an initializer's (param nodes keep
  // their initializer's name, which Model::bind relies on).
  std::string unique(const ir::Graph& g, std::string_view base) const {
    std::string name(base.empty() ? "onnx" : base);
    for (int k = 1; g.find(name) || st_.initializers.contains(name); ++k)
      name = fmt::format("{}_{}", base, k);
    return name;
  }

 private:
  void convert(const pb::NodeProto& node) {
    std::string label = node.name().empty() ? (node.output_size() ? node.output(0) : std::string("?")) : node.name();
    try {
      bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
      KILN_CHECK(default_domain, NotSupported, "op domain '{}' is not supported", node.domain());
      auto fn = converters().find(node.op_type());
      KILN_CHECK(fn != converters().end(), NotSupported, "op {} is not supported", node.op_type());
      bool fold = node.input_size() > 0;
      int64_t fold_elements = 0;
      for (const std::string& in : node.input()) {
        if (in.empty()) continue;
        const Value& v = value(in, node);
        if (v.known.is_none() || v.is_param) fold = false;
        else fold_elements += v.type.shape.size();
      }
      if (fold && fold_elements <= kMaxImportElements) {
        ir::Graph scratch;
        std::vector<NDArray> consts;
        NodeContext n(*this, node, static_cast<int>(st_.opset), scratch, consts);
        fn->second(n);
        fold_into_known(node, scratch, consts);
      } else {
        NodeContext n(*this, node, static_cast<int>(st_.opset), out_.graph, out_.consts);
        fn->second(n);
      }
      for (const std::string& out : node.output())
        KILN_CHECK(out.empty() || values_.contains(out), InternalError, "internal error: the {} converter left output '{}' unset",
                   node.op_type(), out);
    } catch (TypeError& e) {
      // The checker accepted the node's types, so a type Kiln's op refuses is one Kiln lacks.
      throw NotSupported(fmt::format("{}: ONNX node '{}' ({}, opset {}): {}", st_.source, label, node.op_type(),
                                     st_.opset, e.message()));
    } catch (Error& e) {
      e.add_context(fmt::format("{}: ONNX node '{}' ({}, opset {})", st_.source, label, node.op_type(), st_.opset));
      throw;
    }
  }

  // The node's outputs set as entries of the scratch graph, evaluated now.
  void fold_into_known(const pb::NodeProto& node, ir::Graph& scratch, const std::vector<NDArray>& consts) {
    std::vector<std::pair<std::string, ir::Entry>> pending;
    for (const std::string& out : node.output()) {
      auto it = values_.find(out);
      if (out.empty() || it == values_.end() || !it->second.known.is_none()) continue;
      pending.emplace_back(out, *it->second.entry);
    }
    if (pending.empty()) return;
    std::vector<ir::Entry> outs;
    for (auto& [name, e] : pending) {
      KILN_CHECK(scratch.type(e).shape.size() <= kMaxImportElements, ValueError,
                 "output '{}' is known at import but too large to compute then ({})", name, scratch.type(e).shape);
      outs.push_back(e);
    }
    scratch.set_outputs(outs);
    std::vector<NDArray> bound(scratch.size());
    for (const ir::Node& n : scratch.nodes())
      if (n.kind == ir::NodeKind::kConst) bound[static_cast<size_t>(&n - scratch.nodes().data())] = consts[static_cast<size_t>(n.inputs[0].index)];
    std::vector<NDArray> results = eval_graph(scratch, bound);
    for (size_t k = 0; k < pending.size(); ++k) {
      results[k].wait_to_read();
      values_[pending[k].first] = Value{.type = {results[k].shape(), results[k].dtype()}, .known = results[k]};
    }
  }

  const Model::State& st_;
  Imported out_;
  std::unordered_map<std::string, Value> values_;
};

Imported build_graph(const Model::State& state, std::span<const TensorType> input_types,
                     std::span<const NDArray> known) {
  return GraphBuilder(state, input_types, known).run();
}

// ---- NodeContext

NodeContext::NodeContext(GraphBuilder& builder, const pb::NodeProto& node, int opset, ir::Graph& graph,
                         std::vector<NDArray>& consts)
    : builder_(builder), node_(node), opset_(opset), graph_(graph), consts_(consts) {}

const Value& NodeContext::value(size_t i) const {
  KILN_CHECK(has_input(i), ValueError, "input {} is required but absent", i);
  return builder_.value(node_.input(static_cast<int>(i)), node_);
}

const TensorType& NodeContext::type(size_t i) const { return value(i).type; }

ir::Entry NodeContext::input(size_t i) {
  value(i);  // checks presence
  return builder_.entry_of(node_.input(static_cast<int>(i)), graph_, consts_);
}

bool NodeContext::is_known(size_t i) const { return has_input(i) && !value(i).known.is_none(); }

const NDArray& NodeContext::known(size_t i, std::string_view what) const {
  const Value& v = value(i);
  KILN_CHECK(!v.known.is_none(), NotSupported,
             "input {} ({}) is computed from the model's data; Kiln needs it known when the model is loaded "
             "(a constant, an initializer, or computed from input shapes)",
             i, what);
  return v.known;
}

std::vector<int64_t> NodeContext::known_ints(size_t i, std::string_view what) const {
  const NDArray& a = known(i, what);
  KILN_CHECK(is_integral(a.dtype()), TypeError, "input {} ({}) must be integers, got {}", i, what, dtype_name(a.dtype()));
  return a.astype(DType::kInt64).to_vector<int64_t>();
}

std::vector<double> NodeContext::known_doubles(size_t i, std::string_view what) const {
  return known(i, what).astype(DType::kFloat64).to_vector<double>();
}

void NodeContext::set_output(size_t i, ir::Entry e) {
  if (!has_output(i)) return;
  builder_.define(node_.output(static_cast<int>(i)), Value{.type = graph_.type(e), .entry = e});
}

void NodeContext::set_known(size_t i, NDArray value) {
  if (!has_output(i)) return;
  value.wait_to_read();
  builder_.define(node_.output(static_cast<int>(i)), Value{.type = {value.shape(), value.dtype()}, .known = std::move(value)});
}

namespace {

const pb::AttributeProto* find_attr(const pb::NodeProto& node, std::string_view name) {
  for (const pb::AttributeProto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

const pb::AttributeProto* typed_attr(const pb::NodeProto& node, std::string_view name, pb::AttributeProto::AttributeType want) {
  const pb::AttributeProto* a = find_attr(node, name);
  if (a == nullptr) return nullptr;
  KILN_CHECK(!a->ref_attr_name().empty() || a->type() == want, ValueError, "attribute '{}' is {}, expected {}", name,
             pb::AttributeProto_AttributeType_Name(a->type()), pb::AttributeProto_AttributeType_Name(want));
  KILN_CHECK(a->ref_attr_name().empty(), NotSupported, "attribute '{}' refers to a function attribute", name);
  return a;
}

}  // namespace

bool NodeContext::has_attr(std::string_view name) const { return find_attr(node_, name) != nullptr; }

int64_t NodeContext::attr_int(std::string_view name, int64_t dflt) const {
  const auto* a = typed_attr(node_, name, pb::AttributeProto::INT);
  return a ? a->i() : dflt;
}

double NodeContext::attr_float(std::string_view name, double dflt) const {
  const auto* a = typed_attr(node_, name, pb::AttributeProto::FLOAT);
  return a ? a->f() : dflt;
}

std::string NodeContext::attr_string(std::string_view name, std::string dflt) const {
  const auto* a = typed_attr(node_, name, pb::AttributeProto::STRING);
  return a ? a->s() : dflt;
}

std::vector<int64_t> NodeContext::attr_ints(std::string_view name, std::vector<int64_t> dflt) const {
  const auto* a = typed_attr(node_, name, pb::AttributeProto::INTS);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : dflt;
}

std::vector<double> NodeContext::attr_floats(std::string_view name, std::vector<double> dflt) const {
  const auto* a = typed_attr(node_, name, pb::AttributeProto::FLOATS);
  return a ? std::vector<double>(a->floats().begin(), a->floats().end()) : dflt;
}

std::vector<std::string> NodeContext::attr_strings(std::string_view name, std::vector<std::string> dflt) const {
  const auto* a = typed_attr(node_, name, pb::AttributeProto::STRINGS);
  return a ? std::vector<std::string>(a->strings().begin(), a->strings().end()) : dflt;
}

NDArray NodeContext::attr_tensor(std::string_view name) const {
  const auto* a = typed_attr(node_, name, pb::AttributeProto::TENSOR);
  KILN_CHECK(a != nullptr, ValueError, "attribute '{}' is required", name);
  return decode_tensor(a->t(), fmt::format("attribute '{}'", name), "");
}

void NodeContext::require_attr_int(std::string_view name, int64_t allowed, std::string_view why) const {
  if (!has_attr(name)) return;
  int64_t v = attr_int(name, allowed);
  if (v != allowed) unsupported(fmt::format("attribute {}={} ({})", name, v, why));
}

std::vector<ir::Entry> NodeContext::op(OpId id, std::span<const ir::Entry> inputs, const OpAttrs& attrs) {
  std::string base = node_.name().empty() ? (node_.output_size() ? node_.output(0) : op_type()) : node_.name();
  if (ops_added_++ > 0) base += fmt::format("/{}", ops_added_);
  return graph_.add_op(id, attrs, inputs, builder_.unique(graph_, base));
}

ir::Entry NodeContext::constant(NDArray value) {
  value.wait_to_read();
  consts_.push_back(value);
  std::string base = (node_.name().empty() ? (node_.output_size() ? node_.output(0) : op_type()) : node_.name()) + "/const";
  return graph_.add_const(builder_.unique(graph_, base), {value.shape(), value.dtype()},
                          static_cast<int32_t>(consts_.size() - 1));
}

void NodeContext::unsupported(std::string_view what) const {
  throw NotSupported(fmt::format("{} is not supported", what));
}

}  // namespace kiln::onnx
