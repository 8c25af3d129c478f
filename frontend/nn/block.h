// Block and HybridBlock: the base of every layer and model (Gluon's nn.Block).
//
//   struct HybridNet : nn::HybridBlock {
//     nn::Dense hidden{4}, output{2};
//     HybridNet() { register_child("hidden", hidden); register_child("output", output); }
//     NDArray forward(const NDArray& x) override { return output(nd::relu(hidden(x))); }
//   };
//   HybridNet net;
//   net.initialize();                          // deferred: shapes come with the first call
//   NDArray y = net(nd::ones({1, 8}));         // operator() runs forward (and hooks)
//   net.collect_params().names();              // hidden.weight, hidden.bias, output.weight, output.bias
//   std::cout << net;                          // HybridNet(\n  (hidden): Dense(8 -> 4, linear)\n ...)
//
// A Block is a cheap-to-copy handle: copies share its state (children and
// parameters in registration order, hooks, the hybridize flag). Members of a
// derived class are copied as they are, so keep them handles too (layers,
// Parameters) or constant configuration.
//
// register_child(name, block) stores a shared copy of `block` *as its own
// type* (T = nn::Dense, HybridNet, ...): the copy shares state with the member
// it came from, and calling it through the parent (printing, collect_params,
// Sequential's forward) dispatches to T's forward. Do not slice a layer into a
// plain `nn::Block` value (that copy has only Block's forward, which throws);
// hold it by its type or as std::shared_ptr<Block>.
//
// Names are structural: a parameter's name in collect_params() is the path of
// registration names from the block it was collected from ("0.weight",
// "features.1.running_mean"), the same for every instance of a model (Gluon 2).
// Names must be non-empty and must not contain '.'.
//
// forward must stay a plain function of its NDArray inputs (plus parameters
// and constant configuration): hybridize() traces it into a graph, and code
// that reads array values inside forward cannot be traced (frontend/trace.h).
//
// Errors (kiln::Error) thrown inside a block's forward get the innermost block
// that was called prefixed: "Dense 'hidden': FullyConnected(...): ...".
// Copies and moves of handles (blocks, parameters) share state: a moved-from
// handle stays valid.
//
// Thread safety: none; use a block (and its copies) from one thread at a time.
// (The arrays it computes are ordered by the engine as usual.)
#pragma once

#include <concepts>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frontend/ndarray.h"
#include "frontend/nn/initializer.h"
#include "frontend/nn/parameter.h"

namespace kiln {
class CachedOp;
}

namespace kiln::nn {

class Block;

// Called before / after a block's forward (Gluon's forward pre-hooks and hooks).
using ForwardPreHook = std::function<void(Block& block, std::span<const NDArray> inputs)>;
using ForwardHook =
    std::function<void(Block& block, std::span<const NDArray> inputs, std::span<const NDArray> outputs)>;

namespace detail {
struct BlockState;
}

// Removes a hook again; harmless after the block is gone or when called twice.
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<detail::BlockState> state, int id) : state_(std::move(state)), id_(id) {}
  void detach();

 private:
  std::weak_ptr<detail::BlockState> state_;
  int id_ = -1;
};

struct HybridizeOptions {
  bool active = true;
  // Mixed precision for every call: the 16-bit dtype (float16 or bfloat16)
  // of the amp-cast policy (frontend/amp.h). Unset: each call follows the
  // amp::Autocast scope around it, if any.
  std::optional<DType> amp;
};

class Block {
 public:
  using Child = std::pair<std::string, std::shared_ptr<Block>>;

  Block();
  Block(const Block&) = default;
  Block& operator=(const Block&) = default;
  virtual ~Block();

  // The computation. The default single-input forward throws NotSupported
  // (the block did not override it); the default multi-input forward requires
  // one input and calls the single-input one.
  virtual NDArray forward(const NDArray& x);
  virtual std::vector<NDArray> forward(std::span<const NDArray> xs);

  // Runs the pre-hooks, forward, then the hooks. A hybridized block called
  // outside a trace is served from its CachedOp (frontend/cached_op.h): the
  // first call with a new signature traces forward into a graph.
  NDArray operator()(const NDArray& x);
  std::vector<NDArray> operator()(std::span<const NDArray> xs);

  // Stores a shared copy of `block` as child `name` (ValueError for a repeated
  // or malformed name, for the block itself, or for a non-hybrid child of a
  // HybridBlock). Returns the stored copy.
  template <std::derived_from<Block> T>
  T& register_child(std::string name, T block) {
    auto stored = std::make_shared<T>(std::move(block));
    T& ref = *stored;
    register_child(std::move(name), std::shared_ptr<Block>(std::move(stored)));
    return ref;
  }
  Block& register_child(std::string name, std::shared_ptr<Block> block);

  // Registers `p` under `name` (its name becomes `name` if it had none);
  // returns a handle sharing p's state.
  Parameter register_parameter(std::string name, Parameter p);
  Parameter register_parameter(std::string name, Shape shape, ParameterOptions options = {});

