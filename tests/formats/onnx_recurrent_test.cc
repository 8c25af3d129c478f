// ONNX's RNN, GRU and LSTM (frontend/formats/onnx/ops_rnn.cc) against a
// float64 reference loop written from ONNX's operator definitions: both
// directions, both layouts, initial states, peepholes, clip, every named
// activation, sequence_lens; through Model::run and through a graph whose
// inputs are all bound at run time; and an imported LSTM through
// SymbolBlock, hybridize and export.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "frontend/formats/onnx/model.h"
#include "frontend/graph_eval.h"
#include "frontend/nd_init.h"
#include "frontend/nn/export_onnx.h"
#include "frontend/nn/symbol_block.h"
#include "tests/formats/onnx_test_models.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::node_model;
using test::set_attr;
using test::set_attr_float;
using test::set_attr_int;
using test::set_attr_strings;
using test::tensor;
using test::TempDir;
using test::ValueSpec;
using test::write_bytes;

// What one recurrent node computes, as ONNX defines it (gate orders: GRU
// z r h, LSTM i o f c), for X, W, R, B, initial_h, initial_c and P as the
// node reads them (layout=1: X, states and Y batch-major). Empty B, states
// or P: absent. `acts` per direction as the node's activations attribute.
struct RecurrentRef {
  std::string op;
  int64_t seq, batch, in, hidden;
  int dirs = 1;
  bool reverse = false;  // one direction, reversed
  bool batch_major = false;
  double clip = 0;
  bool linear_before_reset = false;
  bool input_forget = false;
  std::vector<std::function<double(double)>> acts;
  std::vector<double> x, w, r, b, h0, c0, p;
  std::vector<int32_t> lens;  // sequence_lens; empty: absent
  std::vector<double> y, yh, yc;

  int gates() const { return op == "RNN" ? 1 : op == "GRU" ? 3 : 4; }
  size_t xi(int64_t t, int64_t n, int64_t i) const {
    return static_cast<size_t>(((batch_major ? n * seq + t : t * batch + n)) * in + i);
  }
  size_t si(int d, int64_t n, int64_t j) const {
    return static_cast<size_t>((batch_major ? n * dirs + d : d * batch + n) * hidden + j);
  }
  size_t yi(int64_t t, int d, int64_t n, int64_t j) const {
    return static_cast<size_t>((batch_major ? (n * seq + t) * dirs + d : (t * dirs + d) * batch + n) * hidden + j);
  }

