// MXNet symbol JSON: parsing every layout, typing into a Graph, writing back,
// and clear errors for bad files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ir/ops/conv.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"
#include "frontend/formats/mxnet/symbol_json.h"
#include "tests/test_util.h"

#ifndef KILN_TEST_DATA_DIR
#error "tests/CMakeLists.txt passes KILN_TEST_DATA_DIR"
#endif
#ifndef KILN_EXTRA_MXNET_MODELS
#define KILN_EXTRA_MXNET_MODELS ""
#endif

namespace kiln::mxnet {
using namespace kiln::ir;
namespace {

using test::error_of;

TensorType f32(Shape s) { return {s, DType::kFloat32}; }

// A Gluon-1.x-style export (MXNet 1.4.1, oneDNN build: Pooling lists 2
// outputs in node_row_ptr), written for this test.
const char* kGluonConvNet = R"J({
  "nodes": [
    {"op": "null", "name": "data", "inputs": []},
    {"op": "null", "name": "conv0_weight", "attrs": {"__dtype__": "0", "__init__": "xavier", "__lr_mult__": "1.0", "__shape__": "(4, 0, 3, 3)", "__storage_type__": "0", "__wd_mult__": "1.0"}, "inputs": []},
    {"op": "null", "name": "conv0_bias", "attrs": {"__dtype__": "0", "__init__": "zeros", "__shape__": "(4,)"}, "inputs": []},
    {"op": "Convolution", "name": "conv0_fwd", "attrs": {"dilate": "(1, 1)", "kernel": "(3, 3)", "layout": "NCHW", "no_bias": "False", "num_filter": "4", "num_group": "1", "pad": "(1, 1)", "stride": "(1, 1)"}, "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]},
    {"op": "Activation", "name": "conv0_relu_fwd", "attrs": {"act_type": "relu"}, "inputs": [[3, 0, 0]]},
    {"op": "Pooling", "name": "pool0_fwd", "attrs": {"global_pool": "False", "kernel": "(2, 2)", "pad": "(0, 0)", "pool_type": "max", "pooling_convention": "valid", "stride": "(2, 2)"}, "inputs": [[4, 0, 0]]},
    {"op": "null", "name": "bn0_gamma", "inputs": []},
    {"op": "null", "name": "bn0_beta", "inputs": []},
    {"op": "null", "name": "bn0_running_mean", "inputs": []},
    {"op": "null", "name": "bn0_running_var", "inputs": []},
    {"op": "BatchNorm", "name": "bn0_fwd", "attrs": {"axis": "1", "eps": "1e-05", "fix_gamma": "False", "momentum": "0.9", "use_global_stats": "False"}, "inputs": [[5, 0, 0], [6, 0, 0], [7, 0, 0], [8, 0, 1], [9, 0, 1]]},
    {"op": "Flatten", "name": "flatten0", "inputs": [[10, 0, 0]]},
    {"op": "null", "name": "dense0_weight", "inputs": []},
    {"op": "null", "name": "dense0_bias", "inputs": []},
    {"op": "FullyConnected", "name": "dense0_fwd", "attrs": {"flatten": "True", "no_bias": "False", "num_hidden": "10"}, "inputs": [[11, 0, 0], [12, 0, 0], [13, 0, 0]]}
  ],
  "arg_nodes": [0, 1, 2, 6, 7, 8, 9, 12, 13],
  "node_row_ptr": [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 14, 15, 16, 17, 18],
  "heads": [[14, 0, 0]],
  "attrs": {"mxnet_version": ["int", 10401]}
})J";

// A pre-0.9 file: `param`/`attr` keys, 2-element inputs, no node_row_ptr, no
// top-level attrs, legacy hidden keys (as in MXNet's save_000800.json).
const char* kLegacy = R"J({
  "nodes": [
    {"op": "null", "param": {}, "name": "data", "inputs": [], "backward_source_id": -1},
    {"op": "null", "param": {}, "name": "fc1_weight", "inputs": [], "backward_source_id": -1, "attr": {"ctx_group": "stage1", "weight_lr_mult": "1.2"}},
    {"op": "null", "param": {}, "name": "fc1_bias", "inputs": [], "backward_source_id": -1},
    {"op": "FullyConnected", "param": {"no_bias": "False", "num_hidden": "8"}, "name": "fc1", "inputs": [[0, 0], [1, 0], [2, 0]], "backward_source_id": -1, "attr": {"ctx_group": "stage1", "lr_mult": "0.2", "weight_lr_mult": "1.2"}},
    {"op": "LeakyReLU", "param": {"act_type": "leaky", "lower_bound": "0.125", "slope": "0.1", "upper_bound": "0.334"}, "name": "lrelu1", "inputs": [[3, 0]], "backward_source_id": -1},
    {"op": "SoftmaxActivation", "param": {"mode": "instance"}, "name": "prob", "inputs": [[4, 0]], "backward_source_id": -1}
  ],
  "arg_nodes": [0, 1, 2],
  "heads": [[5, 0]]
})J";