  const std::vector<Child>& children() const;
  // IndexError naming `name` and the children when there is no such child.
  Block& child(std::string_view name) const;
  // This block's own parameters (not its children's), keyed by local name.
  ParameterDict own_parameters() const;
  // Every parameter of this block and its descendants under its structural
  // name, each once (a shared parameter under its first path); filtered by
  // `select` (ParameterDict::select) when not empty.
  ParameterDict collect_params(const std::string& select = "") const;

  // Initializes every parameter (see Parameter::initialize) and renames each
  // to its structural name from this block.
  void initialize(const init::Initializer& init = init::Uniform(),
                  const std::vector<Device>& devices = {Device::cpu(0)}, bool force_reinit = false);
  void initialize(const init::Initializer& init, Device device, bool force_reinit = false) {
    initialize(init, std::vector<Device>{device}, force_reinit);
  }
  void zero_grad();
  // Casts every parameter to `dtype` (Parameter::cast), for pure
  // low-precision inference (as Gluon's Block.cast). Parameters a layer's op
  // keeps in float32 stay float32 (BatchNorm's gamma, beta and running
  // statistics: OpDef::amp_float32_inputs), so a cast model still runs.
  // Inputs must then be cast too (or run under amp::Autocast).
  virtual void cast(DType dtype);

  // Block: applies to the children. HybridBlock also sets its own flag.
  //   net.hybridize();                              // compile
  //   net.hybridize({.amp = DType::kBfloat16});     // compile with mixed precision (frontend/amp.h)
  virtual void hybridize(const HybridizeOptions& options);
  void hybridize(bool active = true) { hybridize(HybridizeOptions{.active = active}); }

  // Calls fn on every descendant and then on this block (children first).
  void apply(const std::function<void(Block&)>& fn);

  HookHandle register_forward_pre_hook(ForwardPreHook hook);
  HookHandle register_forward_hook(ForwardHook hook);

  // Writes the parameters under their structural names in MXNet's NDArray
  // list format (frontend/formats/mxnet/params_io.h); atomically (temp file + rename).
  // Values are read when written, so this waits for pending writes.
  void save_parameters(const std::string& path) const;
  // Loads values by structural name ("arg:"/"aux:" prefixes are stripped).
  // Missing, extra (unless allowed), mis-shaped and mis-typed names are all
  // listed in one ValueError; nothing is changed then. Uninitialized
  // parameters are initialized on `device` from the file.
  void load_parameters(const std::string& path, Device device = Device::cpu(0), bool allow_missing = false,
                       bool ignore_extra = false);

  // Runs forward on `x` and returns Gluon's summary table: one row per block
  // called (containers Sequential/HybridSequential excluded) with its output
  // shape and own parameter count, then totals.
  std::string summary(const NDArray& x);

  // Gluon's print(net): "HybridSequential(\n  (0): Dense(512 -> 256, Activation(relu))\n)".
  // Containers print their children; layers override with their configuration.
  virtual std::string to_string() const;
  // The class name without namespaces ("Dense", "HybridNet").
  std::string type_name() const;

  // Blocks are equal when they share state (copies of one handle).
  bool same_as(const Block& o) const { return state_ == o.state_; }

  // "Dense 'hidden'" (type and registration name), or the type for a root.
  std::string display_name() const;

 protected:
  detail::BlockState& state() const { return *state_; }
  // The CachedOp serving calls now: null unless hybridized and not being
  // traced as part of a parent.
  CachedOp* active_cached_op() const;

 private:
  friend class HybridBlock;
  template <typename In, typename Call>
  auto call_with_hooks(In inputs, Call&& call);

  std::shared_ptr<detail::BlockState> state_;
};

// A block whose forward can be traced into a graph. Its children must be
// HybridBlocks too.
class HybridBlock : public Block {
 public:
  // Sets the flag on this block and its descendants and drops compiled
  // graphs; the next call traces forward and later calls with the same
  // signature run the cached graph.
  using Block::hybridize;
  void hybridize(const HybridizeOptions& options) override;
  bool is_hybridized() const;
  // The compiled forms (null unless hybridized; empty until the first call).
  const CachedOp* cached_op() const;

  // Gluon's export: writes PREFIX-symbol.json (MXNet's symbol JSON of the
  // traced graph, predict mode preferred) and PREFIX-EPOCH.params (arg:/aux:
  // names, as MXNet writes them), atomically; returns the two paths. Needs a
  // hybridized call first (ValueError otherwise). SymbolBlock::imports and
  // MXNet load the pair; load_parameters reads the params file back.
  virtual std::pair<std::string, std::string> export_model(const std::string& prefix, int epoch = 0) const;
};

std::ostream& operator<<(std::ostream& os, const Block& b);

// Indents every line after the first by `spaces` (nested printing).
std::string indent_lines(const std::string& s, int spaces);

}  // namespace kiln::nn
