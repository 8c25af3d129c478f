// ONNX's recurrent ops RNN, GRU and LSTM (opsets 7 and 14), composed exactly
// from Kiln ops by unrolling over the time steps: the sequence length is a
// dim of X, fixed once the model's input shapes are given. Per direction,
// X x W^T (plus the biases Wb + Rb) is one FullyConnected over all steps;
// each step adds h x R^T (a FullyConnected of the previous h), clips the
// gates' inputs when `clip` is set, applies the activations and forms the
// new h (and c). Y stacks every step's h ([seq, dirs, batch, hidden], or
// [batch, seq, dirs, hidden] under layout=1), Y_h and Y_c the last ones
// (the reverse direction's last is its step at time 0).
//
// Semantics as ONNX Runtime implements them: activations by name
// (case-insensitive: Relu, Tanh, Sigmoid, Affine, LeakyRelu,
// ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus), each
// taking the next activation_alpha / activation_beta when it uses them;
// one direction's list serves both directions of a bidirectional op; clip
// bounds the inputs of the gate activations (not the cell state fed to
// LSTM's h); GRU's linear_before_reset applies r to (h x R_h^T + Rb_h);
// LSTM's input_forget makes f = 1 - i; the peepholes P (i, o, f) add
// P_i c_{t-1}, P_f c_{t-1} and P_o c_t.
//
// sequence_lens (known at import or not) masks each step: a batch entry
// past its length keeps its h (and c) and gets zeros in Y, so Y_h and Y_c
// hold the state after its last step, and the reverse direction starts at
// its own last step, as ONNX Runtime does (a length 0 gives the initial
// state). Known lengths all equal to X's add no mask; known ones outside
// [0, seq] are a ValueError. More than kMaxUnrolledSteps steps (times the
// directions) are NotSupported: a file must not make the graph unbounded.
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <utility>

#include "frontend/formats/onnx/node_context.h"
#include "frontend/nd_init.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"

