// Parses the IR text form (see ir/printer.cc). Errors name line and column.
#include <cctype>
#include <charconv>

#include "ir/graph.h"

namespace kiln::ir {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Graph parse() {
    expect_word("graph");
    expect('{');
    for (;;) {
      skip_space();
      if (peek_word("return")) break;
      parse_node();
    }
    expect_word("return");
    std::vector<Entry> outs;
    skip_space_inline();
    while (peek() == '%') {
      outs.push_back(parse_entry());
      skip_space_inline();
      if (peek() != ',') break;
      ++pos_;
      skip_space_inline();
    }
    g_.set_outputs(std::move(outs));
    expect('}');
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw ValueError(fmt::format("IR text, line {} column {}: {}", line, col, what));
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  void skip_space_inline() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }
  bool peek_word(std::string_view w) const { return text_.substr(pos_, w.size()) == w; }
  void expect_word(std::string_view w) {
    skip_space();
    if (!peek_word(w)) fail(fmt::format("expected '{}'", w));
    pos_ += w.size();
  }

  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '/' || c == ':';
  }
  std::string parse_word() {
    size_t start = pos_;
    while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
    if (start == pos_) fail("expected a name");
    return std::string(text_.substr(start, pos_ - start));
  }
  int64_t parse_int() {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(text_.data() + pos_, text_.data() + text_.size(), v);
    if (ec != std::errc()) fail("expected an integer");
    pos_ = static_cast<size_t>(p - text_.data());
    return v;
  }

  TensorType parse_type() {
    skip_space_inline();
    size_t start = pos_;
    while (pos_ < text_.size() && std::isalnum(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    DType dtype;
    try {
      dtype = parse_dtype(text_.substr(start, pos_ - start));
    } catch (const Error& e) {
      fail(e.what());
    }
    if (peek() != '[') fail("expected '[' after the dtype");
    size_t end = text_.find(']', pos_);
    if (end == std::string_view::npos) fail("unterminated shape");
    Shape shape;
    try {
      shape = parse_shape(text_.substr(pos_, end - pos_ + 1));
    } catch (const Error& e) {
      fail(e.what());
    }
    pos_ = end + 1;
    return {shape, dtype};
  }

  Entry parse_entry() {
    if (peek() != '%') fail("expected '%name'");
    ++pos_;
    std::string name = parse_word();
    int32_t index = 0;
    if (peek() == '#') {
      ++pos_;
      index = static_cast<int32_t>(parse_int());
    }
    auto id = g_.find(name);
    if (!id) fail(fmt::format("'%{}' is used before it is defined", name));
    if (index >= g_.node(*id).num_outputs()) fail(fmt::format("'%{}' has no output {}", name, index));
    return {*id, index};
  }

  std::string parse_quoted() {
    if (peek() != '"') fail("expected a quoted value");
    ++pos_;
    std::string s;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
      s += text_[pos_++];
    }
    if (peek() != '"') fail("unterminated string");
    ++pos_;
    return s;
  }

  void parse_node() {
    if (peek() != '%') fail("expected '%name = ...' or 'return'");
    ++pos_;
    std::string name = parse_word();
    expect('=');
    skip_space_inline();
    std::string head = parse_word();
    if (head == "input" || head == "param" || head == "aux" || head == "const") {
      TensorType t = parse_type();
      if (head == "input") {
        g_.add_input(name, t);
      } else if (head == "const") {
        skip_space_inline();
        expect_word("slot=");
        g_.add_const(name, t, static_cast<int32_t>(parse_int()));
      } else {
        g_.add_param(name, t, head == "aux");
      }
      return;
    }
    const OpDef* def = find_op(head);
    if (!def) fail(fmt::format("unknown op '{}'", head));
    expect('(');
    std::vector<Entry> inputs;
    skip_space_inline();
    while (peek() != ')') {
      inputs.push_back(parse_entry());
      skip_space_inline();
      if (peek() == ',') {
        ++pos_;
        skip_space_inline();
      }
    }
    ++pos_;
    AttrMap attrs;
    skip_space_inline();
    if (peek() == '{') {
      ++pos_;
      skip_space_inline();
      while (peek() != '}') {
        std::string key = parse_word();
        if (peek() != '=') fail("expected '=' after an attribute name");
        ++pos_;
        attrs[key] = parse_quoted();
        skip_space_inline();
        if (peek() == ',') {
          ++pos_;
          skip_space_inline();
        }
      }
      ++pos_;
    }
    OpAttrs parsed;
    try {
      if (def->parse_attrs) {
        parsed = def->parse_attrs(def->name, attrs);
      } else if (!attrs.empty()) {
        fail(fmt::format("op {} takes no attributes", def->name));
      }
      auto outs = g_.add_op(def->id, parsed, inputs, name);
      skip_space_inline();
      if (peek() == ':') {  // the recorded types must match inference
        ++pos_;
        for (size_t i = 0; i < outs.size(); ++i) {
          TensorType t = parse_type();
          if (!(t == g_.type(outs[i]))) {
            fail(fmt::format("node '{}' output {} is written as {}{} but infers as {}{}", name, i,
                             dtype_short_name(t.dtype), t.shape, dtype_short_name(g_.type(outs[i]).dtype),
                             g_.type(outs[i]).shape));
          }
          skip_space_inline();
          if (peek() == ',') ++pos_;
        }
      }
    } catch (const ValueError&) {
      throw;
    } catch (const Error& e) {
      fail(e.what());
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  Graph g_;
};

}  // namespace

Graph parse_graph(std::string_view text) { return Parser(text).parse(); }

}  // namespace kiln::ir
