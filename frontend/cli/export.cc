// kiln export: a model file (MXNet symbol + params, or ONNX) written as ONNX.
//
//   kiln export model-symbol.json model-0000.params --shape data=1,1,28,28 --output model.onnx
//   kiln export model.onnx --shape x=8,3,224,224 --output fixed.onnx --opset 13
//
// The model is imported (nn::SymbolBlock::imports), hybridized and run once
// on zeros of the given shapes (--shape NAME=D0,D1,..., once per input, in
// the order the model takes them; float32), and the traced graph is written
// by nn::export_onnx: fixed shapes, the opset asked for (13 to 17, default
// 17), checked by libonnx before it is written; --dynamic-batch makes dim 0
// of the inputs and outputs the symbol N.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "frontend/formats/model_format.h"
#include "frontend/nd.h"
#include "frontend/nn/export_onnx.h"
#include "frontend/nn/symbol_block.h"

namespace kiln::cli {
namespace {

struct ExportOptions {
  std::string model_file, params_file, output;
  std::vector<std::string> shapes;  // NAME=D0,D1,...
  int opset = onnx::kExportOpset;
  bool dynamic_batch = false;
};

void run_export(const ExportOptions& opt) {
  std::vector<std::string> names;
  std::vector<NDArray> inputs;
  for (const std::string& text : opt.shapes) {
    size_t eq = text.find('=');
    KILN_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < text.size(), ValueError,
               "--shape '{}': expected NAME=D0,D1,... (e.g. data=1,3,224,224)", text);
    names.push_back(text.substr(0, eq));
    inputs.push_back(nd::zeros(parse_shape(text.substr(eq + 1))));
  }
  KILN_CHECK(!names.empty(), ValueError, "kiln export: give --shape NAME=D0,D1,... for every input of the model");
  KILN_CHECK(!opt.params_file.empty() ||
                 formats::detect_model_format(opt.model_file) != formats::ModelFormat::kMxnetSymbolJson,
             ValueError, "kiln export: {} is MXNet symbol JSON; give its .params file after it", opt.model_file);
  auto net = nn::SymbolBlock::imports(opt.model_file, names, opt.params_file);
  net.hybridize();
  for (NDArray& y : net(std::span<const NDArray>(inputs))) y.wait_to_read();
  nn::export_onnx(net, opt.output, {.opset = opt.opset, .dynamic_batch = opt.dynamic_batch});
  std::printf("wrote %s (ONNX opset %d%s)\n", opt.output.c_str(), opt.opset, opt.dynamic_batch ? ", batch N" : "");
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto opt = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand("export", "Write a model (MXNet symbol + params, or ONNX) as an ONNX model");
  cmd->add_option("model", opt->model_file, "The model: MXNet *-symbol.json, or ONNX *.onnx")->required();
  cmd->add_option("params", opt->params_file, "The *.params file (MXNet models)");
  cmd->add_option("--shape", opt->shapes, "An input's shape, NAME=D0,D1,... (once per input)")->required();
  cmd->add_option("--output,-o", opt->output, "The .onnx file to write")->required();
  cmd->add_option("--opset", opt->opset, "ONNX opset, 13 to 17 (default 17)");
  cmd->add_flag("--dynamic-batch", opt->dynamic_batch, "Write dim 0 of the inputs and outputs as the symbol N");
  cmd->callback([opt] { run_export(*opt); });
}

}  // namespace kiln::cli
