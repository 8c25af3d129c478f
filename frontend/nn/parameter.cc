#include "frontend/nn/parameter.h"

#include <regex>

#include <fmt/ranges.h>

#include "frontend/nd.h"
#include "frontend/trace.h"

namespace kiln::nn {

namespace detail {

struct ParameterState {
  std::string name;
  Shape shape;
  ParameterOptions options;
  // One copy per device, in the order the devices were given. Empty until
  // initialized.
  std::vector<std::pair<Device, NDArray>> data;
  // Set by initialize() while the shape is incomplete.
  struct Deferred {
    init::Initializer default_init;
    std::vector<Device> devices;
  };
  std::optional<Deferred> deferred;
};

}  // namespace detail

namespace {

bool complete(const Shape& s) {
  for (int64_t d : s) {
    if (d == 0) return false;
  }
  return true;
}

std::string device_list(const std::vector<std::pair<Device, NDArray>>& data) {
  std::vector<std::string> names;
  for (auto& [d, _] : data) names.push_back(d.to_string());
  return fmt::format("{}", fmt::join(names, ", "));
}

void check_devices(const std::string& name, const std::vector<Device>& devices) {
  KILN_CHECK(!devices.empty(), ValueError, "Parameter '{}': initialize needs at least one device", name);
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      KILN_CHECK(!(devices[i] == devices[j]), ValueError, "Parameter '{}': device {} is listed twice", name,
                 devices[i]);
    }
  }
}

}  // namespace

Parameter::Parameter(std::string name, Shape shape, ParameterOptions options)
    : state_(std::make_shared<detail::ParameterState>()) {
  if (options.is_aux) options.grad_req = GradReq::kNull;
  state_->name = std::move(name);
  state_->shape = shape;
  state_->options = std::move(options);
}

detail::ParameterState& Parameter::state() const {
  KILN_CHECK(state_ != nullptr, ValueError, "Parameter: the handle is empty (default-constructed)");
  return *state_;
}

const std::string& Parameter::name() const { return state().name; }
void Parameter::set_name(std::string name) { state().name = std::move(name); }
const Shape& Parameter::shape() const { return state().shape; }
bool Parameter::shape_known() const { return complete(state().shape); }
DType Parameter::dtype() const { return state().options.dtype; }
bool Parameter::is_aux() const { return state().options.is_aux; }
GradReq Parameter::grad_req() const { return state().options.grad_req; }
const std::optional<init::Initializer>& Parameter::init() const { return state().options.init; }
void Parameter::set_init(std::optional<init::Initializer> init) { state().options.init = std::move(init); }
bool Parameter::is_initialized() const { return !state().data.empty(); }
bool Parameter::is_deferred() const { return state().deferred.has_value(); }

void Parameter::set_grad_req(GradReq req) {
  auto& s = state();
  KILN_CHECK(!s.options.is_aux || req == GradReq::kNull, ValueError,
             "Parameter '{}' is an auxiliary state and takes no gradient (grad_req must be null)", s.name);
  if (req == s.options.grad_req) return;
  s.options.grad_req = req;
  for (auto& [_, a] : s.data) {
    if (req == GradReq::kNull) {
      a = a.detach();
    } else {
      a.attach_grad(req);
    }
  }
}

void Parameter::cast(DType dtype) {
  auto& s = state();
  if (s.options.dtype == dtype) return;
  s.options.dtype = dtype;
  for (auto& [_, a] : s.data) {
    a = a.astype(dtype).detach();
    if (s.options.grad_req != GradReq::kNull) a.attach_grad(s.options.grad_req);
  }
}

void Parameter::init_now(const NDArray& value, const std::vector<Device>& devices, bool value_is_fresh) {
  auto& s = state();
  KILN_ASSERT(value.shape() == s.shape);
  bool same_devices = s.data.size() == devices.size();
  for (size_t i = 0; same_devices && i < devices.size(); ++i) same_devices = s.data[i].first == devices[i];
  if (same_devices) {  // re-initialization: keep the arrays (and grad buffers) others may hold
    for (auto& [_, a] : s.data) a.assign(value.device() == a.device() ? value : value.copy_to(a.device()));
  } else {
    s.data.clear();
    for (size_t i = 0; i < devices.size(); ++i) {
      Device d = devices[i];
      // The first copy may be `value` itself when nobody else holds it.
      NDArray a = value.device() != d ? value.copy_to(d) : value_is_fresh && i == 0 ? value : value.copy();
      if (a.dtype() != s.options.dtype) a = a.astype(s.options.dtype);
      if (s.options.grad_req != GradReq::kNull) a.attach_grad(s.options.grad_req);
      s.data.emplace_back(d, std::move(a));
    }
  }
  s.deferred.reset();
}