std::string with_node(std::string_view nodes, std::string_view heads = "[[1, 0, 0]]") {
  return fmt::format(R"J({{"nodes": [{}], "arg_nodes": [0], "heads": {}}})J", nodes, heads);
}

TEST(SymbolJson, ParsesGluonExport) {
  Symbol s = parse_symbol_json(kGluonConvNet, "convnet.json");
  EXPECT_EQ(s.mxnet_version, 10401);
  EXPECT_EQ(s.nodes.size(), 15u);
  EXPECT_EQ(s.nodes[5].num_outputs, 2);  // oneDNN Pooling
  EXPECT_EQ(s.nodes[3].def->id, OpId::kConvolution);
  EXPECT_EQ(s.nodes[1].hidden.at("__shape__"), "(4, 0, 3, 3)");
  EXPECT_TRUE(s.nodes[1].attrs.empty());
  EXPECT_EQ(s.list_auxiliary_states(), (std::vector<std::string>{"bn0_running_mean", "bn0_running_var"}));
  EXPECT_EQ(s.list_arguments().size(), 7u);
  EXPECT_EQ(s.heads, (std::vector<SymbolEntry>{{14, 0, 0}}));
}

TEST(SymbolJson, TypesAGluonExportDeducingParamShapes) {
  Symbol s = parse_symbol_json(kGluonConvNet, "convnet.json");
  std::vector<std::string> inputs{"data"};
  Graph g = to_graph(s, {{"data", f32({2, 3, 8, 8})}}, inputs);
  EXPECT_NO_THROW(verify(g));
  EXPECT_EQ(g.type(g.outputs()[0]).shape, (Shape{2, 10}));
  EXPECT_EQ(g.type({*g.find("conv0_weight"), 0}).shape, (Shape{4, 3, 3, 3}));  // partial __shape__ + deduction
  EXPECT_EQ(g.type({*g.find("conv0_bias"), 0}).shape, (Shape{4}));             // complete __shape__
  EXPECT_EQ(g.type({*g.find("bn0_running_var"), 0}).shape, (Shape{4}));
  EXPECT_EQ(g.node(*g.find("bn0_running_var")).kind, NodeKind::kAux);
  EXPECT_EQ(g.node(*g.find("bn0_gamma")).kind, NodeKind::kParam);
  EXPECT_EQ(g.node(*g.find("data")).kind, NodeKind::kInput);
  EXPECT_EQ(g.type({*g.find("dense0_weight"), 0}).shape, (Shape{10, 64}));

  EXPECT_EQ(variable_shape_hint(s, 1), (Shape{4, 0, 3, 3}));
  EXPECT_EQ(variable_shape_hint(s, 12), (Shape{10, 0}));
  EXPECT_EQ(variable_shape_hint(s, 8), (Shape{0}));
  EXPECT_EQ(variable_shape_hint(s, 0), std::nullopt);
}

