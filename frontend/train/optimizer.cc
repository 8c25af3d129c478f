#include "frontend/train/optimizer.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "frontend/nd_init.h"
#include "frontend/nd_optimizer.h"
#include "frontend/formats/mxnet/params_io.h"

namespace kiln::optim {

void Optimizer::update(int64_t key, const NDArray& weight, const NDArray& grad, double rescale_grad) {
  KeyState& s = states_[key];
  if (s.arrays.empty()) s.arrays = create_state(weight);
  for (NDArray& a : s.arrays) {  // loaded states: on the weight's device, of its shape
    KILN_CHECK(a.shape() == weight.shape(), ValueError,
               "optimizer '{}': the state of key {} has shape {}, its weight {} (loaded for another model?)", name(),
               key, a.shape(), weight.shape());
    if (a.device() != weight.device()) a = a.copy_to(weight.device());
  }
  ++s.count;
  apply(weight, grad, s.arrays, learning_rate(), rescale_grad, s.count);
}

double Optimizer::learning_rate() const { return schedule_ ? schedule_(num_update_) : lr_; }

void Optimizer::set_learning_rate(double lr) {
  KILN_CHECK(!schedule_, ValueError, "set_learning_rate: a schedule is set and decides the learning rate");
  lr_ = lr;
}

NamedArrays Optimizer::state_arrays() const {
  NamedArrays arrays;
  arrays.emplace_back("optimizer:" + name(), nd::array(std::vector<int64_t>{num_update_}));
  for (const auto& [key, s] : states_) {
    arrays.emplace_back(fmt::format("count:{}", key), nd::array(std::vector<int64_t>{s.count}));
    for (size_t k = 0; k < s.arrays.size(); ++k) arrays.emplace_back(fmt::format("state:{}:{}", key, k), s.arrays[k]);
  }
  return arrays;
}

void Optimizer::save_states(const std::string& path) const { mxnet::save_ndarrays(path, state_arrays()); }

void Optimizer::load_state_arrays(const NamedArrays& arrays, std::string_view source, Device device) {
  KILN_CHECK(!arrays.empty() && arrays[0].first == "optimizer:" + name(), IOError,
             "{}: not a saved state of optimizer '{}' (first entry is '{}')", source, name(),
             arrays.empty() ? "" : arrays[0].first);
  auto scalar = [&](const std::string& n, const NDArray& a) {
    KILN_CHECK(!a.is_none() && a.dtype() == DType::kInt64 && a.size() == 1, IOError,
               "{}: optimizer entry '{}': expected one int64, found {}", source, n,
               a.is_none() ? std::string("none") : fmt::format("{} {}", a.dtype(), a.shape()));
    return a.item<int64_t>();
  };
  std::map<int64_t, KeyState> loaded;
  for (size_t i = 1; i < arrays.size(); ++i) {
    const auto& [n, a] = arrays[i];
    long long key = 0;
    unsigned k = 0;
    char tail = 0;
    if (std::sscanf(n.c_str(), "count:%lld%c", &key, &tail) == 1) {
      loaded[key].count = scalar(n, a);
    } else if (std::sscanf(n.c_str(), "state:%lld:%u%c", &key, &k, &tail) == 2 && k < 16) {
      KILN_CHECK(!a.is_none(), IOError, "{}: optimizer entry '{}' holds no array", source, n);
      auto& v = loaded[key].arrays;
      if (v.size() <= k) v.resize(k + 1);
      v[k] = a.copy_to(device);
    } else {
      throw IOError(fmt::format("{}: unexpected entry '{}' in an optimizer state", source, n));
    }
  }
  for (const auto& [key, s] : loaded) {
    for (size_t k = 0; k < s.arrays.size(); ++k) {
      KILN_CHECK(!s.arrays[k].is_none(), IOError, "{}: optimizer state {} of key {} is missing", source, k, key);
    }
  }
  num_update_ = scalar(arrays[0].first, arrays[0].second);
  states_ = std::move(loaded);
}

void Optimizer::load_states(const std::string& path, Device device) {
  load_state_arrays(mxnet::load_ndarrays(path), path, device);
}

std::vector<NDArray> SGD::create_state(const NDArray& weight) const {
  if (o_.momentum == 0) return {};
  return {nd::zeros_like(weight)};
}

void SGD::apply(const NDArray& weight, const NDArray& grad, std::vector<NDArray>& state, double lr,
                double rescale_grad, int64_t) {
  auto f = [](double v) { return static_cast<float>(v); };
  if (state.empty()) {
    nd::sgd_update(weight, grad, {.lr = f(lr), .wd = f(o_.wd), .rescale_grad = f(rescale_grad),
                                  .clip_gradient = f(o_.clip_gradient)});
  } else if (o_.nesterov) {
    nd::nag_mom_update(weight, grad, state[0],
                       {.lr = f(lr), .momentum = f(o_.momentum), .wd = f(o_.wd), .rescale_grad = f(rescale_grad),
                        .clip_gradient = f(o_.clip_gradient)});
  } else {
    nd::sgd_mom_update(weight, grad, state[0],
                       {.lr = f(lr), .momentum = f(o_.momentum), .wd = f(o_.wd), .rescale_grad = f(rescale_grad),
                        .clip_gradient = f(o_.clip_gradient)});
  }
}

std::vector<NDArray> Adam::create_state(const NDArray& weight) const {
  return {nd::zeros_like(weight), nd::zeros_like(weight)};
}

void Adam::apply(const NDArray& weight, const NDArray& grad, std::vector<NDArray>& state, double lr,
                 double rescale_grad, int64_t t) {
  double td = static_cast<double>(t);
  double lr_t = lr * std::sqrt(1 - std::pow(o_.beta2, td)) / (1 - std::pow(o_.beta1, td));
  auto f = [](double v) { return static_cast<float>(v); };
  nd::adam_update(weight, grad, state[0], state[1],
                  {.lr = f(lr_t), .beta1 = f(o_.beta1), .beta2 = f(o_.beta2), .epsilon = f(o_.epsilon),
                   .wd = f(o_.wd), .rescale_grad = f(rescale_grad), .clip_gradient = f(o_.clip_gradient)});
}

std::vector<NDArray> AdamW::create_state(const NDArray& weight) const {
  return {nd::zeros_like(weight), nd::zeros_like(weight)};
}

// m_hat / (sqrt(v_hat) + eps) = (sqrt(c2) / c1) * m / (sqrt(v) + eps * sqrt(c2))
// with c1 = 1 - beta1^t, c2 = 1 - beta2^t: the op's lr and epsilon.
void AdamW::apply(const NDArray& weight, const NDArray& grad, std::vector<NDArray>& state, double lr,
                  double rescale_grad, int64_t t) {
  double scale = 1, eps = o_.epsilon;
  if (o_.correct_bias) {
    double td = static_cast<double>(t);
    double root_c2 = std::sqrt(1 - std::pow(o_.beta2, td));
    scale = root_c2 / (1 - std::pow(o_.beta1, td));
    eps *= root_c2;
  }
  nd::adamw_update(weight, grad, state[0], state[1],
                   {.lr = scale,
                    .eta = lr,
                    .beta1 = o_.beta1,
                    .beta2 = o_.beta2,
                    .epsilon = eps,
                    .wd = o_.wd,
                    .rescale_grad = rescale_grad,
                    .clip_gradient = o_.clip_gradient});
}

}  // namespace kiln::optim