  void run() {
    const int64_t g = gates(), gh = g * hidden;
    const size_t per_dir = acts.size() / static_cast<size_t>(dirs);
    y.assign(static_cast<size_t>(seq * dirs * batch * hidden), 0.0);
    yh.assign(static_cast<size_t>(dirs * batch * hidden), 0.0);
    yc = yh;
    auto cl = [&](double v) { return clip > 0 ? std::clamp(v, -clip, clip) : v; };
    for (int d = 0; d < dirs; ++d) {
      auto f = acts[static_cast<size_t>(d) * per_dir],
           gact = acts[static_cast<size_t>(d) * per_dir + (per_dir > 1 ? 1 : 0)];
      auto hact = acts[static_cast<size_t>(d) * per_dir + (per_dir > 2 ? 2 : 0)];
      for (int64_t n = 0; n < batch; ++n) {
        std::vector<double> h(static_cast<size_t>(hidden), 0.0), c = h;
        for (int64_t j = 0; j < hidden; ++j) {
          if (!h0.empty()) h[static_cast<size_t>(j)] = h0[si(d, n, j)];
          if (!c0.empty()) c[static_cast<size_t>(j)] = c0[si(d, n, j)];
        }
        for (int64_t k = 0; k < seq; ++k) {
          const int64_t t = (reverse || d == 1) ? seq - 1 - k : k;
          if (!lens.empty() && t >= lens[static_cast<size_t>(n)]) continue;  // Y stays 0, the state is kept
          // xw[row] = x_t . W[row] + Wb[row]; hr[row] = h . R[row] + Rb[row].
          std::vector<double> xw(static_cast<size_t>(gh)), hr(static_cast<size_t>(gh));
          auto rdot = [&](const std::vector<double>& v, int64_t row) {
            double s = b.empty() ? 0.0 : b[static_cast<size_t>(d * 2 * gh + gh + row)];
            for (int64_t q = 0; q < hidden; ++q)
              s += v[static_cast<size_t>(q)] * r[static_cast<size_t>((d * gh + row) * hidden + q)];
            return s;
          };
          for (int64_t row = 0; row < gh; ++row) {
            double s = b.empty() ? 0.0 : b[static_cast<size_t>(d * 2 * gh + row)];
            for (int64_t i = 0; i < in; ++i) s += x[xi(t, n, i)] * w[static_cast<size_t>((d * gh + row) * in + i)];
            xw[static_cast<size_t>(row)] = s;
            hr[static_cast<size_t>(row)] = rdot(h, row);
          }
          std::vector<double> nh(static_cast<size_t>(hidden));
          auto at = [&](const std::vector<double>& v, int64_t gate, int64_t j) {
            return v[static_cast<size_t>(gate * hidden + j)];
          };
          auto peep = [&](int64_t which, int64_t j) {
            return p.empty() ? 0.0 : p[static_cast<size_t>(d * 3 * hidden + which * hidden + j)];
          };
          if (op == "RNN") {
            for (int64_t j = 0; j < hidden; ++j) nh[static_cast<size_t>(j)] = f(cl(at(xw, 0, j) + at(hr, 0, j)));
          } else if (op == "GRU") {
            std::vector<double> z(static_cast<size_t>(hidden)), rg = z, rh = z;
            for (int64_t j = 0; j < hidden; ++j) {
              z[static_cast<size_t>(j)] = f(cl(at(xw, 0, j) + at(hr, 0, j)));
              rg[static_cast<size_t>(j)] = f(cl(at(xw, 1, j) + at(hr, 1, j)));
              rh[static_cast<size_t>(j)] = rg[static_cast<size_t>(j)] * h[static_cast<size_t>(j)];
            }
            for (int64_t j = 0; j < hidden; ++j) {
              const double lin =
                  linear_before_reset ? rg[static_cast<size_t>(j)] * at(hr, 2, j) : rdot(rh, 2 * hidden + j);
              const double cand = gact(cl(at(xw, 2, j) + lin));
              nh[static_cast<size_t>(j)] =
                  (1 - z[static_cast<size_t>(j)]) * cand + z[static_cast<size_t>(j)] * h[static_cast<size_t>(j)];
            }
          } else {
            for (int64_t j = 0; j < hidden; ++j) {
              double& cj = c[static_cast<size_t>(j)];
              const double i = f(cl(at(xw, 0, j) + at(hr, 0, j) + peep(0, j) * cj));
              const double fg = input_forget ? 1 - i : f(cl(at(xw, 2, j) + at(hr, 2, j) + peep(2, j) * cj));
              const double cand = gact(cl(at(xw, 3, j) + at(hr, 3, j)));
              cj = fg * cj + i * cand;
              const double o = f(cl(at(xw, 1, j) + at(hr, 1, j) + peep(1, j) * cj));
              nh[static_cast<size_t>(j)] = o * hact(cj);
            }
          }
          h = nh;
          for (int64_t j = 0; j < hidden; ++j) y[yi(t, d, n, j)] = h[static_cast<size_t>(j)];
        }
        for (int64_t j = 0; j < hidden; ++j) {
          yh[si(d, n, j)] = h[static_cast<size_t>(j)];
          yc[si(d, n, j)] = c[static_cast<size_t>(j)];
        }
      }
    }
  }
};

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }
double tanh_(double v) { return std::tanh(v); }

// Deterministic values in [-scale, scale).
std::vector<double> wave(size_t count, double phase, double scale) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = scale * std::sin(1.7 * static_cast<double>(i) + phase);
  return v;
}

