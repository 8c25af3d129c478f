// Parameter and ParameterDict: the learnable (and auxiliary) arrays of blocks.
//
//   nn::Parameter w("weight", Shape{10, 0});      // dim 1 unknown until the first forward
//   w.initialize(init::Xavier());                 // deferred: the shape is not complete yet
//   w.complete_shape(Shape{10, 784});             // what Dense::forward does: initializes now
//   NDArray v = w.data();                         // [10,784], gradient buffer attached
//   auto params = net.collect_params().select(".*weight");
//   params.zero_grad();
//
// A Parameter is a cheap-to-copy handle: copies share the state (name, shape,
// values, gradients), so a block and a Trainer holding the same Parameter see
// the same arrays. A default-constructed Parameter is empty (`is_none`).
//
// Shapes: a dim of 0 means "unknown". initialize() on a parameter whose shape
// is not complete records the initializer and devices and returns; the owning
// layer completes the shape at its first forward (from the input's shape) and
// the values are drawn then (Gluon's deferred initialization).
//
// Values are kept per device (a copy per Device in `list_devices()`, all equal
// after initialize); layers read `data(x.device())`. With grad_req write or
// add, every copy has a gradient buffer attached (NDArray::attach_grad), so
// autograd::backward writes into `grad()`. Aux states (BatchNorm's running
// mean and var) have `is_aux` set and grad_req null; export names them "aux:".
//
// Thread safety: none; set up and initialize parameters from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frontend/ndarray.h"
#include "frontend/nn/initializer.h"

namespace kiln::nn {

struct ParameterOptions {
  DType dtype = DType::kFloat32;
  GradReq grad_req = GradReq::kWrite;
  // The parameter's own initializer; without one, the initializer passed to
  // initialize() applies (by name: see init::Initializer::make_for_name).
  std::optional<init::Initializer> init;
  // An auxiliary state: never receives a gradient (grad_req is forced to null).
  bool is_aux = false;
};

namespace detail {
struct ParameterState;
}

class Parameter {
 public:
  Parameter() = default;
  Parameter(std::string name, Shape shape, ParameterOptions options = {});
  // Copies share state; there is no move (a moved-from handle stays valid).
  Parameter(const Parameter&) = default;
  Parameter& operator=(const Parameter&) = default;

  bool is_none() const { return state_ == nullptr; }
  // The registration name; Block::initialize replaces it by the structural
  // name from the initialized block ("0.weight"), which error messages show.
  const std::string& name() const;
  void set_name(std::string name);
  const Shape& shape() const;
  // True when no dim is unknown (0).
  bool shape_known() const;
  DType dtype() const;
  bool is_aux() const;
  GradReq grad_req() const;
  // Re-attaches (zeroed) gradient buffers, or drops them for kNull. Aux
  // states accept only kNull (ValueError otherwise).
  void set_grad_req(GradReq req);
  const std::optional<init::Initializer>& init() const;
  void set_init(std::optional<init::Initializer> init);

  // Draws the values with the parameter's own initializer, else `default_init`,
  // on every device (one copy each, identical). Deferred when the shape is not
  // complete. Already initialized: nothing happens unless `force_reinit`, which
  // draws new values (into the existing arrays when the devices are the same).
  void initialize(const init::Initializer& default_init = init::Uniform(),
                  const std::vector<Device>& devices = {Device::cpu(0)}, bool force_reinit = false);
  void initialize(const init::Initializer& default_init, Device device, bool force_reinit = false) {
    initialize(default_init, std::vector<Device>{device}, force_reinit);
  }
  bool is_initialized() const;
  // initialize() was called and waits for the shape.
  bool is_deferred() const;
  // Fills the unknown dims from `shape` (known dims must agree: ShapeError
  // naming the parameter) and finishes a deferred initialization.
  void complete_shape(const Shape& shape);

  // The values / gradient buffer. Without a device: the only copy (ValueError
  // when there are several). Before initialization: ValueError naming the
  // parameter and telling to call initialize() or to run a first forward.
  NDArray data() const;
  NDArray data(Device device) const;
  NDArray grad() const;
  NDArray grad(Device device) const;
  std::vector<NDArray> list_data() const;
  std::vector<NDArray> list_grad() const;
  std::vector<Device> list_devices() const;

  // Initialized: copies `value` (converted to dtype()) into every copy; the
  // shapes must be equal (ShapeError). Not initialized: completes the shape
  // from `value` and initializes from a copy of it, on the devices given to
  // a deferred initialize(), else on `devices` (default: value's device).
  void set_data(const NDArray& value);
  void set_data(const NDArray& value, const std::vector<Device>& devices);
  // Zeroes every gradient buffer (queued).
  void zero_grad();
  // Converts the values on every device to `dtype` (rounded to nearest even)
  // and makes it the parameter's dtype; gradient buffers are re-attached in
  // the new dtype. Handles to the old arrays keep the old values. Gluon's
  // Parameter.cast; Block::cast calls it for pure low-precision inference.
  void cast(DType dtype);

  // Same state (copies of one handle).
  bool operator==(const Parameter& o) const { return state_ == o.state_; }
  const void* id() const { return state_.get(); }

  // "Parameter 0.weight (shape=[256,0], dtype=float32)".
  std::string to_string() const;

 private:
  detail::ParameterState& state() const;
  const NDArray& copy_on(Device device, std::string_view what) const;
  void init_now(const NDArray& value, const std::vector<Device>& devices, bool value_is_fresh);

  std::shared_ptr<detail::ParameterState> state_;
};

// Ordered name -> Parameter (the order parameters were registered in,
// depth first: a block's own parameters, then each child's).
class ParameterDict {
 public:
  using Item = std::pair<std::string, Parameter>;

  // ValueError when `name` is already present.
  void insert(std::string name, Parameter p);
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  bool contains(std::string_view name) const;
  // ValueError naming `name` and the known names when absent.
  // A handle (sharing state with the stored one).
  Parameter at(std::string_view name) const;
  Parameter operator[](std::string_view name) const { return at(name); }
  std::vector<Item>::const_iterator begin() const { return items_.begin(); }
  std::vector<Item>::const_iterator end() const { return items_.end(); }
  std::vector<std::string> names() const;

  // The parameters whose name matches `regex` at its start (Python's re.match,
  // as Gluon's collect_params(select)): ".*weight" keeps "0.weight".
  // ValueError for a malformed regex.
  ParameterDict select(const std::string& regex) const;

  void initialize(const init::Initializer& init = init::Uniform(),
                  const std::vector<Device>& devices = {Device::cpu(0)}, bool force_reinit = false);
  void zero_grad();
  void set_grad_req(GradReq req);
  // Elements over all parameters (unknown dims count as 0).
  int64_t total_size() const;

  std::string to_string() const;  // one Parameter line per entry

 private:
  std::vector<Item> items_;
};

}  // namespace kiln::nn
