// kiln inspect: what a model file (MXNet symbol JSON or ONNX, told by
// content) or a graph dump holds, in text or as a picture.
//
//   kiln inspect model.onnx [--shape x=1,3,224,224]   # opset, producer, inputs, ops, parameters
//
//   kiln inspect model-symbol.json
//   kiln inspect model-symbol.json --shape data=1,3,112,112 --dot model.dot
//   kiln inspect model-symbol.json --params model-0000.params --shape data=1,3,112,112
//   kiln inspect model-symbol.json --shape data=1,1,28,28 --svg model.svg --collapse-params --passes
//   kiln inspect dumps/net-predict-0/05-fuse-elementwise.txt --svg fused.svg
//
// Prints the file's MXNet version, its inputs, the op counts, one line per
// node (with its output shapes once input shapes are given: --shape, one per
// input; parameter shapes come from --params, the file's __shape__ hints or
// the ops' attributes), and the parameter counts.
//
// --svg draws the graph through Graphviz, --dot writes the Graphviz text
// of the same picture (passes/dot.h says what it holds): with --shape, the
// typed graph, each node with its op, name, dtypes and shapes, fused groups
// as clusters; --collapse-params leaves parameters out (each op says how
// many it reads); --passes draws the graph after the passes hybridize runs
// for inference on the CPU (or --pipeline P's) beside the traced one, and
// prints the pass report. Without --shape: inputs and ops, parameters folded
// into their op's label. A file in Kiln's IR text form (KILN_DUMP_GRAPHS
// writes one per pass) is read as such: its summary, --svg, --dot, --passes.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>

#include "frontend/atomic_file.h"
#include "frontend/cached_op.h"
#include "frontend/formats/model_format.h"
#include "frontend/formats/mxnet/export.h"
#include "frontend/formats/mxnet/symbol_json.h"
#include "frontend/formats/onnx/model.h"
#include "frontend/viz/graph_svg.h"
#include "passes/dot.h"
#include "passes/pass.h"

namespace kiln::cli {
namespace {

struct InspectOptions {
  std::string symbol_file;
  std::vector<std::string> shapes;  // NAME=D0,D1,...
  std::string params_file;
  std::string dot_file;
  std::string svg_file;
  bool collapse_params = false;
  bool passes = false;
  std::string pipeline;  // empty: inference_pipeline(cpu(0))
};

std::pair<std::string, Shape> parse_shape_option(const std::string& text) {
  size_t eq = text.find('=');
  KILN_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < text.size(), ValueError,
             "--shape '{}': expected NAME=D0,D1,... (e.g. data=1,3,224,224)", text);
  Shape shape;
  try {
    shape = parse_shape(text.substr(eq + 1));
  } catch (const Error& e) {
    throw ValueError(fmt::format("--shape '{}': {}", text, e.message()));
  }
  return {text.substr(0, eq), shape};
}

std::string version_text(int v) { return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100); }

std::string types_text(const std::vector<TensorType>& types) {
  std::string out;
  for (const TensorType& t : types)
    out += fmt::format("{}{}{}", out.empty() ? "" : ", ", dtype_short_name(t.dtype), t.shape);
  return out;
}

std::string dot_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// The untyped picture (no --shape): inputs and ops as Graphviz nodes;
// variables that are not inputs are folded into the label of the op that
// reads them.
std::string to_dot(const mxnet::Symbol& s, const std::vector<std::string>& inputs) {
  auto is_input = [&](const mxnet::SymbolNode& n) { return std::ranges::find(inputs, n.name) != inputs.end(); };
  std::string out = "digraph kiln {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const mxnet::SymbolNode& n = s.nodes[i];
    if (n.is_variable() && !is_input(n)) continue;
    // Lines joined by Graphviz's \n escape, each escaped on its own.
    std::string label = n.is_variable() ? dot_escape(n.name) : dot_escape(n.op) + "\\n" + dot_escape(n.name);
    out += fmt::format("  n{} [label=\"{}\", shape={}{}];\n", i, label, n.is_variable() ? "oval" : "box",
                       n.is_variable() ? ", style=filled, fillcolor=\"#dde8f5\"" : "");
  }
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    for (const mxnet::SymbolEntry& e : s.nodes[i].inputs) {
      const mxnet::SymbolNode& src = s.nodes[static_cast<size_t>(e.node)];
      if (src.is_variable() && !is_input(src)) continue;
      out += fmt::format("  n{} -> n{};\n", e.node, i);
    }
  }
  return out + "}\n";
}