TEST(SymbolJson, ParsesLegacyLayoutAndLowersSoftmaxActivation) {
  Symbol s = parse_symbol_json(kLegacy, "legacy.json");
  EXPECT_EQ(s.mxnet_version, 800);
  EXPECT_EQ(s.nodes[3].num_outputs, -1);
  EXPECT_EQ(s.nodes[3].attrs.size(), 2u);  // hidden keys moved aside, in MXNet's current form
  EXPECT_EQ(s.nodes[3].hidden, (AttrMap{{"__ctx_group__", "stage1"}, {"__lr_mult__", "0.2"}}));
  // FullyConnected's inputs are unnamed in Kiln (2 or 3): weight_lr_mult is dropped.
  EXPECT_EQ(s.nodes[1].hidden, (AttrMap{{"__ctx_group__", "stage1"}}));
  EXPECT_EQ(s.nodes[5].def, nullptr);  // legacy op
  std::vector<std::string> inputs{"data"};
  Graph g = to_graph(s, {{"data", f32({3, 5})}}, inputs);
  EXPECT_NO_THROW(verify(g));
  const Node& prob = g.node(g.outputs()[0].node);
  EXPECT_EQ(prob.name, "prob");
  EXPECT_EQ(prob.op, OpId::kSoftmax);
  EXPECT_EQ(g.type(g.outputs()[0]).shape, (Shape{3, 8}));

  // instance mode on 4-d data: softmax over everything but the batch axis.
  std::string text = R"J({"nodes": [{"op": "null", "name": "x", "inputs": []},
    {"op": "SoftmaxActivation", "name": "p", "attrs": {"mode": "instance"}, "inputs": [[0, 0, 0]]},
    {"op": "SoftmaxActivation", "name": "c", "attrs": {"mode": "channel"}, "inputs": [[0, 0, 0]]}],
    "arg_nodes": [0], "heads": [[1, 0, 0], [2, 0, 0]]})J";
  std::vector<std::string> x{"x"};
  Graph g4 = to_graph(parse_symbol_json(text), {{"x", f32({2, 3, 4, 5})}}, x);
  EXPECT_EQ(g4.type(g4.outputs()[0]).shape, (Shape{2, 3, 4, 5}));
  EXPECT_EQ(g4.node(g4.outputs()[0].node).op, OpId::kReshape);
  EXPECT_EQ(g4.node(g4.outputs()[1].node).attrs.as<SoftmaxAttrs>().axis, 1);
}

TEST(SymbolJson, PreNineFilesGetTheirAuxVariables) {
  // MXNet < 0.9 stored no aux states: BatchNorm has 3 inputs; the loader adds
  // bn0_moving_mean and bn0_moving_var before it (as UpgradeJSON_000800_000900).
  std::string text = R"J({"nodes": [{"op": "null", "name": "data", "inputs": []},
    {"op": "null", "name": "bn0_gamma", "inputs": []}, {"op": "null", "name": "bn0_beta", "inputs": []},
    {"op": "BatchNorm", "name": "bn0", "param": {"eps": "0.001", "fix_gamma": "True"}, "attr": {"gamma_wd_mult": "0"}, "inputs": [[0, 0], [1, 0], [2, 0]]},
    {"op": "_Plus", "name": "plus0", "inputs": [[3, 0], [0, 0]]}],
    "arg_nodes": [0, 1, 2], "heads": [[4, 0], [3, 0]]})J";
  Symbol s = parse_symbol_json(text, "old.json");
  ASSERT_EQ(s.nodes.size(), 7u);
  EXPECT_EQ(s.nodes[3].name, "bn0_moving_mean");
  EXPECT_EQ(s.nodes[4].name, "bn0_moving_var");
  EXPECT_EQ(s.list_auxiliary_states(), (std::vector<std::string>{"bn0_moving_mean", "bn0_moving_var"}));
  EXPECT_EQ(s.nodes[5].inputs.size(), 5u);
  EXPECT_EQ(s.nodes[1].hidden, (AttrMap{{"__wd_mult__", "0"}}));  // gamma_wd_mult moved to bn0_gamma
  EXPECT_TRUE(s.nodes[5].hidden.empty());
  EXPECT_EQ(s.nodes[6].inputs[0].node, 5);
  EXPECT_EQ(s.heads, (std::vector<SymbolEntry>{{6, 0, 0}, {5, 0, 0}}));
  std::vector<std::string> in{"data"};
  Graph g = to_graph(s, {{"data", f32({2, 3, 4})}}, in);
  EXPECT_EQ(g.node(*g.find("bn0_moving_var")).kind, NodeKind::kAux);
  // A file that says it is newer must list every input.
  std::string newer = text.substr(0, text.size() - 1) + R"J(, "attrs": {"mxnet_version": ["int", 10000]}})J";
  EXPECT_CONTAINS(error_of<ValueError>([&] { parse_symbol_json(newer, "new.json"); }), "expected 5 input(s), got 3");
}

