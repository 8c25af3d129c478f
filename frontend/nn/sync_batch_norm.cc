#include "frontend/nn/sync_batch_norm.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "frontend/autograd.h"
#include "frontend/nd.h"
#include "frontend/sync_sum.h"

namespace kiln::nn {

SyncBatchNorm::SyncBatchNorm(int num_devices, double momentum, double epsilon, bool center, bool scale,
                             bool use_global_stats, int64_t in_channels, double timeout_s)
    : BatchNorm(1, momentum, epsilon, center, scale, use_global_stats, in_channels),
      num_devices_(num_devices),
      timeout_s_(timeout_s) {
  KILN_CHECK(num_devices >= 1, ValueError, "SyncBatchNorm: num_devices must be >= 1, got {}", num_devices);
  KILN_CHECK(timeout_s > 0, ValueError, "SyncBatchNorm: timeout_s must be > 0, got {}", timeout_s);
}

NDArray SyncBatchNorm::forward(const NDArray& x) {
  if (!autograd::is_training() || use_global_stats_) return BatchNorm::forward(x);
  KILN_CHECK(!x.is_symbolic(), NotSupported,
             "{}: cannot be hybridized for training yet (its statistics are summed with the calls made for the "
             "other devices, outside the traced graph); call hybridize(false) on it, or train the net unhybridized",
             display_name());
  KILN_CHECK(x.ndim() >= 2, ShapeError, "{}: expected an input with a channel axis 1 (N, C, ...), got {}",
             display_name(), x.shape());
  KILN_CHECK(x.dtype() == DType::kFloat32, TypeError, "{}: expected float32 input, got {}", display_name(),
             dtype_short_name(x.dtype()));
  infer_channels(x);
  Device d = x.device();

  Steps& st = *steps_;
  int slot = static_cast<int>(st.calls % num_devices_);
  if (slot == 0) {
    std::string what = fmt::format("{} step {}", display_name(), st.calls / num_devices_);
    // The step's devices, when known (one device, or the last step's), let
    // GPUs sum through NCCL.
    std::vector<Device> devices = num_devices_ == 1 ? std::vector<Device>{d} : st.last_devices;
    st.mean_sum = std::make_shared<SyncSum>(num_devices_, what + " mean", timeout_s_, devices);
    st.var_sum = std::make_shared<SyncSum>(num_devices_, what + " variance", timeout_s_, devices);
    st.devices.clear();
  }
  KILN_CHECK(std::find(st.devices.begin(), st.devices.end(), d) == st.devices.end(), ValueError,
             "{}: step {} already has a shard on {} (shards so far: {}); num_devices = {} expects one call per "
             "device per step",
             display_name(), st.calls / num_devices_, d, fmt::join(st.devices, ", "), num_devices_);
  st.devices.push_back(d);
  ++st.calls;
  if (slot == num_devices_ - 1) st.last_devices = st.devices;
  std::shared_ptr<SyncSum> mean_sum = st.mean_sum, var_sum = st.var_sum;

  int64_t channels = x.shape()[1];
  Shape ones(std::vector<int64_t>(static_cast<size_t>(x.ndim()), 1));
  IntTuple per_channel(static_cast<size_t>(x.ndim()), 1);
  per_channel[1] = channels;
  // Sums over every axis but the channel axis, kept as [1, C, 1, ...].
  auto channel_sum = [](const NDArray& a) { return nd::sum(a, {1}, /*keepdims=*/true, /*exclude=*/true); };

  NDArray count = nd::full(ones, static_cast<double>(x.size() / channels), {DType::kFloat32, d});
  std::vector<NDArray> sums = (*mean_sum)(slot, {channel_sum(x), count});
  NDArray total = sums[1];
  NDArray mean = sums[0] / total;
  NDArray centered = x - mean;
  NDArray var = (*var_sum)(slot, {channel_sum(nd::square(centered))})[0] / total;
  NDArray out = centered * nd::pow(var + epsilon_, -0.5);
  if (scale_) out = out * nd::reshape(gamma_.data(d), per_channel);
  out = out + nd::reshape(beta_.data(d), per_channel);

  autograd::Pause pause;
  NDArray running_mean = running_mean_.data(d), running_var = running_var_.data(d);
  running_mean.assign(running_mean * momentum_ + mean.reshape({channels}) * (1 - momentum_));
  running_var.assign(running_var * momentum_ + var.reshape({channels}) * (1 - momentum_));
  return out;
}

std::string SyncBatchNorm::to_string() const {
  int64_t c = gamma_.shape()[0];
  return fmt::format("{}(num_devices={}, eps={}, momentum={}, fix_gamma={}, use_global_stats={}, in_channels={})",
                     type_name(), num_devices_, epsilon_, momentum_, scale_ ? "False" : "True",
                     use_global_stats_ ? "True" : "False", c == 0 ? std::string("None") : std::to_string(c));
}

}  // namespace kiln::nn