NDArray f32(const std::vector<double>& v, const std::vector<int64_t>& dims) {
  std::vector<float> f(v.begin(), v.end());
  return nd::array(f, Shape(dims));
}

void expect_close(const NDArray& got, const std::vector<double>& want, const std::vector<int64_t>& dims,
                  const std::string& what) {
  ASSERT_EQ(got.shape(), Shape(dims)) << what;
  std::vector<float> g = got.to_vector<float>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(g[i], want[i], 2e-5 * std::max(1.0, std::abs(want[i]))) << what << " " << i;
}

// The node of `ref` with every input it has fed at run time (absent ones
// ""), outputs named in `outputs` ("" for absent ones); runs it and checks
// the present outputs against the reference.
void check_recurrent(RecurrentRef& ref, int opset, const std::vector<std::string>& outputs,
                     const std::function<void(::onnx::NodeProto*)>& attrs) {
  using TP = ::onnx::TensorProto;
  ref.run();
  const int64_t gh = ref.gates() * ref.hidden, S = ref.seq, N = ref.batch, D = ref.dirs, H = ref.hidden;
  const std::vector<int64_t> xd =
      ref.batch_major ? std::vector<int64_t>{N, S, ref.in} : std::vector<int64_t>{S, N, ref.in};
  const std::vector<int64_t> sd = ref.batch_major ? std::vector<int64_t>{N, D, H} : std::vector<int64_t>{D, N, H};
  const std::vector<int64_t> yd = ref.batch_major ? std::vector<int64_t>{N, S, D, H} : std::vector<int64_t>{S, D, N, H};
  std::vector<ValueSpec> in{{"X", TP::FLOAT, xd}, {"W", TP::FLOAT, {D, gh, ref.in}}, {"R", TP::FLOAT, {D, gh, H}}};
  std::vector<NDArray> feed{f32(ref.x, xd), f32(ref.w, {D, gh, ref.in}), f32(ref.r, {D, gh, H})};
  std::vector<std::string> names{"X", "W", "R", "", "", "", "", ""};
  auto optional = [&](size_t slot, const std::string& name, const std::vector<double>& v, std::vector<int64_t> dims) {
    if (v.empty()) return;
    in.push_back({name, TP::FLOAT, dims});
    feed.push_back(f32(v, dims));
    names[slot] = name;
  };
  optional(3, "B", ref.b, {D, 2 * gh});
  if (!ref.lens.empty()) {
    in.push_back({"lens", TP::INT32, {N}});
    feed.push_back(nd::array(ref.lens, Shape{N}));
    names[4] = "lens";
  }
  optional(5, "initial_h", ref.h0, sd);
  optional(6, "initial_c", ref.c0, sd);
  optional(7, "P", ref.p, {D, 3 * H});
  while (!names.empty() && names.back().empty()) names.pop_back();
  std::vector<ValueSpec> outs;
  const std::vector<std::vector<int64_t>> out_dims{yd, sd, sd};
  for (size_t k = 0; k < outputs.size(); ++k)
    if (!outputs[k].empty()) outs.push_back({outputs[k], TP::FLOAT, out_dims[k]});
  ::onnx::ModelProto m = node_model(ref.op, opset, in, {}, names, outs);
  auto* node = m.mutable_graph()->mutable_node(0);
  node->clear_output();
  for (const std::string& o : outputs) node->add_output(o);
  set_attr_int(node, "hidden_size", H);
  attrs(node);
  // Through Model::run (its small inputs known at import: W, R, sequence_lens
  // as constants) and through a graph whose inputs are all bound at run time.
  onnx::Model model = onnx::Model::parse(m.SerializeAsString(), "recurrent.onnx");
  std::vector<TensorType> types;
  for (const NDArray& a : feed) types.push_back({a.shape(), a.dtype()});
  onnx::Imported im = model.to_graph(types);
  for (const std::vector<NDArray>& got : {model.run(feed), eval_graph(im.graph, model.bind(im, feed))}) {
    ASSERT_EQ(got.size(), outs.size());
    size_t at = 0;
    const std::vector<double>* want[] = {&ref.y, &ref.yh, &ref.yc};
    for (size_t k = 0; k < outputs.size(); ++k)
      if (!outputs[k].empty()) expect_close(got[at++], *want[k], out_dims[k], ref.op + " " + outputs[k]);
  }
}