TEST(SymbolJson, LossOutputsLowerForInferenceWithoutTheirLabels) {
  // A Module checkpoint's head (as MXNet's save_000800.json): SoftmaxOutput reads a label.
  std::string text = R"J({"nodes": [{"op": "null", "name": "data", "inputs": []},
    {"op": "null", "name": "fc_weight", "inputs": []}, {"op": "null", "name": "fc_bias", "inputs": []},
    {"op": "FullyConnected", "name": "fc", "param": {"num_hidden": "3"}, "inputs": [[0, 0], [1, 0], [2, 0]]},
    {"op": "null", "name": "softmax_label", "inputs": []},
    {"op": "SoftmaxOutput", "name": "softmax", "param": {"grad_scale": "1", "ignore_label": "-1", "multi_output": "False",
     "normalization": "null", "out_grad": "False", "preserve_shape": "False", "use_ignore": "False"},
     "inputs": [[3, 0], [4, 0]]},
    {"op": "null", "name": "reg_label", "inputs": []},
    {"op": "LogisticRegressionOutput", "name": "reg", "inputs": [[3, 0], [6, 0]]},
    {"op": "SoftmaxOutput", "name": "nolabel", "attrs": {"multi_output": "True"}, "inputs": [[3, 0]]}],
    "arg_nodes": [0, 1, 2, 4, 6], "heads": [[5, 0], [7, 0], [8, 0]]})J";
  Symbol s = parse_symbol_json(text, "module.json");
  EXPECT_TRUE(s.nodes[4].is_label);
  EXPECT_TRUE(s.nodes[6].is_label);
  EXPECT_FALSE(s.nodes[0].is_label);
  std::vector<std::string> in{"data"};
  Graph g = to_graph(s, {{"data", f32({2, 5})}}, in);
  EXPECT_FALSE(g.find("softmax_label").has_value());
  EXPECT_FALSE(g.find("reg_label").has_value());
  EXPECT_EQ(g.node(g.outputs()[0].node).op, OpId::kSoftmax);
  EXPECT_EQ(g.node(g.outputs()[1].node).op, OpId::kSigmoid);
  EXPECT_EQ(g.node(g.outputs()[2].node).attrs.as<SoftmaxAttrs>().axis, 1);
  EXPECT_EQ(g.type(g.outputs()[0]).shape, (Shape{2, 3}));
  EXPECT_NO_THROW(verify(g));
  // An unknown attribute names the node.
  std::string bad = text;
  bad.replace(bad.find("\"grad_scale\""), 12, "\"grad_scalp\"");
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    to_graph(parse_symbol_json(bad), {{"data", f32({2, 5})}}, in);
                  }),
                  "node 'softmax': SoftmaxOutput: unknown attribute 'grad_scalp'");
}

TEST(SymbolJson, AliasesResolve) {
  for (const char* op : {"_Plus", "elemwise_add", "ElementWiseSum"}) {
    SCOPED_TRACE(op);
    std::string attrs = std::string(op) == "ElementWiseSum" ? R"J("attrs": {"num_args": "2"},)J" : "";
    std::string text = fmt::format(R"J({{"nodes": [{{"op": "null", "name": "a", "inputs": []}},
      {{"op": "null", "name": "b", "inputs": []}},
      {{"op": "{}", "name": "s", {} "inputs": [[0, 0, 0], [1, 0, 0]]}}], "arg_nodes": [0, 1], "heads": [[2, 0, 0]]}})J",
                                   op, attrs);
    std::vector<std::string> in{"a", "b"};
    Graph g = to_graph(parse_symbol_json(text), {{"a", f32({2})}, {"b", f32({2})}}, in);
    EXPECT_EQ(g.type(g.outputs()[0]).shape, (Shape{2}));
  }
}

