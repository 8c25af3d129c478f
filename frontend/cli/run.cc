// kiln run: one forward pass of a model file (MXNet export or ONNX) on .npy inputs.
//
//   kiln run model-symbol.json model-0000.params --input data=x.npy --output y.npy
//   kiln run resnet18.onnx --input x=img.npy --output y.npy       # ONNX: no params file
//   kiln run det1-symbol.json det1-0001.params --input data=img.npy --output box.npy --output prob.npy
//   kiln run det1-symbol.json det1-0001.params --input data=img.npy --output-prefix det1   # det1_0.npy, det1_1.npy
//
// The format is told by the file's content (formats::detect_model_format).
// Inputs are named as in the model file (--input NAME=FILE, once per input;
// MXNet models take them in the order given, ONNX models bind them by name). Prints each output's shape and its
// first values. Writing is all or nothing: either one --output per output,
// in order, or --output-prefix P, which writes P_0.npy, P_1.npy, ...; any
// other count of --output files is an error (no output is silently dropped).
//
//   kiln run model-symbol.json model-0000.params --input data=x.npy --dtype bf16
//
// --dtype bf16|fp16 runs the float32 model in mixed precision (the amp-cast
// policy of frontend/amp.h: convolutions and dense layers in the 16-bit type,
// parameters float32); bfloat16 outputs are written as float32 .npy files
// (NumPy has no bfloat16).
//
// --benchmark N then times N calls of the hybridized model (after one
// warm-up call) and prints `name value unit` lines: latency_ms_p50,
// latency_ms_p90, latency_ms_min, throughput_items_per_s (rows of the first
// input per second).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "frontend/formats/model_format.h"
#include "frontend/nd.h"
#include "frontend/nn/symbol_block.h"
#include "frontend/npy.h"

namespace kiln::cli {
namespace {

struct RunOptions {
  std::string symbol_file, params_file;
  std::vector<std::string> inputs;  // NAME=FILE
  std::vector<std::string> outputs;
  std::string output_prefix;
  std::string dtype = "float32";  // float32, bf16 or fp16
  int benchmark = 0;  // timed calls after the outputs are written
};

// N timed calls of the hybridized model after a warm-up call (which traces
// and plans), each waiting for its outputs; prints `name value unit` lines.
void benchmark_model(nn::SymbolBlock& net, std::span<const NDArray> inputs, int calls, std::optional<DType> amp) {
  net.hybridize({.amp = amp});
  auto call = [&] {
    for (NDArray& y : net(inputs)) y.wait_to_read();
  };
  call();
  std::vector<double> ms;
  for (int i = 0; i < calls; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    call();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double p) { return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * static_cast<double>(sorted.size())))]; };
  double total = 0;
  for (double t : ms) total += t;
  const int64_t rows = inputs.empty() || inputs[0].ndim() == 0 ? 1 : inputs[0].shape()[0];
  std::printf("latency_ms_p50 %.4g ms\nlatency_ms_p90 %.4g ms\nlatency_ms_min %.4g ms\nthroughput_items_per_s %.4g items/s\n",
              pct(0.5), pct(0.9), sorted.front(), static_cast<double>(rows) * calls / (total / 1000.0));
}

// The file for each output: ValueError unless the options name every one.
std::vector<std::string> output_files(const RunOptions& opt, size_t num_outputs) {
  KILN_CHECK(opt.outputs.empty() || opt.output_prefix.empty(), ValueError,
             "kiln run: give either --output (once per output) or --output-prefix, not both");
  std::vector<std::string> files = opt.outputs;
  if (!opt.output_prefix.empty()) {
    for (size_t i = 0; i < num_outputs; ++i) files.push_back(fmt::format("{}_{}.npy", opt.output_prefix, i));
  }
  KILN_CHECK(files.empty() || files.size() == num_outputs, ValueError,
             "kiln run: the model has {} output(s) but {} --output file(s) were given; give one --output per "
             "output, in order, or --output-prefix PREFIX to write PREFIX_0.npy ... PREFIX_{}.npy",
             num_outputs, files.size(), num_outputs - 1);
  return files;
}

void run_model(const RunOptions& opt) {
  std::vector<std::string> names;
  std::vector<NDArray> values;
  for (const std::string& text : opt.inputs) {
    size_t eq = text.find('=');
    KILN_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < text.size(), ValueError,
               "--input '{}': expected NAME=FILE.npy", text);
    names.push_back(text.substr(0, eq));
    values.push_back(npy::load(text.substr(eq + 1)));
  }
  KILN_CHECK(!names.empty(), ValueError, "kiln run: give at least one --input NAME=FILE.npy");
  KILN_CHECK(!opt.params_file.empty() ||
                 formats::detect_model_format(opt.symbol_file) != formats::ModelFormat::kMxnetSymbolJson,
             ValueError, "kiln run: {} is MXNet symbol JSON; give its .params file after it", opt.symbol_file);
  auto net = nn::SymbolBlock::imports(opt.symbol_file, names, opt.params_file);
  std::optional<DType> amp;
  if (opt.dtype != "float32") amp = opt.dtype == "bf16" || opt.dtype == "bfloat16" ? DType::kBfloat16 : DType::kFloat16;
  if (amp) net.hybridize({.amp = amp});
  std::vector<NDArray> outs = net(std::span<const NDArray>(values));
  std::vector<std::string> files = output_files(opt, outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    std::vector<float> v = outs[i].astype(DType::kFloat32).to_vector<float>();
    std::string head;
    for (size_t k = 0; k < std::min<size_t>(v.size(), 6); ++k) head += fmt::format("{}{:.6g}", k ? " " : "", v[k]);
    std::printf("output %zu: %s%s [%s%s]\n", i, std::string(dtype_short_name(outs[i].dtype())).c_str(),
                outs[i].shape().to_string().c_str(), head.c_str(), v.size() > 6 ? " ..." : "");
    if (i < files.size()) {
      npy::save(files[i], outs[i].dtype() == DType::kBfloat16 ? outs[i].astype(DType::kFloat32) : outs[i]);
      std::printf("wrote %s\n", files[i].c_str());
    }
  }
  if (opt.benchmark > 0) benchmark_model(net, values, opt.benchmark, amp);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run a model (MXNet symbol + params, or ONNX) on .npy inputs");
  cmd->add_option("model", opt->symbol_file, "The model: MXNet *-symbol.json, or ONNX *.onnx")->required();
  cmd->add_option("params", opt->params_file, "The *.params file (MXNet models; ONNX models hold their weights)");
  cmd->add_option("--input", opt->inputs, "NAME=FILE.npy, once per input")->required();
  cmd->add_option("--output", opt->outputs, "Write output k to the k-th FILE.npy (once per output)");
  cmd->add_option("--output-prefix", opt->output_prefix, "Write output k to PREFIX_k.npy");
  cmd->add_option("--dtype", opt->dtype, "Compute dtype: float32, or bf16/fp16 mixed precision (float32 parameters)")
      ->capture_default_str()
      ->check(CLI::IsMember({"float32", "bf16", "bfloat16", "fp16", "float16"}));
  cmd->add_option("--benchmark", opt->benchmark,
                  "Then time N calls of the hybridized model after a warm-up; prints latency_ms_p50, "
                  "throughput_items_per_s (rows of the first input per second), ...");
  cmd->callback([opt] { run_model(*opt); });
}

}  // namespace kiln::cli