// Bidirectional LSTM with initial states, biases, peepholes and clip (ONNX's
// node tests have one direction, no clip, no initial c).
TEST(OnnxImportRecurrent, BidirectionalLstmWithInitialStatesPeepholesAndClip) {
  RecurrentRef ref{.op = "LSTM", .seq = 5, .batch = 3, .in = 5, .hidden = 4, .dirs = 2, .clip = 0.6};
  ref.acts = {sigmoid, tanh_, tanh_, sigmoid, tanh_, tanh_};
  const size_t gh = 16;
  ref.x = wave(75, 0.1, 1.0), ref.w = wave(2 * gh * 5, 0.2, 0.6), ref.r = wave(2 * gh * 4, 0.3, 0.6);
  ref.b = wave(2 * 2 * gh, 0.4, 0.3), ref.h0 = wave(24, 0.5, 0.8), ref.c0 = wave(24, 0.6, 1.5),
  ref.p = wave(24, 0.7, 0.5);
  check_recurrent(ref, 14, {"Y", "Y_h", "Y_c"}, [](::onnx::NodeProto* n) {
    set_attr(n, "direction", "bidirectional");
    set_attr_float(n, "clip", 0.6f);
  });
  // input_forget: f = 1 - i; reverse; Y_c alone.
  RecurrentRef coupled{.op = "LSTM", .seq = 6, .batch = 2, .in = 7, .hidden = 3, .reverse = true, .input_forget = true};
  coupled.acts = {sigmoid, tanh_, tanh_};
  coupled.x = wave(84, 0.9, 1.0), coupled.w = wave(12 * 7, 1.0, 0.6), coupled.r = wave(12 * 3, 1.1, 0.6);
  coupled.c0 = wave(6, 1.2, 1.0);
  check_recurrent(coupled, 14, {"", "", "Y_c"}, [](::onnx::NodeProto* n) {
    set_attr(n, "direction", "reverse");
    set_attr_int(n, "input_forget", 1);
  });
}

// sequence_lens shorter than X's time steps (known at import, and bound at
// run time): past its length an entry keeps its state and outputs zeros;
// the reverse direction starts at each entry's own last step.
TEST(OnnxImportRecurrent, SequenceLensMaskShorterSequences) {
  RecurrentRef lstm{.op = "LSTM", .seq = 5, .batch = 3, .in = 5, .hidden = 4, .dirs = 2};
  lstm.acts = {sigmoid, tanh_, tanh_, sigmoid, tanh_, tanh_};
  lstm.x = wave(75, 5.1, 1.0), lstm.w = wave(2 * 16 * 5, 5.2, 0.6), lstm.r = wave(2 * 16 * 4, 5.3, 0.6);
  lstm.h0 = wave(24, 5.4, 0.8), lstm.c0 = wave(24, 5.5, 1.0), lstm.lens = {5, 2, 0};
  check_recurrent(lstm, 14, {"Y", "Y_h", "Y_c"},
                  [](::onnx::NodeProto* n) { set_attr(n, "direction", "bidirectional"); });
  RecurrentRef gru{.op = "GRU", .seq = 6, .batch = 2, .in = 7, .hidden = 3, .batch_major = true};
  gru.acts = {sigmoid, tanh_};
  gru.x = wave(84, 6.1, 1.0), gru.w = wave(9 * 7, 6.2, 0.5), gru.r = wave(9 * 3, 6.3, 0.5), gru.lens = {3, 6};
  check_recurrent(gru, 14, {"Y", "Y_h"}, [](::onnx::NodeProto* n) { set_attr_int(n, "layout", 1); });
}

