#include "frontend/nn/symbol_block.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "frontend/graph_eval.h"
#include "frontend/formats/model_format.h"
#include "frontend/formats/mxnet/export.h"

namespace kiln::nn {

struct SymbolBlock::State {
  mxnet::Symbol symbol;
  std::vector<std::string> input_names;
  std::vector<std::pair<int32_t, Parameter>> params;     // (symbol node, parameter), node order
  std::map<std::string, ir::Graph, std::less<>> graphs;  // by the input types' text
  // ONNX models: the model, its parameters by initializer name, the imported
  // graphs (with their constants) by input types, and for each of the
  // model's inputs the position of the forward argument that feeds it.
  std::optional<onnx::Model> onnx;
  std::map<std::string, Parameter, std::less<>> onnx_params;
  std::map<std::string, onnx::Imported, std::less<>> onnx_graphs;
  std::vector<size_t> onnx_feed;
};

namespace {

std::string types_key(std::span<const TensorType> types) {
  std::string key;
  for (const TensorType& t : types) key += fmt::format("{}{};", dtype_short_name(t.dtype), t.shape);
  return key;
}

// Registers `p` under its dotted name, creating empty children for the prefixes.
void register_dotted(Block& root, const std::string& name, const Parameter& p) {
  Block* block = &root;
  size_t start = 0;
  for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', start)) {
    std::string part = name.substr(start, dot - start);
    Block* next = nullptr;
    for (auto& [n, c] : block->children())
      if (n == part) next = c.get();
    if (next == nullptr) next = &block->register_child(part, HybridBlock());
    block = next;
    start = dot + 1;
  }
  block->register_parameter(name.substr(start), p);
}

}  // namespace

SymbolBlock::SymbolBlock(mxnet::Symbol symbol, std::vector<std::string> input_names)
    : SymbolBlock(std::move(symbol), std::move(input_names), nullptr) {}

SymbolBlock::SymbolBlock(mxnet::Symbol symbol, std::vector<std::string> input_names, const ArrayMap* values)
    : state_(std::make_shared<State>()) {
  state_->symbol = std::move(symbol);
  state_->input_names = std::move(input_names);
  for (const std::string& name : state_->input_names) {
    auto id = state_->symbol.find(name);
    KILN_CHECK(id && state_->symbol.nodes[static_cast<size_t>(*id)].is_variable(), ValueError,
               "SymbolBlock: input '{}' is not a variable of the graph (variables: {})", name,
               fmt::join(state_->symbol.list_variables(), ", "));
  }
  State& st = *state_;
  std::vector<std::string> missing;
  for (size_t i = 0; i < st.symbol.nodes.size(); ++i) {
    const mxnet::SymbolNode& n = st.symbol.nodes[i];
    if (!n.is_variable() || n.is_label || std::ranges::find(st.input_names, n.name) != st.input_names.end()) continue;
    Parameter p;
    if (values != nullptr) {
      auto it = values->find(n.name);
      if (it == values->end() || it->second.is_none()) {
        missing.push_back(n.name);
        continue;
      }
      p = Parameter(n.name, it->second.shape(), {.dtype = it->second.dtype(), .is_aux = n.is_aux});
    } else {
      Shape shape = mxnet::variable_shape_hint(st.symbol, static_cast<int32_t>(i)).value_or(Shape{0});
      DType dtype = DType::kFloat32;
      if (auto d = n.hidden.find("__dtype__"); d != n.hidden.end()) {
        try {
          dtype = dtype_from_flag(parse_attr(d->second, static_cast<int*>(nullptr)));
        } catch (const Error&) {
        }
      }
      p = Parameter(n.name, shape, {.dtype = dtype, .is_aux = n.is_aux});
    }
    register_dotted(*this, n.name, p);
    st.params.emplace_back(static_cast<int32_t>(i), p);
  }
  KILN_CHECK(missing.empty(), ValueError, "{} parameter(s) of the graph are missing from the params file: {}",
             missing.size(), fmt::join(missing, ", "));
}