Graph round_trip_graph() {
  Graph g;
  Entry x = g.add_input("data", f32({2, 3, 8, 8}));
  ConvolutionAttrs conv{.kernel = {3, 3}, .pad = {1, 1}, .num_filter = 4, .no_bias = true};
  Entry w = g.add_param("conv0_weight", f32({4, 3, 3, 3}));
  Entry c = g.add_op(OpId::kConvolution, OpAttrs::make(conv), std::vector<Entry>{x, w}, "conv0")[0];
  Entry gamma = g.add_param("bn0_gamma", f32({4}));
  Entry beta = g.add_param("bn0_beta", f32({4}));
  Entry mean = g.add_param("bn0_moving_mean", f32({4}), true);
  Entry var = g.add_param("bn0_moving_var", f32({4}), true);
  BatchNormAttrs bn{.eps = 2e-5, .fix_gamma = false};
  Entry b = g.add_op(OpId::kBatchNorm, OpAttrs::make(bn), std::vector<Entry>{c, gamma, beta, mean, var}, "bn0")[0];
  Entry slope = g.add_param("prelu0_gamma", f32({4}));
  LeakyReLUAttrs prelu{.act_type = LeakyType::kPrelu};
  Entry r = g.add_op(OpId::kLeakyReLU, OpAttrs::make(prelu), std::vector<Entry>{b, slope}, "prelu0")[0];
  PoolingAttrs pool{.kernel = {2, 2}, .pooling_convention = "full", .stride = {2, 2}};
  Entry p = g.add_op(OpId::kPooling, OpAttrs::make(pool), std::vector<Entry>{r}, "pool0")[0];
  SplitAttrs split{.num_outputs = 2, .axis = 1};
  auto halves = g.add_op(OpId::kSplit, OpAttrs::make(split), std::vector<Entry>{p}, "split0");
  Entry sum = g.add_op(OpId::kElemwiseAdd, {}, std::vector<Entry>{halves[0], halves[1]}, "sum0")[0];
  Entry scaled =
      g.add_op(OpId::kMulScalar, OpAttrs::make(ScalarAttrs{.scalar = 0.0078125}), std::vector<Entry>{sum}, "scale0")[0];
  Entry drop = g.add_op(OpId::kDropout, OpAttrs::make(DropoutAttrs{.p = 0.25}), std::vector<Entry>{scaled}, "drop0")[0];
  Entry f = g.add_op(OpId::kFlatten, {}, std::vector<Entry>{drop}, "flatten0")[0];
  Entry fw = g.add_param("fc0_weight", f32({10, 32}));
  Entry fb = g.add_param("fc0_bias", f32({10}));
  Entry fc = g.add_op(OpId::kFullyConnected, OpAttrs::make(FullyConnectedAttrs{.num_hidden = 10}),
                      std::vector<Entry>{f, fw, fb}, "fc0")[0];
  Entry act =
      g.add_op(OpId::kActivation, OpAttrs::make(ActivationAttrs{ActType::kTanh}), std::vector<Entry>{fc}, "tanh0")[0];
  g.set_outputs({act, halves[1]});
  return g;
}

TypeMap types_of(const Graph& g) {
  TypeMap types;
  for (const Node& n : g.nodes())
    if (!n.is_op()) types[n.name] = n.types[0];
  return types;
}

TEST(SymbolJson, GraphRoundTripsThroughJson) {
  Graph g = round_trip_graph();
  std::string json = to_json(g);
  Symbol s = parse_symbol_json(json, "round trip");
  EXPECT_EQ(s.mxnet_version, kExportMxnetVersion);
  EXPECT_EQ(s.list_auxiliary_states(), (std::vector<std::string>{"bn0_moving_mean", "bn0_moving_var"}));
  std::vector<std::string> inputs{"data"};
  Graph back = to_graph(s, types_of(g), inputs);
  EXPECT_EQ(back.to_text(), g.to_text()) << json;
  // Param types also come back from the __shape__/__dtype__ hints alone.
  Graph hinted = to_graph(s, {{"data", f32({2, 3, 8, 8})}}, inputs);
  EXPECT_EQ(hinted.to_text(), g.to_text());
  // And once more: to_json of the re-read graph is the same text.
  EXPECT_EQ(to_json(back), json);
}

TEST(SymbolJson, WritesMxnetLayout) {
  Graph g = round_trip_graph();
  auto j = nlohmann::json::parse(to_json(g));
  EXPECT_EQ(j["attrs"]["mxnet_version"], nlohmann::json::parse(R"J(["int", 10901])J"));
  EXPECT_EQ(j["node_row_ptr"].size(), g.size() + 1);
  EXPECT_EQ(j["arg_nodes"].size(), g.nodes_of_kind(NodeKind::kInput).size() + g.nodes_of_kind(NodeKind::kParam).size() +
                                       g.nodes_of_kind(NodeKind::kAux).size());
  for (auto& n : j["nodes"]) {
    if (n["name"] == "bn0") {
      EXPECT_EQ(n["inputs"][3], nlohmann::json::parse("[5, 0, 1]"));  // mutated: version 1, as MXNet writes
      EXPECT_EQ(n["attrs"]["eps"], "2e-05");
    }
    if (n["name"] == "data") {
      EXPECT_FALSE(n.contains("attrs"));
    }
    if (n["name"] == "conv0_weight") {
      EXPECT_EQ(n["attrs"]["__shape__"], "(4, 3, 3, 3)");
    }
    nlohmann::json attrs = n.value("attrs", nlohmann::json::object());
    for (auto& [k, v] : attrs.items()) EXPECT_TRUE(v.is_string()) << k;
  }
  EXPECT_EQ(j["heads"], nlohmann::json::parse("[[19, 0, 0], [11, 1, 0]]"));
}