// Initialization computes real values, also when a deferred initialization
// completes inside a forward that hybridize() is tracing (trace::Suspend).
void Parameter::initialize(const init::Initializer& default_init, const std::vector<Device>& devices,
                           bool force_reinit) {
  trace::Suspend no_trace;
  auto& s = state();
  check_devices(s.name, devices);
  if (is_initialized() && !force_reinit) return;
  if (!complete(s.shape)) {
    s.deferred = detail::ParameterState::Deferred{default_init, devices};
    return;
  }
  ArrayOptions options{s.options.dtype, devices.front()};
  NDArray value = s.options.init ? s.options.init->make(s.shape, options, s.name)
                                 : default_init.make_for_name(s.name, s.shape, options);
  init_now(value, devices, true);
}

void Parameter::complete_shape(const Shape& shape) {
  trace::Suspend no_trace;
  auto& s = state();
  KILN_CHECK(shape.ndim() == s.shape.ndim(), ShapeError,
             "Parameter '{}': shape {} from the input has {} dims, the parameter's shape {} has {}", s.name, shape,
             shape.ndim(), s.shape, s.shape.ndim());
  Shape merged = s.shape;
  for (int i = 0; i < shape.ndim(); ++i) {
    KILN_CHECK(s.shape[i] == 0 || shape[i] == s.shape[i], ShapeError,
               "Parameter '{}': shape {} from the input does not match the parameter's shape {} (dim {})", s.name,
               shape, s.shape, i);
    if (merged[i] == 0) merged[i] = shape[i];
  }
  s.shape = merged;
  if (s.deferred && complete(s.shape)) {
    auto deferred = std::move(*s.deferred);
    s.deferred.reset();
    initialize(deferred.default_init, deferred.devices);
  }
}

const NDArray& Parameter::copy_on(Device device, std::string_view what) const {
  auto& s = state();
  if (s.data.empty()) {
    KILN_CHECK(!s.deferred, ValueError,
               "Parameter '{}' has not been initialized yet: initialization was deferred because its shape {} has "
               "unknown (0) dims, which the block infers at its first forward call. Run the block on one batch of "
               "input before reading the parameter's {}",
               s.name, s.shape, what);
    throw ValueError(fmt::format(
        "Parameter '{}' (shape {}) has not been initialized: call initialize() on its block (net.initialize()) "
        "or on the parameter before reading its {}",
        s.name, s.shape, what));
  }
  for (auto& [d, a] : s.data) {
    if (d == device) return a;
  }
  throw DeviceError(
      fmt::format("Parameter '{}' has no copy on {}: it was initialized on {}", s.name, device, device_list(s.data)));
}

NDArray Parameter::data(Device device) const {
  if (trace::Tracer* t = trace::current()) return t->param(*this, device);
  return copy_on(device, "data");
}

NDArray Parameter::data() const {
  auto& s = state();
  if (trace::Tracer* t = trace::current()) {
    copy_on(s.data.empty() ? Device::cpu(0) : s.data.front().first, "data");  // initialized?
    return t->param(*this, s.data.size() == 1 ? s.data.front().first : Device::cpu(0));
  }
  if (s.data.size() > 1) {
    throw ValueError(fmt::format("Parameter '{}' has copies on several devices ({}): pass the device to data()", s.name,
                                 device_list(s.data)));
  }
  return copy_on(s.data.empty() ? Device::cpu(0) : s.data.front().first, "data");
}

NDArray Parameter::grad(Device device) const {
  auto& s = state();
  const NDArray& a = copy_on(device, "gradient");
  KILN_CHECK(s.options.grad_req != GradReq::kNull, ValueError,
             "Parameter '{}' has grad_req null{}: it has no gradient buffer", s.name,
             s.options.is_aux ? " (an auxiliary state)" : "");
  return a.grad();
}

NDArray Parameter::grad() const {
  auto& s = state();
  if (s.data.size() > 1) {
    throw ValueError(fmt::format("Parameter '{}' has copies on several devices ({}): pass the device to grad()", s.name,
                                 device_list(s.data)));
  }
  return grad(s.data.empty() ? Device::cpu(0) : s.data.front().first);
}

