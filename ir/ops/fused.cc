// OpDef of _kiln_fused_elemwise and its program's text form (ir/ops/fused.h;
// CPU kernels: backends/cpu/fused.cc).
#include "ir/ops/fused.h"

#include <algorithm>
#include <charconv>

#include "ir/op.h"

namespace kiln {
namespace {

struct OpcodeInfo {
  std::string_view name;
  int arity;
};

constexpr OpcodeInfo kOpcodes[] = {
#define KILN_X(id, name, arity, fn) {name, arity},
    KILN_FUSED_OPCODES(KILN_X)
#undef KILN_X
};

constexpr char kKindLetters[] = {'f', 's', 'c', 'r'};

class ProgramParser {
 public:
  explicit ProgramParser(std::string_view text) : text_(text) {}

  FusedProgram parse() {
    FusedProgram p;
    expect("in=");
    if (!at(';')) {
      do {
        char c = next();
        auto it = std::find(std::begin(kKindLetters), std::end(kKindLetters), c);
        if (it == std::end(kKindLetters)) fail("expected an input kind (f, s, c or r)");
        p.inputs.push_back(static_cast<FusedInputKind>(it - std::begin(kKindLetters)));
      } while (accept(','));
    }
    expect(";");
    while (!starts_with("out=")) {
      int32_t id = value();
      if (id != p.num_values()) fail(fmt::format("expected %{} (values are numbered in order)", p.num_values()));
      expect("=");
      size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] >= 'a' && text_[pos_] <= 'z') ++pos_;
      std::string_view name = text_.substr(start, pos_ - start);
      auto it =
          std::find_if(std::begin(kOpcodes), std::end(kOpcodes), [&](const OpcodeInfo& o) { return o.name == name; });
      if (it == std::end(kOpcodes)) fail(fmt::format("unknown instruction '{}'", name));
      FusedInstr ins;
      ins.op = static_cast<FusedOpcode>(it - std::begin(kOpcodes));
      expect("(");
      for (int a = 0; a < it->arity; ++a) {
        if (a) expect(",");
        ins.args[static_cast<size_t>(a)] = operand();
      }
      expect(")");
      expect(";");
      p.instrs.push_back(ins);
    }
    expect("out=");
    do p.outputs.push_back(value());
    while (accept(','));
    if (pos_ != text_.size()) fail("expected the end of the program");
    return p;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ValueError(fmt::format("fused program, at offset {} of \"{}\": {}", pos_, text_, what));
  }
  bool at(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  bool starts_with(std::string_view s) const { return text_.substr(pos_).starts_with(s); }
  char next() {
    if (pos_ >= text_.size()) fail("unexpected end");
    return text_[pos_++];
  }
  bool accept(char c) {
    if (!at(c)) return false;
    ++pos_;
    return true;
  }
  void expect(std::string_view s) {
    if (!starts_with(s)) fail(fmt::format("expected '{}'", s));
    pos_ += s.size();
  }
  int32_t value() {
    expect("%");
    int32_t v = 0;
    auto [p, ec] = std::from_chars(text_.data() + pos_, text_.data() + text_.size(), v);
    if (ec != std::errc() || v < 0) fail("expected a value number");
    pos_ = static_cast<size_t>(p - text_.data());
    return v;
  }
  FusedOperand operand() {
    FusedOperand o;
    if (at('%')) {
      o.value = value();
      return o;
    }
    size_t end = text_.find_first_of(",)", pos_);
    if (end == std::string_view::npos) fail("expected a literal");
    try {
      o.literal = parse_attr(text_.substr(pos_, end - pos_), static_cast<float*>(nullptr));
    } catch (const Error&) {
      fail("expected a value (%N) or a number");
    }
    pos_ = end;
    return o;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

void infer_fused(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const FusedProgram& p = attrs.as<FusedElemwiseAttrs>().program.program();
  KILN_CHECK(in.size() == p.inputs.size(), ValueError, "the program reads {} input(s), the node has {}",
             p.inputs.size(), in.size());
  const TensorType* full = nullptr;
  const DType t = in.empty() ? DType::kFloat32 : in[0].dtype;
  KILN_CHECK(t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBfloat16, TypeError,
             "input 0 is {}; fused programs run on float32, float16 or bfloat16", t);
  for (size_t i = 0; i < in.size(); ++i) {
    KILN_CHECK(in[i].dtype == t, TypeError,
               "input {} is {} but input 0 is {}; a fused program's inputs share one dtype", i, in[i].dtype, t);
    if (p.inputs[i] == FusedInputKind::kFull && full == nullptr) full = &in[i];
  }
  KILN_ASSERT(full != nullptr);  // validate() requires a full input
  const Shape& shape = full->shape;
  for (size_t i = 0; i < in.size(); ++i) {
    const Shape& s = in[i].shape;
    switch (p.inputs[i]) {
      case FusedInputKind::kFull:
        KILN_CHECK(s == shape, ShapeError, "full input {} has shape {}, expected {}", i, s, shape);
        break;
      case FusedInputKind::kScalar:
        KILN_CHECK(s.size() == 1, ShapeError, "scalar input {} has shape {}, expected one element", i, s);
        break;
      case FusedInputKind::kChannel:
      case FusedInputKind::kRow: {
        int axis = fused_broadcast_axis(s, shape);
        bool row = p.inputs[i] == FusedInputKind::kRow;
        KILN_CHECK(axis >= 0 && (fused_inner_size(shape, axis) == 1) == row, ShapeError,
                   "{} input {} has shape {}, expected one non-1 axis of {}{}", row ? "row" : "channel", i, s, shape,
                   row ? " followed by size-1 axes only" : " followed by a larger axis");
        break;
      }
    }
  }
  for (size_t i = 0; i < p.outputs.size(); ++i) out.push_back({shape, t});
}

}  // namespace

int fused_broadcast_axis(const Shape& in, const Shape& out) {
  if (in.ndim() > out.ndim()) return -1;
  const int lead = out.ndim() - in.ndim();
  int axis = -1;
  for (int i = 0; i < in.ndim(); ++i) {
    if (in[i] == 1) continue;
    if (axis >= 0 || in[i] != out[lead + i]) return -1;
    axis = lead + i;
  }
  return axis;
}

int64_t fused_inner_size(const Shape& out, int axis) {
  int64_t inner = 1;
  for (int d = axis + 1; d < out.ndim(); ++d) inner *= out[d];
  return inner;
}

std::string_view fused_opcode_name(FusedOpcode op) { return kOpcodes[static_cast<size_t>(op)].name; }
int fused_opcode_arity(FusedOpcode op) { return kOpcodes[static_cast<size_t>(op)].arity; }

std::string FusedProgram::to_string() const {
  std::string s = "in=";
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i) s += ',';
    s += kKindLetters[static_cast<size_t>(inputs[i])];
  }
  s += ';';
  int32_t id = static_cast<int32_t>(inputs.size());
  for (const FusedInstr& ins : instrs) {
    s += fmt::format("%{}={}(", id++, fused_opcode_name(ins.op));
    for (int a = 0; a < fused_opcode_arity(ins.op); ++a) {
      const FusedOperand& o = ins.args[static_cast<size_t>(a)];
      if (a) s += ',';
      s += o.is_value() ? fmt::format("%{}", o.value) : print_attr(o.literal);
    }
    s += ");";
  }
  s += "out=";
  for (size_t i = 0; i < outputs.size(); ++i) s += fmt::format("{}%{}", i ? "," : "", outputs[i]);
  return s;
}