namespace kiln::onnx {
namespace {

enum class Cell { kRnn, kGru, kLstm };

struct Activation {
  std::string name;  // lower-case
  double alpha = 0, beta = 0;
};

// Per activation (lower-case name): its alpha and beta defaults, none for a
// parameter it does not take.
const std::map<std::string, std::pair<std::optional<double>, std::optional<double>>, std::less<>> kActivationParams = {
    {"relu", {}},
    {"tanh", {}},
    {"sigmoid", {}},
    {"softsign", {}},
    {"softplus", {}},
    {"affine", {1.0, 0.0}},
    {"leakyrelu", {0.01, std::nullopt}},
    {"thresholdedrelu", {1.0, std::nullopt}},
    {"scaledtanh", {1.0, 1.0}},
    {"hardsigmoid", {0.2, 0.5}},
    {"elu", {1.0, std::nullopt}},
};

// The activations of all directions (as many per direction as `defaults`
// lists; one direction's list serves both of a bidirectional op).
std::vector<Activation> activations_of(const NodeContext& n, const std::vector<std::string>& defaults, int dirs) {
  std::vector<std::string> names = n.attr_strings("activations");
  if (names.empty()) names = defaults;
  const size_t per_dir = defaults.size();
  if (dirs == 2 && names.size() == per_dir) {
    const std::vector<std::string> one = names;
    names.insert(names.end(), one.begin(), one.end());
  }
  KILN_CHECK(names.size() == per_dir * static_cast<size_t>(dirs), ValueError,
             "activations lists {} functions, expected {} ({} per direction, {} direction(s))", names.size(),
             per_dir * static_cast<size_t>(dirs), per_dir, dirs);
  const std::vector<double> alphas = n.attr_floats("activation_alpha"), betas = n.attr_floats("activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  std::vector<Activation> out;
  for (const std::string& raw : names) {
    Activation a{.name = raw};
    for (char& c : a.name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto it = kActivationParams.find(a.name);
    if (it == kActivationParams.end())
      n.unsupported(
          fmt::format("activation '{}' (supported: Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, "
                      "ScaledTanh, HardSigmoid, Elu, Softsign, Softplus)",
                      raw));
    const auto& [dflt_alpha, dflt_beta] = it->second;
    const bool uses_alpha = dflt_alpha.has_value(), uses_beta = dflt_beta.has_value();
    if (uses_alpha) a.alpha = next_alpha < alphas.size() ? alphas[next_alpha++] : *dflt_alpha;
    if (uses_beta) a.beta = next_beta < betas.size() ? betas[next_beta++] : *dflt_beta;
    out.push_back(std::move(a));
  }
  return out;
}

ir::Entry activate(NodeContext& n, const Activation& a, ir::Entry x) {
  const std::string& f = a.name;
  if (f == "sigmoid") return n.op1(OpId::kSigmoid, {x});
  if (f == "tanh") return n.op1(OpId::kTanh, {x});
  if (f == "relu") return n.op1(OpId::kRelu, {x});
  if (f == "affine") return scalar_op(n, OpId::kPlusScalar, scalar_op(n, OpId::kMulScalar, x, a.alpha), a.beta);
  if (f == "leakyrelu")
    return n.op1(OpId::kLeakyReLU, {x}, LeakyReLUAttrs{.act_type = LeakyType::kLeaky, .slope = a.alpha});
  if (f == "elu") return n.op1(OpId::kLeakyReLU, {x}, LeakyReLUAttrs{.act_type = LeakyType::kElu, .slope = a.alpha});
  if (f == "thresholdedrelu") return thresholded_relu(n, x, a.alpha);
  if (f == "scaledtanh")
    return scalar_op(n, OpId::kMulScalar, n.op1(OpId::kTanh, {scalar_op(n, OpId::kMulScalar, x, a.beta)}), a.alpha);
  if (f == "hardsigmoid") return hard_sigmoid(n, x, a.alpha, a.beta);
  if (f == "softsign") return n.op1(OpId::kActivation, {x}, ActivationAttrs{.act_type = ActType::kSoftsign});
  KILN_ASSERT(f == "softplus");
  return n.op1(OpId::kActivation, {x}, ActivationAttrs{.act_type = ActType::kSoftrelu});
}

constexpr int64_t kMaxUnrolledSteps = 16384;

template <Cell kCell>
void convert_recurrent(NodeContext& n) {
  constexpr int kGates = kCell == Cell::kRnn ? 1 : kCell == Cell::kGru ? 3 : 4;
  const DType dtype = n.type(0).dtype;
  KILN_CHECK(is_floating(dtype), TypeError, "{} of {} data (floating types only)", n.op_type(), dtype_name(dtype));
  const bool batch_major = n.opset() >= 14 && n.attr_int("layout", 0) != 0;
  const Shape& xs = n.shape(0);
  KILN_CHECK(xs.ndim() == 3, ShapeError, "X must be 3-D ([seq, batch, input]{}), got {}",
             batch_major ? " under layout=1: [batch, seq, input]" : "", xs);
  const int64_t seq = batch_major ? xs[1] : xs[0], batch = batch_major ? xs[0] : xs[1], in = xs[2];
  KILN_CHECK(seq >= 1, ValueError, "X {} has no time steps", xs);

  const std::string direction = n.attr_string("direction", "forward");
  KILN_CHECK(direction == "forward" || direction == "reverse" || direction == "bidirectional", ValueError,
             "direction '{}' (expected forward, reverse or bidirectional)", direction);
  const int dirs = direction == "bidirectional" ? 2 : 1;
  // Unrolling adds about twenty nodes per step and direction: bound the graph
  // a file can make Kiln build.
  KILN_CHECK(seq * dirs <= kMaxUnrolledSteps, NotSupported,
             "{} time steps x {} direction(s) (X {}): unrolled recurrences are limited to {} steps in all",
             seq, dirs, xs, kMaxUnrolledSteps);
  const Shape& ws = n.shape(1);
  const Shape& rs = n.shape(2);
  KILN_CHECK(rs.ndim() == 3 && rs[1] % kGates == 0, ShapeError, "R must be [num_directions, {}*hidden, hidden], got {}",
             kGates, rs);
  const int64_t hidden = n.attr_int("hidden_size", rs[2]);
  const int64_t gh = kGates * hidden;
  KILN_CHECK(ws == (Shape{dirs, gh, in}), ShapeError,
             "W must be [{}, {}, {}] (direction {}, hidden_size {}, X {}), got {}", dirs, gh, in, direction, hidden, xs,
             ws);
  KILN_CHECK(rs == (Shape{dirs, gh, hidden}), ShapeError, "R must be [{}, {}, {}], got {}", dirs, gh, hidden, rs);
  if (n.has_input(3))
    KILN_CHECK(n.shape(3) == (Shape{dirs, 2 * gh}), ShapeError, "B must be [{}, {}], got {}", dirs, 2 * gh, n.shape(3));
  // sequence_lens as [batch, 1] int64 when some sequence may be shorter than X's.
  std::optional<ir::Entry> lens;
  if (n.has_input(4)) {
    KILN_CHECK(n.shape(4) == Shape{batch} && is_integral(n.type(4).dtype), ShapeError,
               "sequence_lens must be [{}] integers (the batch of X {}), got {} {}", batch, xs,
               dtype_name(n.type(4).dtype), n.shape(4));
    bool full = false;
    if (n.is_known(4)) {
      const std::vector<int64_t> known = n.known_ints(4, "sequence_lens");
      for (int64_t len : known)
        KILN_CHECK(len >= 0 && len <= seq, ValueError,
                   "sequence_lens [{}] must lie in [0, {}] (the time steps of X {})", fmt::join(known, ","), seq, xs);
      full = std::ranges::all_of(known, [&](int64_t len) { return len == seq; });
    }
    if (!full) lens = reshape_to(n, n.op1(OpId::kCast, {n.input(4)}, CastAttrs{.dtype = DType::kInt64}), {batch, 1});
  }
  const Shape state_shape = batch_major ? Shape{batch, dirs, hidden} : Shape{dirs, batch, hidden};
  for (size_t i : {size_t{5}, size_t{6}}) {
    if (i == 6 && kCell != Cell::kLstm) break;
    if (n.has_input(i))
      KILN_CHECK(n.shape(i) == state_shape, ShapeError, "{} must be {}, got {}", i == 5 ? "initial_h" : "initial_c",
                 state_shape, n.shape(i));
  }
  if (kCell == Cell::kLstm && n.has_input(7))
    KILN_CHECK(n.shape(7) == (Shape{dirs, 3 * hidden}), ShapeError, "P must be [{}, {}], got {}", dirs, 3 * hidden,
               n.shape(7));

  const double clip = n.attr_float("clip", 0.0);
  KILN_CHECK(!n.has_attr("clip") || clip > 0, ValueError, "clip must be positive, got {}", clip);
  const bool linear_before_reset = kCell == Cell::kGru && n.attr_int("linear_before_reset", 0) != 0;
  const bool input_forget = kCell == Cell::kLstm && n.attr_int("input_forget", 0) != 0;
  const std::vector<Activation> acts =
      activations_of(n,
                     kCell == Cell::kRnn   ? std::vector<std::string>{"Tanh"}
                     : kCell == Cell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                           : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"},
                     dirs);

  auto clipped = [&](ir::Entry e) {
    return n.has_attr("clip") ? n.op1(OpId::kClip, {e}, ClipAttrs{.a_min = -clip, .a_max = clip}) : e;
  };
  auto fc = [&](ir::Entry x, ir::Entry w, std::optional<ir::Entry> b, int64_t units) {
    FullyConnectedAttrs a{.num_hidden = units, .no_bias = !b, .flatten = false};
    std::vector<ir::Entry> in{x, w};
    if (b) in.push_back(*b);
    return n.op(OpId::kFullyConnected, in, OpAttrs::make(a)).front();
  };
  auto mul = [&](ir::Entry a, ir::Entry b) { return n.op1(OpId::kElemwiseMul, {a, b}); };
  auto add = [&](ir::Entry a, ir::Entry b) { return n.op1(OpId::kElemwiseAdd, {a, b}); };
  // Direction d's slice of a [dirs, ...] input (state inputs: [batch, dirs, ...] under layout=1) as `dims`.
  auto of_dir = [&](size_t i, int axis, int d, const std::vector<int64_t>& dims) {
    ir::Entry e = n.input(i);
    if (dirs > 1) e = slice_axis(n, e, axis, d, d + 1);
    return reshape_to(n, e, dims);
  };

  ir::Entry x = n.input(0);
  if (batch_major) x = n.op1(OpId::kTranspose, {x}, TransposeAttrs{.axes = IntTuple{1, 0, 2}});
  x = reshape_to(n, x, {seq * batch, in});
  const int state_axis = batch_major ? 1 : 0;

  std::vector<ir::Entry> ys, last_h, last_c;  // ys: per direction [seq, batch, hidden]
  for (int d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const Activation* act = &acts[static_cast<size_t>(d) * acts.size() / static_cast<size_t>(dirs)];
    ir::Entry w = of_dir(1, 0, d, {gh, in});
    ir::Entry r = of_dir(2, 0, d, {gh, hidden});
    std::optional<ir::Entry> bias, rb_h;
    if (n.has_input(3)) {
      ir::Entry b = of_dir(3, 0, d, {2 * gh});
      ir::Entry wb = slice_axis(n, b, 0, 0, gh), rb = slice_axis(n, b, 0, gh, 2 * gh);
      if (kCell == Cell::kGru && linear_before_reset) {
        // Rb_h goes inside r * (h x R_h^T + Rb_h); Wb + Rb for z and r, Wb_h alone.
        rb_h = slice_axis(n, rb, 0, 2 * hidden, gh);
        rb = concat(n, {slice_axis(n, rb, 0, 0, 2 * hidden), n.constant(nd::zeros(Shape{hidden}).astype(dtype))}, 0);
      }
      bias = add(wb, rb);
    }
    // X x W^T + biases for every step: [seq * batch, gates * hidden].
    ir::Entry xw = fc(x, w, bias, gh);
    auto initial = [&](size_t i) {
      return n.has_input(i) ? of_dir(i, state_axis, d, {batch, hidden})
                            : n.constant(nd::zeros(Shape{batch, hidden}).astype(dtype));
    };
    ir::Entry h = initial(5);
    ir::Entry c = kCell == Cell::kLstm ? initial(6) : h;
    std::optional<ir::Entry> p_i, p_o, p_f;
    if (kCell == Cell::kLstm && n.has_input(7)) {
      ir::Entry p = of_dir(7, 0, d, {1, 3 * hidden});
      p_i = slice_axis(n, p, 1, 0, hidden), p_o = slice_axis(n, p, 1, hidden, 2 * hidden),
      p_f = slice_axis(n, p, 1, 2 * hidden, 3 * hidden);
    }
    auto peep = [&](ir::Entry gate, const std::optional<ir::Entry>& pw, ir::Entry state) {
      return pw ? add(gate, n.op1(OpId::kBroadcastMul, {state, *pw})) : gate;
    };
    ir::Entry r_zr, r_h;
    if (kCell == Cell::kGru) r_zr = slice_axis(n, r, 0, 0, 2 * hidden), r_h = slice_axis(n, r, 0, 2 * hidden, gh);

    std::vector<ir::Entry> hs(static_cast<size_t>(seq));
    std::optional<ir::Entry> zero;
    if (lens && n.has_output(0)) zero = n.constant(nd::zeros(Shape{}).astype(dtype));
    for (int64_t k = 0; k < seq; ++k) {
      const int64_t t = reverse ? seq - 1 - k : k;
      ir::Entry xt = slice_axis(n, xw, 0, t * batch, (t + 1) * batch);  // [batch, gates * hidden]
      const ir::Entry h_prev = h, c_prev = c;
      if constexpr (kCell == Cell::kRnn) {
        h = activate(n, act[0], clipped(add(xt, fc(h, r, std::nullopt, hidden))));
      } else if constexpr (kCell == Cell::kGru) {
        ir::Entry zr = add(slice_axis(n, xt, 1, 0, 2 * hidden), fc(h, r_zr, std::nullopt, 2 * hidden));
        ir::Entry z = activate(n, act[0], clipped(slice_axis(n, zr, 1, 0, hidden)));
        ir::Entry rg = activate(n, act[0], clipped(slice_axis(n, zr, 1, hidden, 2 * hidden)));
        ir::Entry hr =
            linear_before_reset ? mul(rg, fc(h, r_h, rb_h, hidden)) : fc(mul(rg, h), r_h, std::nullopt, hidden);
        ir::Entry cand = activate(n, act[1], clipped(add(slice_axis(n, xt, 1, 2 * hidden, gh), hr)));
        h = add(mul(scalar_op(n, OpId::kRMinusScalar, z, 1.0), cand), mul(z, h));
      } else {
        ir::Entry g = add(xt, fc(h, r, std::nullopt, gh));  // i, o, f, c
        ir::Entry i = activate(n, act[0], clipped(peep(slice_axis(n, g, 1, 0, hidden), p_i, c)));
        ir::Entry f = input_forget ? scalar_op(n, OpId::kRMinusScalar, i, 1.0)
                                   : activate(n, act[0], clipped(peep(slice_axis(n, g, 1, 2 * hidden, 3 * hidden), p_f, c)));
        ir::Entry cand = activate(n, act[1], clipped(slice_axis(n, g, 1, 3 * hidden, gh)));
        c = add(mul(f, c), mul(i, cand));
        ir::Entry o = activate(n, act[0], clipped(peep(slice_axis(n, g, 1, hidden, 2 * hidden), p_o, c)));
        h = mul(o, activate(n, act[2], c));
      }
      ir::Entry y_t = h;
      if (lens) {
        // Past its length a sequence keeps its state (so a reversed one starts at
        // its own last step) and outputs zeros.
        ir::Entry live = scalar_op(n, OpId::kGreaterScalar, *lens, static_cast<double>(t));  // [batch, 1]
        h = n.op1(OpId::kWhere, {live, h, h_prev});
        if (kCell == Cell::kLstm) c = n.op1(OpId::kWhere, {live, c, c_prev});
        if (n.has_output(0)) y_t = n.op1(OpId::kWhere, {live, h, *zero});
      }
      if (n.has_output(0)) hs[static_cast<size_t>(t)] = reshape_to(n, y_t, {1, batch, hidden});
    }
    if (n.has_output(0)) ys.push_back(concat(n, hs, 0));
    const std::vector<int64_t> state_dims =
        batch_major ? std::vector<int64_t>{batch, 1, hidden} : std::vector<int64_t>{1, batch, hidden};
    if (n.has_output(1)) last_h.push_back(reshape_to(n, h, state_dims));
    if (kCell == Cell::kLstm && n.has_output(2)) last_c.push_back(reshape_to(n, c, state_dims));
  }
  if (n.has_output(0)) {
    for (ir::Entry& y : ys) y = reshape_to(n, y, {seq, 1, batch, hidden});
    ir::Entry y = concat(n, ys, 1);  // [seq, dirs, batch, hidden]
    if (batch_major) y = n.op1(OpId::kTranspose, {y}, TransposeAttrs{.axes = IntTuple{2, 0, 1, 3}});
    n.set_output(0, y);
  }
  if (n.has_output(1)) n.set_output(1, concat(n, last_h, state_axis));
  if (kCell == Cell::kLstm && n.has_output(2)) n.set_output(2, concat(n, last_c, state_axis));
}

KILN_ONNX_CONVERTER("RNN", convert_recurrent<Cell::kRnn>);
KILN_ONNX_CONVERTER("GRU", convert_recurrent<Cell::kGru>);
KILN_ONNX_CONVERTER("LSTM", convert_recurrent<Cell::kLstm>);

}  // namespace
}  // namespace kiln::onnx