TEST(SymbolJson, KilnOnlyAttributesAreNotWritten) {
  Graph g;
  Entry x = g.add_input("x", f32({4}));
  DropoutAttrs d{.p = 0.5, .seed = 1234, .offset = 77};
  g.set_outputs({g.add_op(OpId::kDropout, OpAttrs::make(d), std::vector<Entry>{x}, "drop")[0]});
  std::string json = to_json(g);
  EXPECT_EQ(json.find("seed"), std::string::npos) << json;
  EXPECT_EQ(json.find("offset"), std::string::npos) << json;
}

TEST(SymbolJson, PoolingDilateIsDroppedWhenOneAndRefusedOtherwise) {
  // MXNet's Pooling has no dilate: an all-1s one is left out, a larger one refused.
  for (int64_t d : {1, 2}) {
    Graph g;
    Entry x = g.add_input("x", f32({1, 1, 8, 8}));
    PoolingAttrs p{.kernel = {2, 2}, .dilate = {d, d}};
    g.set_outputs({g.add_op(OpId::kPooling, OpAttrs::make(p), std::vector<Entry>{x}, "pool")[0]});
    if (d == 1) {
      std::string json = to_json(g);
      EXPECT_EQ(json.find("dilate"), std::string::npos) << json;
    } else {
      std::string e = error_of<NotSupported>([&] { to_json(g); });
      EXPECT_CONTAINS(e, "'pool'");
      EXPECT_CONTAINS(e, "dilate=(2, 2)");
    }
  }
}

TEST(SymbolJson, ExtraOutputsAreAcceptedWhenUnread) {
  // Pooling lists 2 outputs; reading the second (the oneDNN workspace) fails clearly.
  std::string text = R"J({"nodes": [{"op": "null", "name": "x", "inputs": []},
    {"op": "Pooling", "name": "pool", "attrs": {"kernel": "(2, 2)", "stride": "(2, 2)"}, "inputs": [[0, 0, 0]]}],
    "arg_nodes": [0], "node_row_ptr": [0, 1, 3], "heads": [[1, 1, 0]]})J";
  Symbol s = parse_symbol_json(text);
  std::vector<std::string> in{"x"};
  std::string e = error_of<ValueError>([&] { to_graph(s, {{"x", f32({1, 1, 4, 4})}}, in); });
  EXPECT_CONTAINS(e, "output 1 of 'pool'");
  EXPECT_CONTAINS(e, "Pooling has 1");
}

