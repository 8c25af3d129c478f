#include "models/gpt.h"

#include <nlohmann/json.hpp>

#include "frontend/nd_elemwise.h"
#include "frontend/nd_matrix.h"

namespace kiln::models {

std::string GptConfig::to_json() const {
  return nlohmann::json{{"model", "gpt"},   {"vocab", vocab},     {"layers", layers}, {"heads", heads},
                        {"width", width},   {"context", context}, {"dropout", dropout}}
      .dump();
}

GptConfig GptConfig::from_json(const std::string& text, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  KILN_CHECK(j.is_object(), ValueError, "{}: expected a JSON object with the GPT's configuration", source);
  GptConfig c;
  auto read_int = [&](const char* key, int64_t lo, int64_t hi) {
    KILN_CHECK(j.contains(key) && j[key].is_number_integer(), ValueError, "{}: expected an integer '{}'", source,
               key);
    const auto v = j[key].get<int64_t>();
    KILN_CHECK(v >= lo && v <= hi, ValueError, "{}: '{}' must be in [{}, {}], found {}", source, key, lo, hi, v);
    return v;
  };
  c.vocab = read_int("vocab", 1, int64_t{1} << 24);
  c.layers = static_cast<int>(read_int("layers", 1, 1024));
  c.heads = static_cast<int>(read_int("heads", 1, 1024));
  c.width = read_int("width", 1, int64_t{1} << 16);
  c.context = read_int("context", 1, int64_t{1} << 20);
  if (j.contains("dropout")) {
    KILN_CHECK(j["dropout"].is_number() && j["dropout"].get<double>() >= 0 && j["dropout"].get<double>() < 1,
               ValueError, "{}: 'dropout' must be a number in [0, 1)", source);
    c.dropout = j["dropout"].get<double>();
  }
  return c;
}

Gpt::Gpt(GptConfig config)
    : config_(config),
      embed_(config.vocab, config.width),
      ln_f_(-1, 1e-5, true, true, config.width),
      head_(config.vocab, "", /*use_bias=*/false, /*flatten=*/false, config.width) {
  KILN_CHECK(config.layers >= 1 && config.context >= 1, ValueError,
             "Gpt: layers and context must be >= 1, got {} and {}", config.layers, config.context);
  register_child("embed", embed_);
  pos_ = register_parameter("pos_weight", Shape{config.context, config.width});
  for (int i = 0; i < config.layers; ++i) {
    block_list_.emplace_back(config.width, config.heads, 0, /*causal=*/true, config.dropout);
    blocks_.add(block_list_.back());
  }
  register_child("blocks", blocks_);
  register_child("ln_f", ln_f_);
  register_child("head", head_);
}

NDArray Gpt::embed(const NDArray& ids, int64_t offset) {
  KILN_CHECK(ids.ndim() == 2, ShapeError, "Gpt: expected token ids [N, T], got {}", ids.shape());
  const int64_t t = ids.shape()[1];
  KILN_CHECK(offset + t <= config_.context, ShapeError,
             "Gpt: a sequence of {} positions (ids {}{}) is longer than the context of {}", offset + t, ids.shape(),
             offset > 0 ? fmt::format(" after {} cached", offset) : std::string(), config_.context);
  NDArray pos = nd::expand_dims(nd::slice_axis(pos_.data(ids.device()), 0, offset, offset + t), 0);  // [1, T, width]
  return embed_(ids) + pos;
}

NDArray Gpt::forward(const NDArray& ids) { return head_(ln_f_(blocks_(embed(ids, 0)))); }

NDArray Gpt::forward(const NDArray& ids, GptCache& cache) {
  if (cache.layers.empty()) cache.layers.resize(block_list_.size());
  NDArray h = embed(ids, cache.length());
  for (size_t i = 0; i < block_list_.size(); ++i) h = block_list_[i].forward(h, cache.layers[i]);
  return head_(ln_f_(h));
}

}  // namespace kiln::models
