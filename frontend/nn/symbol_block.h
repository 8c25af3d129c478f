// SymbolBlock: a model loaded from a file, MXNet's symbol JSON (and params
// file) or ONNX, run as a HybridBlock (Gluon's SymbolBlock.imports).
//
//   auto net = nn::SymbolBlock::imports("resnet18.onnx", {"x"});  // weights are in the file
//
//   auto net = nn::SymbolBlock::imports("lenet-symbol.json", {"data"}, "lenet-0001.params");
//   NDArray y = net(nd::ones({1, 1, 28, 28}));                  // one input, one output
//   auto outs = net(std::vector<NDArray>{x});                    // several outputs (mtcnn: 2)
//   net.collect_params().names();   // the file's variable names ("conv1_weight", ...)
//   net.save_parameters("copy.params");
//   net.export_model("copy", 0);    // copy-symbol.json + copy-0000.params with arg:/aux: names
//
// Parameters: one nn::Parameter per variable that is not an input (nor a
// loss output's label, such as SoftmaxOutput's softmax_label), named as
// in the file (a name with '.' such as Gluon 2's "features.0.weight" is
// registered under nested empty HybridBlock children, so collect_params
// gives the same name). Aux states (variables an op mutates) are aux
// parameters. With a params file, each parameter takes the file's shape,
// dtype and values on `devices`; imports fails (ValueError listing them)
// when the file misses parameters or holds names the graph lacks. Without
// one, shapes come from `__shape__` hints and the ops' attributes (unknown
// dims 0, completed at the first forward), and initialize() draws values.
//
// forward builds the typed graph for the call's input types (mxnet::to_graph;
// cached per list of input types, so a new batch size builds once more) and
// evaluates it op by op with eval_graph (autograd records it). Inputs come in
// `input_names` order.
//
// ONNX (imports detects the format by content, formats::detect_model_format):
// the initializers the model learns (floating point) are the parameters, by
// their ONNX names, BatchNormalization's running statistics aux; a params
// file is refused (the weights are in the model). `input_names` name the
// model's graph inputs, every one, in the order forward takes them (empty:
// the model's own order). The typed graph comes from onnx::Model::to_graph,
// cached per list of input types; values it computed at import (folded shape
// arithmetic) are constants of that graph. symbol() and export_model are
// MXNet-only for now (NotSupported on an ONNX block).
//
// A SymbolBlock is a handle like every Block: copies share the state.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "frontend/nn/block.h"
#include "ir/graph.h"
#include "frontend/formats/mxnet/symbol_json.h"
#include "frontend/formats/onnx/model.h"

namespace kiln::nn {

class SymbolBlock : public HybridBlock {
 public:
  // Parameters without values (initialize() draws them). ValueError when an
  // input name is not a variable of the symbol.
  SymbolBlock(mxnet::Symbol symbol, std::vector<std::string> input_names);
  SymbolBlock(const SymbolBlock&) = default;
  SymbolBlock& operator=(const SymbolBlock&) = default;

  static SymbolBlock imports(const std::string& symbol_file, std::vector<std::string> input_names,
                             const std::string& params_file = "",
                             const std::vector<Device>& devices = {Device::cpu(0)});

  NDArray forward(const NDArray& x) override;  // one input and one output (ValueError otherwise)
  std::vector<NDArray> forward(std::span<const NDArray> xs) override;

  const mxnet::Symbol& symbol() const;  // NotSupported for an ONNX model
  const onnx::Model* onnx_model() const;  // null for an MXNet model
  const std::vector<std::string>& input_names() const;
  // The typed graph for inputs of these types (cached); completes the shapes
  // of parameters that were still partly unknown.
  const ir::Graph& graph_for(std::span<const TensorType> input_types);
  // The parameter of file variable `name` (ValueError naming it when absent).
  Parameter param(std::string_view name) const;

  // Writes PREFIX-symbol.json (the symbol as imported, canonical op names)
  // and PREFIX-EPOCH.params with arg:/aux: names; returns the two paths.
  std::pair<std::string, std::string> export_model(const std::string& prefix, int epoch = 0) const override;

  std::string to_string() const override;

 private:
  struct State;
  // Parameters take their shapes and dtypes from `values` when given (and
  // every one must be there), else from the symbol.
  SymbolBlock(mxnet::Symbol symbol, std::vector<std::string> input_names,
              const std::map<std::string, NDArray, std::less<>>* values);
  SymbolBlock(onnx::Model model, std::vector<std::string> input_names, const std::vector<Device>& devices);
  std::shared_ptr<State> state_;
};

}  // namespace kiln::nn