FusedProgram FusedProgram::parse(std::string_view text) {
  FusedProgram p = ProgramParser(text).parse();
  p.validate();
  return p;
}

void FusedProgram::validate() const {
  KILN_CHECK(std::find(inputs.begin(), inputs.end(), FusedInputKind::kFull) != inputs.end(), ValueError,
             "fused program: no full input (in= needs at least one 'f')");
  int32_t id = static_cast<int32_t>(inputs.size());
  for (const FusedInstr& ins : instrs) {
    for (int a = 0; a < fused_opcode_arity(ins.op); ++a) {
      const FusedOperand& o = ins.args[static_cast<size_t>(a)];
      KILN_CHECK(!o.is_value() || o.value < id, ValueError,
                 "fused program: %{} = {}(...) reads %{}, which is not defined before it", id,
                 fused_opcode_name(ins.op), o.value);
    }
    ++id;
  }
  KILN_CHECK(!outputs.empty(), ValueError, "fused program: no outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    KILN_CHECK(outputs[i] >= 0 && outputs[i] < id, ValueError, "fused program: output %{} is not a value (0..{})",
               outputs[i], id - 1);
    for (size_t j = 0; j < i; ++j)
      KILN_CHECK(outputs[j] != outputs[i], ValueError, "fused program: %{} is output twice", outputs[i]);
  }
}

FusedProgramRef FusedProgramRef::make(FusedProgram program) {
  program.validate();
  auto state = std::make_shared<State>();
  state->text = program.to_string();
  state->program = std::make_shared<const FusedProgram>(std::move(program));
  FusedProgramRef r;
  r.state_ = std::move(state);
  return r;
}

FusedProgramRef parse_attr(std::string_view s, FusedProgramRef*) {
  return FusedProgramRef::make(FusedProgram::parse(s));
}

std::string print_attr(const FusedProgramRef& v) { return v.empty() ? std::string() : v.text(); }

void register_fused_ops(OpRegistry& r) {
  OpDef& d = r.define(OpId::kFusedElemwise,
                      "A group of float32, float16 or bfloat16 elementwise ops run as one loop (made by "
                      "fuse-elementwise; not exported).");
  d.num_inputs = -1;
  d.infer = infer_fused;
  d.parse_attrs = parse_attrs_as<FusedElemwiseAttrs>;
  d.differentiable = false;
  d.grad_uses_inputs = false;
}

}  // namespace kiln
