// Exported models on disk: MXNet's `PREFIX-symbol.json` + `PREFIX-NNNN.params`
// pair, whose params file names each array `arg:NAME` (a learned parameter)
// or `aux:NAME` (an aux state such as BatchNorm's moving_mean).
//
//   mxnet::export_graph("model", 0, g, values);   // model-symbol.json, model-0000.params
//   mxnet::Symbol s = mxnet::load_symbol_json("model-symbol.json");
//   auto params = mxnet::load_symbol_params("model-0000.params", s, {"data"});   // name -> NDArray
//
// Loading strips the prefixes (files saved without them, by save_parameters,
// load too) and checks every name against the symbol's variables: names that
// match no variable, data inputs stored as parameters, an `arg:`/`aux:`
// prefix that contradicts the graph (aux = mutated by an op) and repeated
// names are all listed in one ValueError naming the file. Variables the file
// lacks are not an error here (SymbolBlock reports them when it runs).
// Truncated and corrupt files fail in params_io with the byte offset.
#pragma once

#include <map>
#include <span>
#include <string>

#include "frontend/formats/mxnet/params_io.h"
#include "ir/graph.h"
#include "frontend/formats/mxnet/symbol_json.h"

namespace kiln::mxnet {

// The arrays of g's param and aux nodes, in graph order, named "arg:NAME" /
// "aux:NAME". ValueError listing the params `values` lacks.
NamedArrays prefixed_params(const ir::Graph& g, const ArrayMap& values);
void save_graph_params(const std::string& path, const ir::Graph& g, const ArrayMap& values);

// The params file for `symbol` by variable name (see above).
ArrayMap load_symbol_params(const std::string& path, const mxnet::Symbol& symbol,
                            std::span<const std::string> input_names);
// The same on NamedArrays already read; `source` names them in errors.
ArrayMap match_symbol_params(NamedArrays arrays, std::string_view source, const mxnet::Symbol& symbol,
                             std::span<const std::string> input_names);

// Writes `text` to `path` (IOError naming it on failure).
void write_text_file(const std::string& path, std::string_view text);

// "PREFIX-symbol.json" (mxnet::to_json) and "PREFIX-EPOCH.params" (4 digits), as
// Gluon's HybridBlock.export writes them; returns the two paths.
std::pair<std::string, std::string> export_graph(const std::string& prefix, int epoch, const ir::Graph& g,
                                                 const ArrayMap& values);

}  // namespace kiln::mxnet