// layout=1 (batch-major X, states and Y) with GRU's linear_before_reset
// (once with Y absent); and a reverse GRU in the default layout with only Y.
TEST(OnnxImportRecurrent, GruBatchMajorLinearBeforeResetAndReverse) {
  for (bool lbr : {false, true}) {
    RecurrentRef ref{.op = "GRU",
                     .seq = 4,
                     .batch = 3,
                     .in = 6,
                     .hidden = 5,
                     .dirs = 2,
                     .batch_major = true,
                     .linear_before_reset = lbr};
    ref.acts = {sigmoid, tanh_, sigmoid, tanh_};
    ref.x = wave(72, 1.1, 1.0), ref.w = wave(2 * 15 * 6, 1.2, 0.5), ref.r = wave(2 * 15 * 5, 1.3, 0.5);
    ref.b = wave(2 * 30, 1.4, 0.4), ref.h0 = wave(30, 1.5, 0.9);
    check_recurrent(ref, 14, {lbr ? "Y" : "", "Y_h"}, [lbr](::onnx::NodeProto* n) {
      set_attr(n, "direction", "bidirectional");
      set_attr_int(n, "layout", 1);
      set_attr_int(n, "linear_before_reset", lbr ? 1 : 0);
    });
  }
  RecurrentRef rev{.op = "GRU", .seq = 6, .batch = 2, .in = 7, .hidden = 3, .reverse = true};
  rev.acts = {sigmoid, tanh_};
  rev.x = wave(84, 2.1, 1.0), rev.w = wave(9 * 7, 2.2, 0.5), rev.r = wave(9 * 3, 2.3, 0.5);
  check_recurrent(rev, 7, {"Y"}, [](::onnx::NodeProto* n) { set_attr(n, "direction", "reverse"); });
}

// RNN with clip and activations that take alpha and beta (HardSigmoid,
// LeakyRelu), one per direction; opset 7 (no layout attribute).
TEST(OnnxImportRecurrent, RnnClipAndActivationsWithAlphaBeta) {
  RecurrentRef ref{.op = "RNN", .seq = 7, .batch = 2, .in = 5, .hidden = 4, .dirs = 2, .clip = 1.2};
  ref.acts = {[](double v) { return std::clamp(0.3 * v + 0.4, 0.0, 1.0); },
              [](double v) { return v > 0 ? v : 0.2 * v; }};
  ref.x = wave(70, 3.1, 2.0), ref.w = wave(2 * 4 * 5, 3.2, 0.8), ref.r = wave(2 * 4 * 4, 3.3, 0.8);
  ref.b = wave(2 * 8, 3.4, 0.5);
  check_recurrent(ref, 7, {"Y", "Y_h"}, [](::onnx::NodeProto* n) {
    set_attr(n, "direction", "bidirectional");
    set_attr_float(n, "clip", 1.2f);
    set_attr_strings(n, "activations", {"HardSigmoid", "LeakyRelu"});
    auto* a = n->add_attribute();
    a->set_name("activation_alpha");
    a->set_type(::onnx::AttributeProto::FLOATS);
    a->add_floats(0.3f);
    a->add_floats(0.2f);
    auto* b = n->add_attribute();
    b->set_name("activation_beta");
    b->set_type(::onnx::AttributeProto::FLOATS);
    b->add_floats(0.4f);
  });
}