TEST(SymbolJson, UnknownOpNamesOpAndNode) {
  std::string e = error_of<NotSupported>([&] {
    parse_symbol_json(with_node(R"J({"op": "null", "name": "x", "inputs": []},
      {"op": "_contrib_Frobnicate", "name": "frob0", "inputs": [[0, 0, 0]]})J"));
  });
  EXPECT_CONTAINS(e, "_contrib_Frobnicate");
  EXPECT_CONTAINS(e, "frob0");
}

TEST(SymbolJson, BadReferencesNameTheNode) {
  auto parse = [](std::string_view nodes, std::string_view heads = "[[1, 0, 0]]") {
    return error_of<ValueError>([&] { parse_symbol_json(with_node(nodes, heads), "bad.json"); });
  };
  // A later node (a cycle or forward reference), itself, a missing node.
  std::string e = parse(R"J({"op": "null", "name": "x", "inputs": []},
      {"op": "exp", "name": "e0", "inputs": [[2, 0, 0]]}, {"op": "exp", "name": "e1", "inputs": [[1, 0, 0]]})J");
  EXPECT_CONTAINS(e, "bad.json");
  EXPECT_CONTAINS(e, "'e0'");
  EXPECT_CONTAINS(e, "does not come before it");
  EXPECT_CONTAINS(parse(R"J({"op": "null", "name": "x", "inputs": []},
      {"op": "exp", "name": "loop", "inputs": [[1, 0, 0]]})J"),
                  "'loop'");
  EXPECT_CONTAINS(parse(R"J({"op": "null", "name": "x", "inputs": []},
      {"op": "exp", "name": "e0", "inputs": [[99, 0, 0]]})J"),
                  "does not exist");
  // Wrong arity, malformed entries, negative ids.
  e = parse(R"J({"op": "null", "name": "x", "inputs": []},
      {"op": "elemwise_add", "name": "add0", "inputs": [[0, 0, 0]]})J");
  EXPECT_CONTAINS(e, "'add0'");
  EXPECT_CONTAINS(e, "expected 2 input(s), got 1");
  EXPECT_CONTAINS(parse(R"J({"op": "null", "name": "x", "inputs": []},
      {"op": "exp", "name": "e0", "inputs": [[0, 0, 0, 0]]})J"),
                  "'e0'");
  EXPECT_CONTAINS(parse(R"J({"op": "null", "name": "x", "inputs": []},
      {"op": "exp", "name": "e0", "inputs": [[-1, 0]]})J"),
                  "out of range");
  EXPECT_CONTAINS(parse(R"J({"op": "null", "name": "x", "inputs": [[0, 0]]},
      {"op": "exp", "name": "e0", "inputs": [[0, 0]]})J"),
                  "variable");
  EXPECT_CONTAINS(parse(R"J({"op": "null", "name": "x", "inputs": []},
      {"op": "exp", "inputs": [[0, 0]]})J"),
                  "'name' is missing");
  // Heads and arg_nodes.
  EXPECT_CONTAINS(parse(R"J({"op": "null", "name": "x", "inputs": []},
      {"op": "exp", "name": "e0", "inputs": [[0, 0]]})J",
                        "[[7, 0, 0]]"),
                  "head 0");
  EXPECT_CONTAINS(parse(R"J({"op": "null", "name": "x", "inputs": []},
      {"op": "exp", "name": "e0", "inputs": [[0, 0]]})J",
                        "[]"),
                  "heads");
  EXPECT_CONTAINS(error_of<ValueError>([] {
                    parse_symbol_json(R"J({"nodes": [{"op": "null", "name": "x", "inputs": []},
      {"op": "exp", "name": "e0", "inputs": [[0, 0]]}], "arg_nodes": [1], "heads": [[1, 0]]})J");
                  }),
                  "not a variable");
  // node_row_ptr that disagrees with the nodes; an output index beyond it.
  EXPECT_CONTAINS(error_of<ValueError>([] {
                    parse_symbol_json(R"J({"nodes": [{"op": "null", "name": "x", "inputs": []},
      {"op": "exp", "name": "e0", "inputs": [[0, 0]]}], "arg_nodes": [0], "node_row_ptr": [0, 1], "heads": [[1, 0]]})J");
                  }),
                  "node_row_ptr");
  EXPECT_CONTAINS(error_of<ValueError>([] {
                    parse_symbol_json(R"J({"nodes": [{"op": "null", "name": "x", "inputs": []},
      {"op": "exp", "name": "e0", "inputs": [[0, 0]]}], "arg_nodes": [0], "node_row_ptr": [0, 1, 2], "heads": [[1, 3]]})J");
                  }),
                  "reads output 3 of node 1 'e0', which has 1 output");
}

