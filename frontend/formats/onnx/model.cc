// Loading and checking ONNX models (contract: frontend/formats/onnx/model.h).
#include "frontend/formats/onnx/model.h"

#include <cstdlib>

#include <onnx/checker.h>
#include <onnx/version_converter/convert.h>

#include <filesystem>
#include <fstream>

#include <fmt/ranges.h>

#include "frontend/formats/onnx/model_state.h"
#include "frontend/autograd.h"
#include "frontend/graph_eval.h"
#include "frontend/trace.h"

namespace kiln::onnx {

namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path, size_t limit) {
  std::error_code ec;
  KILN_CHECK(fs::is_regular_file(path, ec), IOError, "{}: no such file", path);
  auto size = fs::file_size(path, ec);
  KILN_CHECK(!ec, IOError, "{}: cannot read its size: {}", path, ec.message());
  KILN_CHECK(size <= limit, IOError, "{}: {} bytes is over the limit of {} bytes", path, size, limit);
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), IOError, "{}: cannot open for reading", path);
  std::string bytes(size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  KILN_CHECK(static_cast<size_t>(in.gcount()) == size, IOError, "{}: read {} of {} bytes", path, in.gcount(), size);
  return bytes;
}

ValueInfo value_info(const pb::ValueInfoProto& v, std::string_view source) {
  ValueInfo info{.name = v.name()};
  KILN_CHECK(v.type().has_tensor_type(), NotSupported, "{}: graph value '{}' is not a tensor (sequence, map or optional)",
             source, v.name());
  const pb::TypeProto_Tensor& t = v.type().tensor_type();
  std::optional<DType> dtype = dtype_from_onnx(t.elem_type());
  KILN_CHECK(dtype.has_value(), NotSupported, "{}: graph value '{}' has data type {}, which Kiln does not support",
             source, v.name(), onnx_dtype_name(t.elem_type()));
  info.dtype = *dtype;
  info.has_shape = t.has_shape();
  for (const pb::TensorShapeProto_Dimension& d : t.shape().dim()) {
    info.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    info.dim_params.push_back(d.has_dim_param() ? d.dim_param() : "");
  }
  return info;
}

}  // namespace

Model Model::load(const std::string& path) {
  std::string bytes = read_file(path, kMaxModelBytes);
  fs::path folder = fs::path(path).parent_path();
  return parse(bytes, path, folder.empty() ? std::string(".") : folder.string());
}