// --dot and --svg (and --passes) for a typed graph: one Graphviz text for both.
void write_graph_pictures(const ir::Graph& g, const InspectOptions& opt) {
  passes::DotOptions dot_options{.collapse_params = opt.collapse_params};
  std::string dot;
  if (opt.passes) {
    std::string pipeline = opt.pipeline.empty() ? inference_pipeline(Device::cpu(0)) : opt.pipeline;
    passes::PassContext ctx;
    ctx.options.train_mode = false;
    ir::Graph optimized = passes::run_pipeline(g, pipeline, ctx);
    std::printf("\npasses: %s\n%s", pipeline.c_str(), ctx.report().c_str());
    std::printf("traced: %zu nodes (%lld ops); optimized: %zu nodes (%lld ops)\n", g.size(),
                static_cast<long long>(g.num_ops()), optimized.size(), static_cast<long long>(optimized.num_ops()));
    passes::LabelledGraph both[] = {{"traced", &g}, {"optimized", &optimized}};
    dot = passes::to_dot_side_by_side(both, dot_options);
  } else {
    dot = passes::to_dot(g, dot_options);
  }
  if (!opt.dot_file.empty()) {
    write_file_atomically(opt.dot_file, dot);
    std::printf("wrote %s\n", opt.dot_file.c_str());
  }
  if (!opt.svg_file.empty()) {
    write_file_atomically(opt.svg_file, viz::dot_to_svg(dot));
    std::printf("wrote %s\n", opt.svg_file.c_str());
  }
}

// A graph in Kiln's IR text form (Graph::to_text, KILN_DUMP_GRAPHS).
void inspect_ir_text(const std::string& text, const InspectOptions& opt) {
  ir::Graph g;
  try {
    g = ir::parse_graph(text);
  } catch (const Error& e) {
    throw ValueError(fmt::format("{}: {}", opt.symbol_file, e.message()));
  }
  std::map<std::string, int> op_counts;
  for (const ir::Node& n : g.nodes())
    if (n.is_op()) ++op_counts[std::string(op_def(n.op).name)];
  std::printf("%s: Kiln IR, %zu nodes (%zu inputs, %zu params, %zu aux, %zu consts, %lld ops), %zu outputs\n",
              opt.symbol_file.c_str(), g.size(), g.nodes_of_kind(ir::NodeKind::kInput).size(),
              g.nodes_of_kind(ir::NodeKind::kParam).size(), g.nodes_of_kind(ir::NodeKind::kAux).size(),
              g.nodes_of_kind(ir::NodeKind::kConst).size(), static_cast<long long>(g.num_ops()), g.outputs().size());
  std::string ops;
  for (auto& [op, count] : op_counts) ops += fmt::format("{}{} x{}", ops.empty() ? "" : ", ", op, count);
  std::printf("ops: %s\n", ops.c_str());
  write_graph_pictures(g, opt);
}

std::string dims_text(const onnx::ValueInfo& v) {
  if (!v.has_shape) return "?";
  std::vector<std::string> dims;
  for (size_t d = 0; d < v.dims.size(); ++d)
    dims.push_back(v.dims[d] >= 0 ? std::to_string(v.dims[d]) : v.dim_params[d].empty() ? "?" : v.dim_params[d]);
  return fmt::format("{}[{}]", dtype_short_name(v.dtype), fmt::join(dims, ","));
}

void inspect_onnx(const InspectOptions& opt) {
  onnx::Model m = onnx::Model::load(opt.symbol_file);
  std::printf("%s: ONNX IR %lld, opset %lld, producer %s, %lld nodes\n", opt.symbol_file.c_str(),
              static_cast<long long>(m.ir_version()), static_cast<long long>(m.opset()),
              m.producer().empty() ? "(none)" : m.producer().c_str(), static_cast<long long>(m.num_nodes()));
  std::map<std::string, TensorType> given;
  for (const std::string& text : opt.shapes) {
    auto [name, shape] = parse_shape_option(text);
    given[name] = {shape, DType::kFloat32};
  }
  std::vector<TensorType> types;
  for (const onnx::ValueInfo& v : m.inputs()) {
    std::printf("input %s %s\n", v.name.c_str(), dims_text(v).c_str());
    if (auto it = given.find(v.name); it != given.end()) types.push_back({it->second.shape, v.dtype});
  }
  KILN_CHECK(given.empty() || types.size() == m.inputs().size(), ValueError,
             "kiln inspect: give --shape for every input of the model, or none");
  std::string ops;
  for (auto& [op, count] : m.op_counts()) ops += fmt::format("{}{} x{}", ops.empty() ? "" : ", ", op, count);
  std::printf("ops: %s\n", ops.c_str());
  int64_t params = 0, aux = 0, values = 0, consts = 0;
  for (auto& [name, a] : m.initializers()) {
    if (!m.is_param(name)) {
      ++consts;
      continue;
    }
    (m.is_aux(name) ? aux : params) += 1;
    values += a.size();
  }
  std::printf("parameters: %lld (%lld learned, %lld aux), %lld values; %lld integer initializers\n",
              static_cast<long long>(params + aux), static_cast<long long>(params), static_cast<long long>(aux),
              static_cast<long long>(values), static_cast<long long>(consts));
  std::printf("outputs:");
  std::optional<onnx::Imported> im;
  if (!types.empty()) im = m.to_graph(types);
  for (size_t i = 0; i < m.outputs().size(); ++i) {
    const onnx::ValueInfo& v = m.outputs()[i];
    std::string t = dims_text(v);
    if (im) {
      const TensorType& got = im->graph.type(im->graph.outputs()[i]);
      t = fmt::format("{}{}", dtype_short_name(got.dtype), got.shape);
    }
    std::printf(" %s %s", v.name.c_str(), t.c_str());
  }
  std::printf("\n");
  if (im) std::printf("kiln graph: %lld ops\n", static_cast<long long>(im->graph.num_ops()));
  KILN_CHECK(im || (opt.svg_file.empty() && opt.dot_file.empty()), ValueError,
             "kiln inspect: --svg and --dot of an ONNX model need --shape for every input");
  if (im) write_graph_pictures(im->graph, opt);
}

