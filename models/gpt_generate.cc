#include "models/gpt_generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/nd.h"

namespace kiln::models {
namespace {

// The next byte from one position's logits.
int32_t sample(std::vector<float> logits, const SampleOptions& o, std::mt19937_64& rng) {
  if (o.temperature == 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  size_t keep = order.size();
  if (o.top_k > 0 && static_cast<size_t>(o.top_k) < keep) {
    keep = static_cast<size_t>(o.top_k);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                      [&](int32_t a, int32_t b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
  }
  double top = -INFINITY;
  for (size_t i = 0; i < keep; ++i) top = std::max(top, static_cast<double>(logits[static_cast<size_t>(order[i])]));
  std::vector<double> weight(keep);
  for (size_t i = 0; i < keep; ++i)
    weight[i] = std::exp((static_cast<double>(logits[static_cast<size_t>(order[i])]) - top) / o.temperature);
  std::discrete_distribution<size_t> pick(weight.begin(), weight.end());
  return order[pick(rng)];
}

// The last position's logits of [1, T, V] as floats on the host.
std::vector<float> last_logits(const NDArray& logits) {
  const int64_t t = logits.shape()[1];
  NDArray row = nd::slice_axis(logits, 1, t - 1, t);
  if (row.dtype() != DType::kFloat32) row = row.astype(DType::kFloat32);
  return row.to_vector<float>();
}

NDArray as_ids(const std::vector<int32_t>& ids, size_t begin, Device device) {
  std::vector<int32_t> part(ids.begin() + static_cast<std::ptrdiff_t>(begin), ids.end());
  return nd::array(part, Shape{1, static_cast<int64_t>(part.size())}, device);
}

}  // namespace

std::string generate(Gpt& net, std::string_view prompt, const SampleOptions& o) {
  KILN_CHECK(o.tokens >= 0 && o.temperature >= 0 && o.top_k >= 0, ValueError,
             "generate: expected tokens, temperature and top-k >= 0, got {}, {} and {}", o.tokens, o.temperature,
             o.top_k);
  const auto context = static_cast<size_t>(net.config().context);
  autograd::PredictMode predict;
  std::mt19937_64 rng(o.seed);
  std::vector<int32_t> ids;
  for (unsigned char c : prompt) ids.push_back(c);
  if (ids.empty()) ids.push_back('\n');
  if (ids.size() > context) ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(context));
  std::string out;
  GptCache cache;
  std::vector<float> logits = last_logits(o.use_cache ? net.forward(as_ids(ids, 0, o.device), cache)
                                                      : net(as_ids(ids, 0, o.device)));
  for (int64_t n = 0; n < o.tokens; ++n) {
    const int32_t next = sample(std::move(logits), o, rng);
    out.push_back(static_cast<char>(next));
    ids.push_back(next);
    if (n + 1 == o.tokens) break;
    if (!o.use_cache) {
      logits = last_logits(net(as_ids(ids, ids.size() > context ? ids.size() - context : 0, o.device)));
    } else if (static_cast<size_t>(cache.length()) < context) {
      logits = last_logits(net.forward(as_ids(ids, ids.size() - 1, o.device), cache));
    } else {
      cache = GptCache{};
      logits = last_logits(net.forward(as_ids(ids, ids.size() - context / 2, o.device), cache));
    }
  }
  return out;
}

}  // namespace kiln::models
