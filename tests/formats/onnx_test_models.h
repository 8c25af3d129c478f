// Small ONNX models built in a test with libonnx's protobuf classes, for the
// ONNX import suites (onnx_import_test.cc, onnx_recurrent_test.cc):
//
//   ::onnx::ModelProto m = node_model("Einsum", 13, {{"a", TP::FLOAT, {2, 3}}, {"b", TP::FLOAT, {3, 2}}}, {},
//                                     {"a", "b"}, {{"y", TP::FLOAT, {2, 2}}});
//   set_attr(m.mutable_graph()->mutable_node(0), "equation", "ij,jk");
//   onnx::Model::parse(m.SerializeAsString(), "einsum.onnx").run(...);
//
// node_model builds a checker-valid model of one node ('node0', default
// domain); tensor, set_attr* add initializers and attributes; TempDir,
// read_bytes and write_bytes put models on disk. Nothing here validates
// beyond what the ONNX checker does at parse time. A program that includes
// it links libonnx (CMake target `onnx`). TempDir's folder is one per
// process: two alive at once share it.
//
// Including this header also sets KILN_ONNX_UPGRADE=1 before main(): models
// of opsets 7 to 12 go through libonnx's version converter, which Kiln runs
// only on request (frontend/formats/onnx/model.cc); the models built here
// are trusted.
#pragma once

#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

[[maybe_unused]] static const bool kUpgradeOldOpsets = [] { return setenv("KILN_ONNX_UPGRADE", "1", 1) == 0; }();

namespace kiln::test {

// One graph input or output: name, ONNX element type (TensorProto::FLOAT,
// ...), dims (none: a scalar).
struct ValueSpec {
  std::string name;
  int type;
  std::vector<int64_t> dims;
};

// A graph of one node `op` at `opset` (IR version 8): `inputs` bound at run
// time, `initializers` known at import, `node_inputs` the node's input names
// in order ("" for an absent optional one), every one of `outputs` a node
// output and a graph output.
inline ::onnx::ModelProto node_model(const std::string& op, int opset, const std::vector<ValueSpec>& inputs,
                                     const std::vector<::onnx::TensorProto>& initializers,
                                     const std::vector<std::string>& node_inputs, const std::vector<ValueSpec>& outputs) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln-test");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto add = [](::onnx::ValueInfoProto* v, const ValueSpec& s) {
    v->set_name(s.name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(s.type);
    auto* shape = t->mutable_shape();  // no dims: a scalar
    for (int64_t d : s.dims) shape->add_dim()->set_dim_value(d);
  };
  for (const ValueSpec& s : inputs) add(g->add_input(), s);
  for (const ValueSpec& s : outputs) add(g->add_output(), s);
  for (const ::onnx::TensorProto& t : initializers) *g->add_initializer() = t;
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("node0");
  for (const std::string& i : node_inputs) n->add_input(i);
  for (const ValueSpec& s : outputs) n->add_output(s.name);
  return m;
}

// A tensor `name` of ONNX element `type` and `dims` holding `values` as
// raw_data (T must have the element's size; the checker rejects a mismatch).
template <typename T>
::onnx::TensorProto tensor(const std::string& name, int type, std::vector<int64_t> dims, const std::vector<T>& values) {
  ::onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)));
  return t;
}

// Adds attribute `name` to node `n`: a string, int, float or list of strings.
inline void set_attr(::onnx::NodeProto* n, const std::string& name, const std::string& s) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(s);
}

inline void set_attr_int(::onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

inline void set_attr_float(::onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

inline void set_attr_strings(::onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRINGS);
  for (const std::string& s : v) a->add_strings(s);
}

// The file's bytes ("" when it cannot be read).
inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh directory (named after the process), removed afterwards.
struct TempDir {
  TempDir()
      : path_(std::filesystem::temp_directory_path() / fmt::format("kiln_onnx_test_{}", ::getpid())) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path path_;
};

}  // namespace kiln::test