// Kiln's IR text starts with "graph {"; MXNet's files with "{".
bool is_ir_text(const std::string& text) {
  size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && text.compare(first, 5, "graph") == 0;
}

void run_inspect(const InspectOptions& opt) {
  KILN_CHECK(opt.svg_file.empty() || opt.svg_file != opt.dot_file, ValueError,
             "--svg and --dot name the same file '{}'", opt.svg_file);
  KILN_CHECK(!opt.passes || !opt.svg_file.empty() || !opt.dot_file.empty(), ValueError,
             "--passes draws the optimized graph: it needs --svg FILE or --dot FILE");
  {
    std::ifstream f(opt.symbol_file, std::ios::binary);
    KILN_CHECK(f.good(), IOError, "{}: cannot open", opt.symbol_file);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (is_ir_text(text)) return inspect_ir_text(text, opt);
  }
  if (formats::detect_model_format(opt.symbol_file) == formats::ModelFormat::kOnnx) {
    KILN_CHECK(opt.params_file.empty(), ValueError, "kiln inspect: --params is for MXNet models (ONNX holds its weights)");
    return inspect_onnx(opt);
  }
  mxnet::Symbol s = mxnet::load_symbol_json(opt.symbol_file);
  mxnet::TypeMap types;
  std::vector<std::string> inputs;
  for (const std::string& text : opt.shapes) {
    auto [name, shape] = parse_shape_option(text);
    types[name] = {shape, DType::kFloat32};
    inputs.push_back(name);
  }
  if (inputs.empty()) {
    // Without --shape: the variables nothing tells the shape of are the inputs.
    for (size_t i = 0; i < s.nodes.size(); ++i) {
      if (s.nodes[i].is_variable() && !s.nodes[i].is_label && !mxnet::variable_shape_hint(s, static_cast<int32_t>(i)))
        inputs.push_back(s.nodes[i].name);
    }
  }
  if (!opt.params_file.empty()) {
    for (auto& [name, a] : mxnet::load_symbol_params(opt.params_file, s, inputs)) types[name] = {a.shape(), a.dtype()};
  }

  size_t variables = 0;
  std::map<std::string, int> op_counts;
  for (const mxnet::SymbolNode& n : s.nodes) {
    if (n.is_variable()) {
      ++variables;
    } else {
      ++op_counts[n.op];
    }
  }
  std::printf("%s: MXNet %s%s, %zu nodes (%zu variables, %zu ops)\n", opt.symbol_file.c_str(),
              version_text(s.mxnet_version).c_str(), s.mxnet_version == 800 ? " (no version: legacy file)" : "",
              s.nodes.size(), variables, s.nodes.size() - variables);
  std::printf("inputs: %s\n", fmt::format("{}", fmt::join(inputs, ", ")).c_str());
  std::string ops;
  for (auto& [op, count] : op_counts) ops += fmt::format("{}{} x{}", ops.empty() ? "" : ", ", op, count);
  std::printf("ops: %s\n", ops.c_str());

  std::optional<ir::Graph> g;
  if (!opt.shapes.empty()) g = mxnet::to_graph(s, types, inputs);

  std::printf("\n%5s  %-40s %-20s %s\n", "node", "name", "op", g ? "output shapes" : "inputs");
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const mxnet::SymbolNode& n = s.nodes[i];
    std::string what;
    if (g) {
      if (auto id = g->find(n.name)) what = types_text(g->node(*id).types);
    } else {
      for (const mxnet::SymbolEntry& e : n.inputs)
        what += fmt::format("{}{}", what.empty() ? "" : ", ", s.nodes[static_cast<size_t>(e.node)].name);
    }
    std::string op = !n.is_variable()                                    ? n.op
                     : std::ranges::find(inputs, n.name) != inputs.end() ? "input"
                     : n.is_label                                        ? "label (unused)"
                     : n.is_aux                                          ? "aux"
                                                                         : "param";
    std::printf("%5zu  %-40s %-20s %s\n", i, n.name.c_str(), op.c_str(), what.c_str());
  }

  // Parameter counts: from the typed graph, else from complete hints.
  int64_t args = 0, aux = 0, arg_values = 0, aux_values = 0;
  bool all_known = true;
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const mxnet::SymbolNode& n = s.nodes[i];
    if (!n.is_variable() || n.is_label || std::ranges::find(inputs, n.name) != inputs.end()) continue;
    (n.is_aux ? aux : args) += 1;
    std::optional<Shape> shape;
    if (g) {
      shape = g->node(*g->find(n.name)).types[0].shape;
    } else if (auto t = types.find(n.name); t != types.end()) {
      shape = t->second.shape;
    } else {
      shape = mxnet::variable_shape_hint(s, static_cast<int32_t>(i));
      for (int d = 0; shape && d < shape->ndim(); ++d)
        if ((*shape)[d] == 0) shape.reset();
    }
    if (!shape) {
      all_known = false;
      continue;
    }
    (n.is_aux ? aux_values : arg_values) += shape->size();
  }
  std::printf("\nparameters: %lld (%lld arg, %lld aux)", static_cast<long long>(args + aux),
              static_cast<long long>(args), static_cast<long long>(aux));
  if (all_known) {
    std::printf(", %lld values (%lld learned, %lld aux)\n", static_cast<long long>(arg_values + aux_values),
                static_cast<long long>(arg_values), static_cast<long long>(aux_values));
  } else {
    std::printf("; value counts need --shape or --params\n");
  }
  std::printf("outputs:");
  for (const mxnet::SymbolEntry& e : s.heads) {
    std::string name = s.nodes[static_cast<size_t>(e.node)].name;
    std::printf(" %s%s", name.c_str(), e.index > 0 ? fmt::format("#{}", e.index).c_str() : "");
    if (g) {
      // The head entries of the typed graph are in the same order.
      size_t h = static_cast<size_t>(&e - s.heads.data());
      const TensorType& t = g->type(g->outputs()[h]);
      std::printf(" %s%s", std::string(dtype_short_name(t.dtype)).c_str(), t.shape.to_string().c_str());
    }
  }
  std::printf("\n");

  if (g) {
    write_graph_pictures(*g, opt);
    return;
  }
  KILN_CHECK(!opt.passes, ValueError,
             "--passes needs the typed graph: give the inputs' shapes with --shape NAME=D0,D1,...");
  if (!opt.dot_file.empty()) {
    write_file_atomically(opt.dot_file, to_dot(s, inputs));
    std::printf("wrote %s\n", opt.dot_file.c_str());
  }
  if (!opt.svg_file.empty()) {
    write_file_atomically(opt.svg_file, viz::dot_to_svg(to_dot(s, inputs)));
    std::printf("wrote %s (without shapes: give --shape for shapes, dtypes and fused groups)\n", opt.svg_file.c_str());
  }
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto opt = std::make_shared<InspectOptions>();
  CLI::App* cmd =
      app.add_subcommand("inspect", "Describe a model file (MXNet symbol JSON or ONNX) or a graph dump (ops, shapes, parameters, picture)");
  cmd->add_option("model", opt->symbol_file, "The *-symbol.json or *.onnx file, or a KILN_DUMP_GRAPHS .txt dump")->required();
  cmd->add_option("--shape", opt->shapes, "An input's shape, NAME=D0,D1,... (repeat per input)");
  cmd->add_option("--params", opt->params_file, "The matching .params file (parameter shapes)");
  cmd->add_option("--dot", opt->dot_file, "Write the graph in Graphviz dot form to FILE");
  cmd->add_option("--svg", opt->svg_file, "Draw the graph through Graphviz as an SVG FILE");
  cmd->add_flag("--collapse-params", opt->collapse_params,
                "In --svg: leave parameters and constants out (each op says how many it reads)");
  cmd->add_flag("--passes", opt->passes, "In --svg: draw the optimized graph beside the traced one");
  cmd->add_option("--pipeline", opt->pipeline, "With --passes: the passes to run (default: hybridize's, for the CPU)");
  cmd->callback([opt] { run_inspect(*opt); });
}

}  // namespace kiln::cli