// Every activation ONNX lists, by name in any case, with and without
// alpha / beta (their defaults otherwise), in a forward RNN.
TEST(OnnxImportRecurrent, RnnActivationsByName) {
  struct Case {
    std::string name;
    std::vector<float> alpha, beta;
    std::function<double(double)> f;
  };
  const std::vector<Case> cases{
      {"Relu", {}, {}, [](double v) { return std::max(v, 0.0); }},
      {"sigmoid", {}, {}, sigmoid},
      {"Affine", {0.5f}, {-0.2f}, [](double v) { return 0.5 * v - 0.2; }},
      {"LeakyRelu", {}, {}, [](double v) { return v > 0 ? v : 0.01 * v; }},
      {"ThresholdedRelu", {0.1f}, {}, [](double v) { return v > 0.1 ? v : 0.0; }},
      {"ThresholdedRelu", {}, {}, [](double v) { return v > 1.0 ? v : 0.0; }},
      {"ScaledTanh", {1.5f}, {0.7f}, [](double v) { return 1.5 * std::tanh(0.7 * v); }},
      {"HardSigmoid", {}, {}, [](double v) { return std::clamp(0.2 * v + 0.5, 0.0, 1.0); }},
      {"Elu", {0.5f}, {}, [](double v) { return v > 0 ? v : 0.5 * (std::exp(v) - 1); }},
      {"Softsign", {}, {}, [](double v) { return v / (1 + std::abs(v)); }},
      {"Softplus", {}, {}, [](double v) { return std::log1p(std::exp(v)); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RecurrentRef ref{.op = "RNN", .seq = 5, .batch = 3, .in = 5, .hidden = 4};
    ref.acts = {c.f};
    ref.x = wave(75, 4.1, 2.0), ref.w = wave(20, 4.2, 0.8), ref.r = wave(16, 4.3, 0.4), ref.b = wave(8, 4.4, 0.5);
    check_recurrent(ref, 14, {"Y", "Y_h"}, [&](::onnx::NodeProto* n) {
      set_attr_strings(n, "activations", {c.name});
      for (const auto& [name, values] :
           {std::pair{"activation_alpha", c.alpha}, std::pair{"activation_beta", c.beta}}) {
        if (values.empty()) continue;
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(::onnx::AttributeProto::FLOATS);
        for (float v : values) a->add_floats(v);
      }
    });
  }
}

TEST(OnnxImportErrors, RecurrentOpsNameTheBadActivationLengthsOutOfRangeAndTooManySteps) {
  using TP = ::onnx::TensorProto;
  auto lstm = [](std::vector<std::string> inputs, std::vector<ValueSpec> fed, std::vector<::onnx::TensorProto> inits) {
    fed.insert(fed.begin(), {{"X", TP::FLOAT, {3, 2, 4}}, {"W", TP::FLOAT, {1, 8, 4}}, {"R", TP::FLOAT, {1, 8, 2}}});
    ::onnx::ModelProto m = node_model("LSTM", 14, fed, inits, inputs, {{"Y", TP::FLOAT, {3, 1, 2, 2}}});
    set_attr_int(m.mutable_graph()->mutable_node(0), "hidden_size", 2);
    return m;
  };
  const std::vector<TensorType> types{
      {Shape{3, 2, 4}, DType::kFloat32}, {Shape{1, 8, 4}, DType::kFloat32}, {Shape{1, 8, 2}, DType::kFloat32}};
  ::onnx::ModelProto bad = lstm({"X", "W", "R"}, {}, {});
  set_attr_strings(bad.mutable_graph()->mutable_node(0), "activations", {"Sigmoid", "Gelu", "Tanh"});
  EXPECT_CONTAINS(
      error_of<NotSupported>([&] { onnx::Model::parse(bad.SerializeAsString(), "lstm.onnx").to_graph(types); }),
      "lstm.onnx: ONNX node 'node0' (LSTM, opset 14): activation 'Gelu' (supported: Relu, Tanh, Sigmoid");
  // Known lengths outside [0, seq].
  ::onnx::ModelProto longer = lstm({"X", "W", "R", "", "lens"}, {}, {tensor<int32_t>("lens", TP::INT32, {2}, {4, 2})});
  EXPECT_CONTAINS(
      error_of<ValueError>([&] { onnx::Model::parse(longer.SerializeAsString(), "lstm.onnx").to_graph(types); }),
      "lstm.onnx: ONNX node 'node0' (LSTM, opset 14): sequence_lens [4,2] must lie in [0, 3]");
  ::onnx::ModelProto full = lstm({"X", "W", "R", "", "lens"}, {}, {tensor<int32_t>("lens", TP::INT32, {2}, {3, 3})});
  EXPECT_NO_THROW(onnx::Model::parse(full.SerializeAsString(), "lstm.onnx").to_graph(types));
  // A sequence too long to unroll is refused before any node is built.
  const std::vector<TensorType> long_types{
      {Shape{20000, 2, 4}, DType::kFloat32}, {Shape{1, 8, 4}, DType::kFloat32}, {Shape{1, 8, 2}, DType::kFloat32}};
  ::onnx::ModelProto too_long =
      node_model("LSTM", 14, {{"X", TP::FLOAT, {20000, 2, 4}}, {"W", TP::FLOAT, {1, 8, 4}}, {"R", TP::FLOAT, {1, 8, 2}}},
                 {}, {"X", "W", "R"}, {{"Y", TP::FLOAT, {20000, 1, 2, 2}}});
  set_attr_int(too_long.mutable_graph()->mutable_node(0), "hidden_size", 2);
  EXPECT_CONTAINS(error_of<NotSupported>([&] {
                    onnx::Model::parse(too_long.SerializeAsString(), "lstm.onnx").to_graph(long_types);
                  }),
                  "20000 time steps x 1 direction(s)");
}

// An imported LSTM (weights as initializers) runs in a SymbolBlock,
// hybridizes, and exports back to ONNX as the Kiln ops it is composed of:
// the re-imported model gives the same outputs.
TEST(OnnxImportRecurrent, LstmHybridizesAndRoundTripsThroughExport) {
  using TP = ::onnx::TensorProto;
  const int64_t S = 4, N = 2, I = 3, H = 5;
  auto floats = [](size_t count, double phase) {
    std::vector<double> d = wave(count, phase, 0.5);
    return std::vector<float>(d.begin(), d.end());
  };
  ::onnx::ModelProto m =
      node_model("LSTM", 14, {{"X", TP::FLOAT, {S, N, I}}},
                 {tensor<float>("W", TP::FLOAT, {1, 4 * H, I}, floats(4 * H * I, 0.1)),
                  tensor<float>("R", TP::FLOAT, {1, 4 * H, H}, floats(4 * H * H, 0.2)),
                  tensor<float>("B", TP::FLOAT, {1, 8 * H}, floats(8 * H, 0.3))},
                 {"X", "W", "R", "B"}, {{"Y", TP::FLOAT, {S, 1, N, H}}, {"Y_h", TP::FLOAT, {1, N, H}}});
  set_attr_int(m.mutable_graph()->mutable_node(0), "hidden_size", H);
  TempDir dir;
  const fs::path in_path = dir.path() / "lstm.onnx", out_path = dir.path() / "lstm_back.onnx";
  write_bytes(in_path, m.SerializeAsString());
  auto net = nn::SymbolBlock::imports(in_path.string(), {"X"});
  NDArray x = f32(wave(static_cast<size_t>(S * N * I), 0.4, 1.0), {S, N, I});
  std::vector<NDArray> in{x};
  std::vector<NDArray> eager = net(std::span<const NDArray>(in));
  net.hybridize();
  std::vector<NDArray> hybrid = net(std::span<const NDArray>(in));
  ASSERT_EQ(hybrid.size(), 2u);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(hybrid[k].to_vector<float>(), eager[k].to_vector<float>()) << k;
  nn::export_onnx(net, out_path.string());
  onnx::Model back = onnx::Model::load(out_path.string());
  EXPECT_EQ(back.op_counts().count("LSTM"), 0u);
  std::vector<NDArray> again = back.run(in);
  ASSERT_EQ(again.size(), 2u);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(again[k].to_vector<float>(), hybrid[k].to_vector<float>()) << k;
}

}  // namespace
}  // namespace kiln