std::vector<NDArray> Parameter::list_data() const {
  std::vector<NDArray> out;
  for (auto& d : list_devices()) out.push_back(data(d));
  if (out.empty()) out.push_back(data());  // throws the "not initialized" error
  return out;
}

std::vector<NDArray> Parameter::list_grad() const {
  std::vector<NDArray> out;
  for (auto& d : list_devices()) out.push_back(grad(d));
  if (out.empty()) out.push_back(grad());
  return out;
}

std::vector<Device> Parameter::list_devices() const {
  std::vector<Device> out;
  for (auto& [d, _] : state().data) out.push_back(d);
  if (out.empty() && state().deferred) out = state().deferred->devices;
  return out;
}

void Parameter::set_data(const NDArray& value) { set_data(value, {value.device()}); }

void Parameter::set_data(const NDArray& value, const std::vector<Device>& devices) {
  trace::Suspend no_trace;
  auto& s = state();
  KILN_CHECK(!value.is_none(), ValueError, "Parameter '{}': set_data got an empty (none) array", s.name);
  if (is_initialized()) {
    KILN_CHECK(value.shape() == s.shape, ShapeError, "Parameter '{}': set_data got shape {}, the parameter has {}",
               s.name, value.shape(), s.shape);
    for (auto& [_, a] : s.data) a.assign(value.device() == a.device() ? value : value.copy_to(a.device()));
    return;
  }
  // A deferred initialize() already chose the devices (as Gluon's _load_init).
  std::vector<Device> target = s.deferred ? s.deferred->devices : devices;
  check_devices(s.name, target);
  auto deferred = std::move(s.deferred);
  s.deferred.reset();
  try {
    complete_shape(value.shape());
  } catch (...) {
    s.deferred = std::move(deferred);
    throw;
  }
  init_now(value, target, false);
}

void Parameter::zero_grad() {
  auto& s = state();
  if (s.options.grad_req == GradReq::kNull) return;
  for (auto& [_, a] : s.data) a.grad().assign(0.0);
}

std::string Parameter::to_string() const {
  if (is_none()) return "Parameter(none)";
  return fmt::format("Parameter {} (shape={}, dtype={})", name(), shape(), dtype());
}

// ---- ParameterDict

void ParameterDict::insert(std::string name, Parameter p) {
  KILN_CHECK(!contains(name), ValueError, "ParameterDict: a parameter named '{}' is already present", name);
  items_.emplace_back(std::move(name), std::move(p));
}

bool ParameterDict::contains(std::string_view name) const {
  for (auto& [n, _] : items_) {
    if (n == name) return true;
  }
  return false;
}

Parameter ParameterDict::at(std::string_view name) const {
  for (auto& [n, p] : items_) {
    if (n == name) return p;
  }
  throw ValueError(fmt::format("ParameterDict: no parameter named '{}' (known: {})", name, fmt::join(names(), ", ")));
}

std::vector<std::string> ParameterDict::names() const {
  std::vector<std::string> out;
  for (auto& [n, _] : items_) out.push_back(n);
  return out;
}

ParameterDict ParameterDict::select(const std::string& regex) const {
  std::regex re;
  try {
    re = std::regex(regex);
  } catch (const std::regex_error& e) {
    throw ValueError(fmt::format("ParameterDict::select: malformed regex '{}': {}", regex, e.what()));
  }
  ParameterDict out;
  for (auto& [n, p] : items_) {
    if (std::regex_search(n, re, std::regex_constants::match_continuous)) out.items_.emplace_back(n, p);
  }
  return out;
}

void ParameterDict::initialize(const init::Initializer& init, const std::vector<Device>& devices, bool force_reinit) {
  for (auto& [_, p] : items_) p.initialize(init, devices, force_reinit);
}

void ParameterDict::zero_grad() {
  for (auto& [_, p] : items_) {
    if (p.is_initialized()) p.zero_grad();
  }
}

void ParameterDict::set_grad_req(GradReq req) {
  for (auto& [_, p] : items_) {
    if (!p.is_aux()) p.set_grad_req(req);
  }
}

int64_t ParameterDict::total_size() const {
  int64_t n = 0;
  for (auto& [_, p] : items_) n += p.shape().size();
  return n;
}

std::string ParameterDict::to_string() const {
  std::string s = "ParameterDict(\n";
  for (auto& [n, p] : items_) s += fmt::format("  Parameter {} (shape={}, dtype={})\n", n, p.shape(), p.dtype());
  return s + ")";
}

}  // namespace kiln::nn