SymbolBlock::SymbolBlock(onnx::Model model, std::vector<std::string> input_names, const std::vector<Device>& devices)
    : state_(std::make_shared<State>()) {
  State& st = *state_;
  std::vector<std::string> model_inputs;
  for (const onnx::ValueInfo& v : model.inputs()) model_inputs.push_back(v.name);
  if (input_names.empty()) input_names = model_inputs;
  for (const std::string& name : model_inputs) {
    auto it = std::ranges::find(input_names, name);
    KILN_CHECK(it != input_names.end(), ValueError, "SymbolBlock: {}: input '{}' of the model is not among the inputs given ({}); the model takes {}",
               model.source(), name, fmt::join(input_names, ", "), fmt::join(model_inputs, ", "));
    st.onnx_feed.push_back(static_cast<size_t>(it - input_names.begin()));
  }
  for (const std::string& name : input_names) {
    KILN_CHECK(std::ranges::find(model_inputs, name) != model_inputs.end(), ValueError,
               "SymbolBlock: {}: '{}' is not an input of the model (inputs: {})", model.source(), name,
               fmt::join(model_inputs, ", "));
  }
  st.input_names = std::move(input_names);
  for (auto& [name, value] : model.initializers()) {
    if (!model.is_param(name)) continue;
    Parameter p(name, value.shape(), {.dtype = value.dtype(), .is_aux = model.is_aux(name)});
    p.set_data(value, devices);
    register_dotted(*this, name, p);
    st.onnx_params.emplace(name, p);
  }
  st.onnx = std::move(model);
}

const onnx::Model* SymbolBlock::onnx_model() const { return state_->onnx ? &*state_->onnx : nullptr; }

SymbolBlock SymbolBlock::imports(const std::string& symbol_file, std::vector<std::string> input_names,
                                 const std::string& params_file, const std::vector<Device>& devices) {
  if (formats::detect_model_format(symbol_file) == formats::ModelFormat::kOnnx) {
    KILN_CHECK(params_file.empty(), ValueError,
               "SymbolBlock::imports({}): an ONNX model holds its weights; a params file ({}) is not read with it",
               symbol_file, params_file);
    return SymbolBlock(onnx::Model::load(symbol_file), std::move(input_names), devices);
  }
  mxnet::Symbol symbol = mxnet::load_symbol_json(symbol_file);
  if (params_file.empty()) return SymbolBlock(std::move(symbol), std::move(input_names));
  ArrayMap values = mxnet::load_symbol_params(params_file, symbol, input_names);
  try {
    SymbolBlock block(std::move(symbol), std::move(input_names), &values);
    for (auto& [id, p] : block.state_->params) p.set_data(values.at(p.name()), devices);
    return block;
  } catch (Error& e) {
    e.add_context(fmt::format("SymbolBlock::imports({}, {})", symbol_file, params_file));
    throw;
  }
}

const mxnet::Symbol& SymbolBlock::symbol() const {
  KILN_CHECK(!state_->onnx, NotSupported, "SymbolBlock: {} is an ONNX model; it has no MXNet symbol", state_->onnx->source());
  return state_->symbol;
}
const std::vector<std::string>& SymbolBlock::input_names() const { return state_->input_names; }

Parameter SymbolBlock::param(std::string_view name) const {
  if (auto it = state_->onnx_params.find(name); it != state_->onnx_params.end()) return it->second;
  for (auto& [id, p] : state_->params)
    if (p.name() == name || state_->symbol.nodes[static_cast<size_t>(id)].name == name) return p;
  throw ValueError(fmt::format("SymbolBlock: no parameter named '{}'", name));
}

const ir::Graph& SymbolBlock::graph_for(std::span<const TensorType> input_types) {
  State& st = *state_;
  KILN_CHECK(input_types.size() == st.input_names.size(), ValueError, "SymbolBlock: expected {} input(s) ({}), got {}",
             st.input_names.size(), fmt::join(st.input_names, ", "), input_types.size());
  std::string key = types_key(input_types);
  if (st.onnx) {
    if (auto it = st.onnx_graphs.find(key); it != st.onnx_graphs.end()) return it->second.graph;
    std::vector<TensorType> ordered;
    for (size_t k : st.onnx_feed) ordered.push_back(input_types[k]);
    return st.onnx_graphs.emplace(std::move(key), st.onnx->to_graph(ordered)).first->second.graph;
  }
  if (auto it = st.graphs.find(key); it != st.graphs.end()) return it->second;
  mxnet::TypeMap types;
  for (size_t k = 0; k < input_types.size(); ++k) types[st.input_names[k]] = input_types[k];
  for (auto& [id, p] : st.params) {
    if (p.shape_known()) types[st.symbol.nodes[static_cast<size_t>(id)].name] = {p.shape(), p.dtype()};
  }
  ir::Graph g = mxnet::to_graph(st.symbol, types, st.input_names);
  for (auto& [id, p] : st.params) {
    if (p.shape_known()) continue;
    auto node = g.find(st.symbol.nodes[static_cast<size_t>(id)].name);
    KILN_ASSERT(node.has_value());
    p.complete_shape(g.node(*node).types[0].shape);
  }
  return st.graphs.emplace(std::move(key), std::move(g)).first->second;
}