Model Model::parse(std::string_view bytes, std::string_view source, const std::string& folder) {
  KILN_CHECK(bytes.size() <= kMaxModelBytes, IOError, "{}: {} bytes is over the limit of {} bytes", source,
             bytes.size(), kMaxModelBytes);
  auto st = std::make_shared<State>();
  st->source = source;
  st->folder = folder;
  pb::ModelProto& m = st->proto;
  KILN_CHECK(m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), ValueError,
             "{}: not an ONNX model (the bytes do not parse as an onnx.ModelProto)", source);
  KILN_CHECK(m.has_graph() && m.ir_version() > 0, ValueError,
             "{}: not an ONNX model (expected an ir_version and a graph, found {}{})", source,
             m.ir_version() > 0 ? "" : "no ir_version", m.has_graph() ? "" : " and no graph");
  for (const pb::OperatorSetIdProto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") st->opset = o.version();
  }
  if (st->opset == 0) {
    std::vector<std::string> domains;
    for (const pb::OperatorSetIdProto& o : m.opset_import()) domains.push_back(fmt::format("{} {}", o.domain(), o.version()));
    throw NotSupported(fmt::format("{}: the model imports no opset of the default ONNX domain, only [{}]", source,
                                   fmt::join(domains, ", ")));
  }
  KILN_CHECK(st->opset <= kMaxOpset, NotSupported, "{}: opset {} is newer than the opsets Kiln reads ({} to {})",
             source, st->opset, kMinOpset, kMaxOpset);
  if (st->opset < kMinOpset) {
    // libonnx 1.12's version converter crashes on some malformed models
    // (fuzzing found null dereferences in graphProtoToGraph that its checker
    // lets through), so it runs only when the user vouches for the file.
    const char* upgrade = std::getenv("KILN_ONNX_UPGRADE");
    KILN_CHECK(upgrade != nullptr && std::string_view(upgrade) != "0", NotSupported,
               "{}: opset {} is older than the opsets Kiln reads ({} to {}); set KILN_ONNX_UPGRADE=1 to upgrade it "
               "with libonnx's version converter (trusted files only: that converter is not safe on malformed input)",
               source, st->opset, kMinOpset, kMaxOpset);
    // libonnx's converter indexes by element type without checking it (a
    // fuzzed model with elem_type 54 crashed it): every type is checked first.
    auto check_type = [&](int32_t t, const std::string& name, const char* what) {
      KILN_CHECK(pb::TensorProto_DataType_IsValid(t), ValueError,
                 "{}: {} '{}' has element type {}, which is not an ONNX TensorProto.DataType", source, what, name, t);
    };
    for (const auto* infos : {&m.graph().input(), &m.graph().output(), &m.graph().value_info()}) {
      for (const pb::ValueInfoProto& v : *infos)
        if (v.has_type() && v.type().has_tensor_type()) check_type(v.type().tensor_type().elem_type(), v.name(), "value");
    }
    for (const pb::TensorProto& t : m.graph().initializer()) check_type(t.data_type(), t.name(), "initializer");
    // It also dereferences values that nothing defines: only a graph the
    // checker accepts (defined, sorted inputs) reaches it.
    bool external = false;
    for (const pb::TensorProto& t : m.graph().initializer())
      external = external || t.data_location() == pb::TensorProto::EXTERNAL;
    if (!external) {
      try {
        pb::checker::check_model(m);
      } catch (const std::exception& e) {
        throw ValueError(fmt::format("{}: the ONNX checker rejects the model: {}", source, e.what()));
      }
    }
    try {
      m = pb::version_conversion::ConvertVersion(m, kUpgradeOpset);
    } catch (const std::exception& e) {
      throw NotSupported(fmt::format("{}: opset {} is older than the opsets Kiln reads ({} to {}), and libonnx's "
                                     "version converter cannot upgrade it: {}",
                                     source, st->opset, kMinOpset, kMaxOpset, e.what()));
    }
    // The converter keeps IR 3, whose rule that every initializer be a graph
    // input the initializers it adds (Pad's pads) break; opset 13 is IR 7.
    if (m.ir_version() < 7) m.set_ir_version(7);
    st->upgraded_from = st->opset;
    st->opset = kUpgradeOpset;
  }
  // Initializers first: Kiln's bounds checks name what is wrong more exactly
  // than the checker, and external data is read here, inside the model's folder.
  for (pb::TensorProto& t : *m.mutable_graph()->mutable_initializer()) {
    KILN_CHECK(!st->initializers.contains(t.name()), ValueError, "{}: initializer '{}' is given twice", source, t.name());
    NDArray a = decode_tensor(t, source, folder);
    if (t.data_location() == pb::TensorProto::EXTERNAL) {
      // The checker resolves external files against the working directory;
      // it checks the bytes read instead.
      t.clear_external_data();
      t.set_data_location(pb::TensorProto::DEFAULT);
      a.wait_to_read();
      t.set_raw_data(a.data(), a.nbytes());
    }
    if (is_floating(a.dtype())) st->params.insert(t.name());
    st->initializers.emplace(t.name(), std::move(a));
  }
  try {
    pb::checker::check_model(m);
  } catch (const std::exception& e) {
    throw ValueError(fmt::format("{}: the ONNX checker rejects the model: {}", source, e.what()));
  }
  // libonnx's shape inference does not run here: Kiln types every value
  // itself, per input signature, in to_graph, and libonnx 1.12's per-op
  // inference functions trust the attributes and input types the checker
  // leaves unchecked (a zero stride divides by zero in
  // convPoolShapeInference; ConvTranspose and others dereference null), so
  // on untrusted files they crashed where Kiln's own checks give an error.
  // The values live in st->initializers now; the proto keeps names, dims and dtypes.
  for (pb::TensorProto& t : *m.mutable_graph()->mutable_initializer()) {
    t.clear_raw_data();
    t.clear_float_data();
    t.clear_int32_data();
    t.clear_int64_data();
    t.clear_double_data();
    t.clear_uint64_data();
  }
  const pb::GraphProto& g = m.graph();
  KILN_CHECK(g.sparse_initializer_size() == 0, NotSupported, "{}: sparse initializers are not supported", source);
  for (const pb::NodeProto& n : g.node()) {
    if (n.op_type() != "BatchNormalization" || !(n.domain().empty() || n.domain() == "ai.onnx")) continue;
    for (int i = 3; i < n.input_size() && i < 5; ++i)
      if (st->params.contains(n.input(i))) st->aux.insert(n.input(i));
  }
  for (const pb::ValueInfoProto& v : g.input()) {
    if (!st->initializers.contains(v.name())) st->inputs.push_back(value_info(v, source));
  }
  for (const pb::ValueInfoProto& v : g.output()) st->outputs.push_back(value_info(v, source));
  return Model(std::move(st));
}

int64_t Model::ir_version() const { return state_->proto.ir_version(); }
int64_t Model::opset() const { return state_->opset; }
int64_t Model::file_opset() const { return state_->upgraded_from ? state_->upgraded_from : state_->opset; }
const std::string& Model::source() const { return state_->source; }
const std::vector<ValueInfo>& Model::inputs() const { return state_->inputs; }
const std::vector<ValueInfo>& Model::outputs() const { return state_->outputs; }
const ArrayMap& Model::initializers() const { return state_->initializers; }
bool Model::is_param(std::string_view name) const { return state_->params.contains(name); }
bool Model::is_aux(std::string_view name) const { return state_->aux.contains(name); }
int64_t Model::num_nodes() const { return state_->proto.graph().node_size(); }