TEST(SymbolJson, InvalidJsonGivesTheByteOffset) {
  std::string e = error_of<ValueError>([] { parse_symbol_json(R"J({"nodes": [}, "heads": []})J", "broken.json"); });
  EXPECT_CONTAINS(e, "broken.json");
  EXPECT_CONTAINS(e, "invalid JSON at byte 11");
  EXPECT_CONTAINS(error_of<ValueError>([] { parse_symbol_json("[1, 2]"); }), "object");
  EXPECT_CONTAINS(error_of<ValueError>([] { parse_symbol_json(R"J({"nodes": [1e999]})J", "big.json"); }),
                  "big.json: invalid JSON");  // found by fuzzing: nlohmann's out_of_range
  EXPECT_CONTAINS(error_of<ValueError>([] { parse_symbol_json(R"J({"nodes": []})J"); }), "'arg_nodes' is missing");
  EXPECT_CONTAINS(error_of<ValueError>([] { parse_symbol_json(""); }), "byte");
  // Deep nesting is refused before parsing (no recursion on the input).
  std::string deep(100000, '[');
  EXPECT_CONTAINS(error_of<ValueError>([&] { parse_symbol_json(deep); }), "nested deeper than 64 levels at byte 64");
  // Attribute values must be strings (numbers are tolerated).
  EXPECT_CONTAINS(error_of<ValueError>([] {
                    parse_symbol_json(with_node(R"J({"op": "null", "name": "x", "inputs": []},
      {"op": "_plus_scalar", "name": "p", "attrs": {"scalar": [1]}, "inputs": [[0, 0]]})J"));
                  }),
                  "attribute 'scalar'");
}

TEST(SymbolJson, FilesOverTheLimitAreRefused) {
  auto dir = std::filesystem::temp_directory_path() /
             fmt::format("kiln_symjson_{}", ::testing::UnitTest::GetInstance()->random_seed());
  std::filesystem::create_directories(dir);
  auto path = (dir / "huge-symbol.json").string();
  { std::ofstream(path) << "{"; }
  std::filesystem::resize_file(path, kMaxSymbolJsonBytes + 1);  // sparse: takes no disk space
  EXPECT_CONTAINS(error_of<IOError>([&] { load_symbol_json(path); }), "limit");
  EXPECT_CONTAINS(error_of<IOError>([&] { load_symbol_json((dir / "absent.json").string()); }), "absent.json");
  std::filesystem::remove_all(dir);
}

TEST(SymbolJson, TypingErrorsNameTheNode) {
  Symbol s = parse_symbol_json(kGluonConvNet, "convnet.json");
  std::vector<std::string> inputs{"data"};
  // 2-d data into a 2-d convolution.
  std::string e = error_of<Error>([&] { to_graph(s, {{"data", f32({2, 3})}}, inputs); });
  EXPECT_CONTAINS(e, "node 'conv0_fwd': Convolution(f32[2,3], f32[4,3,3,3], f32[4])");
  EXPECT_CONTAINS(e, "f32[2,3]");
  // A weight whose shape disagrees with the data.
  e = error_of<Error>([&] { to_graph(s, {{"data", f32({2, 3, 8, 8})}, {"conv0_weight", f32({4, 5, 3, 3})}}, inputs); });
  EXPECT_CONTAINS(e, "conv0_fwd");
  EXPECT_CONTAINS(e, "f32[4,5,3,3]");
  // Inputs: no type, not a variable.
  EXPECT_CONTAINS(error_of<ValueError>([&] { to_graph(s, {}, inputs); }), "input 'data' (node 0) needs a type");
  std::vector<std::string> bad{"conv0_fwd"};
  EXPECT_CONTAINS(error_of<ValueError>([&] { to_graph(s, {}, bad); }), "'conv0_fwd' is not a variable");
  // Bad attribute values name the node too.
  std::string text = with_node(R"J({"op": "null", "name": "x", "inputs": []},
      {"op": "Activation", "name": "act0", "attrs": {"act_type": "swish"}, "inputs": [[0, 0]]})J");
  std::vector<std::string> x{"x"};
  e = error_of<ValueError>([&] { to_graph(parse_symbol_json(text), {{"x", f32({2})}}, x); });
  EXPECT_CONTAINS(e, "act0");
  EXPECT_CONTAINS(e, "swish");
  // A variable nothing tells the shape of.
  text = with_node(R"J({"op": "null", "name": "x", "inputs": []}, {"op": "null", "name": "y", "inputs": []},
      {"op": "elemwise_add", "name": "add0", "inputs": [[0, 0], [1, 0]]})J",
                   "[[2, 0]]");
  e = error_of<ValueError>([&] { to_graph(parse_symbol_json(text), {{"x", f32({2})}}, x); });
  EXPECT_CONTAINS(e, "cannot tell the shape of variable 'y'");
}

// MXNet's own files (1.x writers) come back byte for byte: same key order,
// dmlc::JSONWriter layout, versions on mutated inputs, node_row_ptr.
TEST(SymbolJson, RealExportsWriteBackByteForByte) {
  int checked = 0;
  for (std::filesystem::path root :
       {std::filesystem::path(KILN_TEST_DATA_DIR) / "mxnet-models", std::filesystem::path(KILN_EXTRA_MXNET_MODELS)}) {
    for (const char* file : {"insightface-gender-age-1.3.0/model-symbol.json", "gluon-lenet-1.4.1/lenet-symbol.json",
                             "gluon-mlp-1.7.0/net-symbol.json"}) {
      auto path = root / file;
      if (root.empty() || !std::filesystem::exists(path)) continue;
      SCOPED_TRACE(path.string());
      std::ifstream in(path, std::ios::binary);
      std::string original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::string written = to_json(load_symbol_json(path.string()));
      EXPECT_EQ(written, original);
      ++checked;
    }
  }
  EXPECT_GE(checked, 1);  // insightface is in the repository
}

TEST(SymbolJson, SymbolWritesBackAsRead) {
  Symbol s = parse_symbol_json(kLegacy, "legacy.json");
  Symbol again = parse_symbol_json(to_json(s), "again");
  ASSERT_EQ(again.nodes.size(), s.nodes.size());
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    EXPECT_EQ(again.nodes[i].name, s.nodes[i].name);
    EXPECT_EQ(again.nodes[i].attrs, s.nodes[i].attrs);
    EXPECT_EQ(again.nodes[i].hidden, s.nodes[i].hidden);
  }
  EXPECT_EQ(again.heads, s.heads);
}

}  // namespace
}  // namespace kiln::mxnet