std::vector<NDArray> SymbolBlock::forward(std::span<const NDArray> xs) {
  std::vector<TensorType> types;
  for (const NDArray& x : xs) types.push_back({x.shape(), x.dtype()});
  const ir::Graph& g = graph_for(types);
  State& st = *state_;
  Device device = xs.empty() ? Device::cpu(0) : xs[0].device();
  std::vector<NDArray> values(g.size());
  for (size_t k = 0; k < xs.size(); ++k) values[static_cast<size_t>(*g.find(st.input_names[k]))] = xs[k];
  if (st.onnx) {
    const onnx::Imported& im = st.onnx_graphs.at(types_key(types));
    for (size_t id = 0; id < g.size(); ++id) {
      const ir::Node& n = g.node(static_cast<ir::NodeId>(id));
      if (n.kind == ir::NodeKind::kParam || n.kind == ir::NodeKind::kAux) {
        values[id] = st.onnx_params.at(n.name).data(device);
      } else if (n.kind == ir::NodeKind::kConst) {
        const NDArray& c = im.consts.at(static_cast<size_t>(n.inputs[0].index));
        values[id] = c.device() == device ? c : c.copy_to(device);
      }
    }
    return eval_graph(g, values);
  }
  for (auto& [id, p] : st.params) {
    values[static_cast<size_t>(*g.find(st.symbol.nodes[static_cast<size_t>(id)].name))] = p.data(device);
  }
  return eval_graph(g, values);
}

NDArray SymbolBlock::forward(const NDArray& x) {
  std::vector<NDArray> out = forward(std::span<const NDArray>(&x, 1));
  KILN_CHECK(out.size() == 1, ValueError,
             "SymbolBlock: the graph has {} outputs; call it with a list of inputs to get them all", out.size());
  return out[0];
}

std::pair<std::string, std::string> SymbolBlock::export_model(const std::string& prefix, int epoch) const {
  KILN_CHECK(!state_->onnx, NotSupported, "SymbolBlock::export_model: {} is an ONNX model; writing it as MXNet files is not supported yet",
             state_->onnx->source());
  KILN_CHECK(epoch >= 0 && epoch <= 9999, ValueError, "export: epoch {} is not in [0, 9999]", epoch);
  NamedArrays arrays;
  for (auto& [id, p] : state_->params) {
    arrays.emplace_back((p.is_aux() ? "aux:" : "arg:") + state_->symbol.nodes[static_cast<size_t>(id)].name,
                        p.list_data().front().detach());
  }
  std::string json_path = prefix + "-symbol.json";
  std::string params_path = fmt::format("{}-{:04d}.params", prefix, epoch);
  mxnet::write_text_file(json_path, mxnet::to_json(state_->symbol));
  mxnet::save_ndarrays(params_path, arrays);
  return {json_path, params_path};
}

std::string SymbolBlock::to_string() const {
  if (const onnx::Model* m = onnx_model()) {
    return fmt::format("{}(ONNX {}, opset {}; inputs: {}; {} nodes, {} parameters, {} outputs)", type_name(), m->source(),
                       m->opset(), fmt::join(state_->input_names, ", "), m->num_nodes(), state_->onnx_params.size(),
                       m->outputs().size());
  }
  const mxnet::Symbol& s = state_->symbol;
  int64_t ops = 0;
  for (const mxnet::SymbolNode& n : s.nodes) ops += n.is_variable() ? 0 : 1;
  return fmt::format("{}(inputs: {}; {} ops, {} parameters, {} outputs)", type_name(),
                     fmt::join(state_->input_names, ", "), ops, state_->params.size(), s.heads.size());
}

}  // namespace kiln::nn