std::string Model::producer() const {
  const pb::ModelProto& m = state_->proto;
  if (m.producer_name().empty()) return m.producer_version();
  return m.producer_version().empty() ? m.producer_name() : m.producer_name() + " " + m.producer_version();
}

std::map<std::string, int> Model::op_counts() const {
  std::map<std::string, int> counts;
  for (const pb::NodeProto& n : state_->proto.graph().node()) {
    bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    ++counts[default_domain ? n.op_type() : n.domain() + ":" + n.op_type()];
  }
  return counts;
}

Imported Model::to_graph(std::span<const TensorType> input_types, std::span<const NDArray> known) const {
  const State& st = *state_;
  std::vector<std::string> names;
  for (const ValueInfo& v : st.inputs) names.push_back(v.name);
  KILN_CHECK(input_types.size() == st.inputs.size(), ValueError, "{}: the model takes {} input(s) ({}), got {}",
             st.source, st.inputs.size(), fmt::join(names, ", "), input_types.size());
  for (size_t i = 0; i < input_types.size(); ++i) {
    const ValueInfo& v = st.inputs[i];
    const TensorType& t = input_types[i];
    KILN_CHECK(t.dtype == v.dtype, TypeError, "{}: input '{}' is {} in the model, got {}", st.source, v.name,
               dtype_name(v.dtype), dtype_name(t.dtype));
    if (!v.has_shape) continue;
    bool ok = t.shape.ndim() == static_cast<int>(v.dims.size());
    for (int d = 0; ok && d < t.shape.ndim(); ++d) ok = v.dims[static_cast<size_t>(d)] < 0 || v.dims[static_cast<size_t>(d)] == t.shape[d];
    std::vector<std::string> want;
    for (size_t d = 0; d < v.dims.size(); ++d)
      want.push_back(v.dims[d] >= 0 ? std::to_string(v.dims[d]) : v.dim_params[d].empty() ? "?" : v.dim_params[d]);
    KILN_CHECK(ok, ShapeError, "{}: input '{}' has shape [{}] in the model, got {}", st.source, v.name,
               fmt::join(want, ","), t.shape);
  }
  KILN_CHECK(known.empty() || known.size() == input_types.size(), ValueError, "{}: {} known input values for {} inputs",
             st.source, known.size(), input_types.size());
  // Folding computes real values at import, also when the graph is built
  // inside a traced or recorded forward (a hybridized SymbolBlock's first call).
  trace::Suspend no_trace;
  autograd::Pause no_record;
  return build_graph(st, input_types, known);
}

std::vector<NDArray> Model::bind(const Imported& im, std::span<const NDArray> inputs, Device device) const {
  const ir::Graph& g = im.graph;
  KILN_CHECK(inputs.size() == state_->inputs.size(), ValueError, "{}: the model takes {} input(s), got {}",
             state_->source, state_->inputs.size(), inputs.size());
  std::vector<NDArray> values(g.size());
  auto on_device = [&](const NDArray& a) { return a.device() == device ? a : a.copy_to(device); };
  for (size_t i = 0; i < inputs.size(); ++i) values[static_cast<size_t>(*g.find(state_->inputs[i].name))] = inputs[i];
  for (size_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(static_cast<ir::NodeId>(id));
    if (n.kind == ir::NodeKind::kParam || n.kind == ir::NodeKind::kAux) {
      values[id] = on_device(state_->initializers.at(n.name));
    } else if (n.kind == ir::NodeKind::kConst) {
      values[id] = on_device(im.consts.at(static_cast<size_t>(n.inputs[0].index)));
    }
  }
  return values;
}

std::vector<NDArray> Model::run(std::span<const NDArray> inputs) const {
  std::vector<TensorType> types;
  for (const NDArray& x : inputs) types.push_back({x.shape(), x.dtype()});
  std::vector<NDArray> known(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].size() <= kMaxKnownInputElements) known[i] = inputs[i].copy_to(Device::cpu(0));
  Imported im = to_graph(types, known);
  return eval_graph(im.graph, bind(im, inputs, inputs.empty() ? Device::cpu(0) : inputs[0].device()));
}

NDArray load_tensor_file(const std::string& path) {
  std::string bytes = read_file(path, kMaxModelBytes);
  pb::TensorProto t;
  KILN_CHECK(t.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), ValueError,
             "{}: not a serialized onnx.TensorProto", path);
  return decode_tensor(t, path, "");
}

}  // namespace kiln::onnx
