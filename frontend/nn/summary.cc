// Block::summary: Gluon's summary table, built from forward hooks.
#include <unordered_set>

#include "frontend/nn/block.h"
#include "frontend/nn/sequential.h"

namespace kiln::nn {
namespace {

struct Row {
  std::string layer, shape;
  int64_t params = 0, trainable = 0, shared = 0;
};

// Python's tuple text, as Gluon prints shapes: "(1, 256)", "(5,)".
std::string tuple_text(const Shape& s) {
  if (s.ndim() == 1) return fmt::format("({},)", s[0]);
  std::string out = "(";
  for (int i = 0; i < s.ndim(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

// Several outputs: "(1, 2), (1, 3)", as Gluon's _get_shape_str.
std::string shapes_text(std::span<const NDArray> xs) {
  std::string out;
  for (size_t i = 0; i < xs.size(); ++i) out += (i ? ", " : "") + tuple_text(xs[i].shape());
  return out;
}

// Detaches the hooks however summary() leaves.
struct Hooks {
  std::vector<HookHandle> handles;
  ~Hooks() {
    for (auto& h : handles) h.detach();
  }
};

}  // namespace

std::string Block::summary(const NDArray& x) {
  std::vector<Row> rows;
  rows.push_back({"Input", tuple_text(x.shape())});
  std::unordered_set<const void*> seen;
  Hooks hooks;
  apply([&](Block& b) {
    if (dynamic_cast<Sequential*>(&b) || dynamic_cast<HybridSequential*>(&b)) return;
    hooks.handles.push_back(
        b.register_forward_hook([&](Block& blk, std::span<const NDArray>, std::span<const NDArray> outputs) {
          Row row{fmt::format("{}-{}", blk.type_name(), rows.size()), shapes_text(outputs)};
          for (auto& [_, p] : blk.own_parameters()) {
            int64_t n = p.shape().size();
            row.params += n;
            if (p.grad_req() != GradReq::kNull) row.trainable += n;
            if (!seen.insert(p.id()).second) row.shared += n;
          }
          rows.push_back(std::move(row));
        }));
  });
  (*this)(x);

  constexpr int kWidth = 80;
  auto line = [](std::string_view a, std::string_view b, std::string_view c) {
    return fmt::format("{:>20}  {:>42} {:>15}\n", a, b, c);
  };
  std::string out = std::string(kWidth, '-') + "\n";
  out += line("Layer (type)", "Output Shape", "Param #");
  out += std::string(kWidth, '=') + "\n";
  int64_t total = 0, trainable = 0, shared = 0;
  for (const Row& r : rows) {
    out += line(r.layer, r.shape, std::to_string(r.params));
    total += r.params;
    trainable += r.trainable;
    shared += r.shared;
  }
  out += std::string(kWidth, '=') + "\n";
  out += "Parameters in forward computation graph, duplicate included\n";
  out += fmt::format("   Total params: {}\n", total);
  out += fmt::format("   Trainable params: {}\n", trainable);
  out += fmt::format("   Non-trainable params: {}\n", total - trainable);
  out += fmt::format("Shared params in forward computation graph: {}\n", shared);
  out += fmt::format("Unique parameters in model: {}\n", total - shared);
  out += std::string(kWidth, '-') + "\n";
  return out;
}

}  // namespace kiln::nn
