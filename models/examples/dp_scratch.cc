// d2l 12.5, "Training on Multiple GPUs" from scratch: LeNet written with
// plain arrays, its parameters copied to cpu(0) and cpu(1), every batch split
// over the devices, the gradients summed by a hand-written allreduce (add
// every copy into the first, copy the sum back), and a hand-written SGD step
// on every copy. No Trainer, no KVStore: the chapter's point is to see each
// piece. Prints the loss and test accuracy per epoch, so one can see it trains.
//
// Sizes: the chapter trains 10 epochs on all 60,000 images; this runs 3
// epochs on the first 4,096 (--quick: 1 epoch on 1,024) to stay under 30 s on
// two cores. The chapter draws every weight from N(0, 0.01), with which LeNet
// stays at chance for about an epoch of the full set (docs/perf-log.md); here
// each layer's weights are drawn with Xavier's scale so the short run learns.
#include <cmath>

#include "bench/bench.h"
#include "frontend/autograd.h"
#include "frontend/data/dataloader.h"
#include "frontend/data/fashion_mnist.h"
#include "frontend/nd.h"
#include "frontend/split.h"
#include "models/examples/examples.h"
#include "runtime/engine.h"

namespace kiln::examples {

namespace {

// W1, b1, W2, b2, W3, b3, W4, b4 (d2l's get_params), on cpu(0).
std::vector<NDArray> lenet_params() {
  auto normal = [](const Shape& shape, int64_t fan_in, int64_t fan_out) {
    return nd::random::normal(shape, 0, std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
  };
  return {normal({20, 1, 3, 3}, 9, 180),      nd::zeros({20}), normal({50, 20, 5, 5}, 500, 1250), nd::zeros({50}),
          normal({128, 800}, 800, 128),       nd::zeros({128}), normal({10, 128}, 128, 10),       nd::zeros({10})};
}

NDArray lenet(const NDArray& X, const std::vector<NDArray>& p) {
  PoolingAttrs pool{.kernel = {2, 2}, .pool_type = "avg", .stride = {2, 2}};
  NDArray h = nd::relu(nd::convolution(X, p[0], p[1], {.kernel = {3, 3}, .num_filter = 20}));
  h = nd::pooling(h, pool);
  h = nd::relu(nd::convolution(h, p[2], p[3], {.kernel = {5, 5}, .num_filter = 50}));
  h = nd::pooling(h, pool);
  h = nd::relu(nd::fully_connected(nd::flatten(h), p[4], p[5], 128));
  return nd::fully_connected(h, p[6], p[7], 10);
}

// d2l's get_params: copies on `device`, with gradient buffers.
std::vector<NDArray> params_on(const std::vector<NDArray>& params, Device device) {
  std::vector<NDArray> out;
  for (const NDArray& p : params) {
    out.push_back(p.copy_to(device));
    out.back().attach_grad();
  }
  return out;
}

// d2l's allreduce: data[0] += data[i] for every other copy, then the sum is
// copied back to every copy.
void allreduce(std::vector<NDArray>& data) {
  for (size_t i = 1; i < data.size(); ++i) data[0] += data[i].copy_to(data[0].device());
  for (size_t i = 1; i < data.size(); ++i) data[i].assign(data[0].copy_to(data[i].device()));
}

void sgd(std::vector<NDArray>& params, double lr, int64_t batch_size) {
  for (NDArray& p : params) p -= p.grad() * (lr / static_cast<double>(batch_size));
}

void train_batch(const NDArray& X, const NDArray& y, std::vector<std::vector<NDArray>>& device_params,
                 const std::vector<Device>& devices, double lr, NDArray& loss_sum) {
  auto [X_shards, y_shards] = split_batch(X, y, devices);
  std::vector<NDArray> ls;
  {
    autograd::Record record;
    for (size_t i = 0; i < X_shards.size(); ++i)
      ls.push_back(nd::sum(nd::softmax_cross_entropy(lenet(X_shards[i], device_params[i]), y_shards[i])));
  }
  autograd::backward(ls);
  for (size_t k = 0; k < device_params[0].size(); ++k) {
    std::vector<NDArray> grads;
    for (size_t d = 0; d < X_shards.size(); ++d) grads.push_back(device_params[d][k].grad());
    allreduce(grads);
  }
  for (size_t d = 0; d < X_shards.size(); ++d) sgd(device_params[d], lr, X.shape()[0]);
  for (const NDArray& l : ls) loss_sum += l.copy_to(loss_sum.device());
}

// On the device of `params` (the first device's copy).
double test_accuracy(const data::FashionMNIST& test, const std::vector<NDArray>& params) {
  const Device device = params[0].device();
  NDArray correct = nd::zeros({1}, {.device = device});
  for (const data::Batch& b : data::DataLoader(test, 256)) {
    NDArray X = b.data.copy_to(device), y = b.label.copy_to(device);
    correct += nd::sum(nd::argmax(lenet(X, params), 1) == y).reshape({1});
  }
  return correct.item<double>() / static_cast<double>(test.size());
}

}  // namespace

void run_dp_scratch(const Options& options) {
  const std::vector<Device>& devices = options.devices;
  const int64_t batch_size = 256, train_images = options.quick ? 1024 : 4096;
  const int epochs = options.quick ? 1 : 3;
  const double lr = 0.2;
  bench::CpuThreadsGuard threads(devices, 1);
  auto train = data::FashionMNIST::train().subset(0, train_images);
  auto test = data::FashionMNIST::test().subset(0, options.quick ? 512 : 2000);
  nd::random::seed(0);
  std::vector<NDArray> params = lenet_params();
  std::vector<std::vector<NDArray>> device_params;
  for (Device d : devices) device_params.push_back(params_on(params, d));

  fmt::print(stderr, "# LeNet on {} Fashion-MNIST images, batch {}, lr {}, {} devices\n", train_images, batch_size,
             lr, devices.size());
  data::DataLoader loader(train, batch_size, {.shuffle = true, .seed = 1});
  double seconds = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    engine::wait_all();
    auto start = bench::Clock::now();
    NDArray loss_sum = nd::zeros({1});
    for (const data::Batch& b : loader) train_batch(b.data, b.label, device_params, devices, lr, loss_sum);
    double loss = loss_sum.item<double>() / static_cast<double>(train_images);
    seconds += bench::seconds_since(start);
    double acc = test_accuracy(test, device_params[0]);
    report(fmt::format("dp_scratch_epoch{}_loss", epoch), loss, "nats");
    report(fmt::format("dp_scratch_epoch{}_test_acc", epoch), acc, "x");
  }
  report("dp_scratch_images_per_s", static_cast<double>(train_images) * epochs / seconds, "img/s");
}

}  // namespace kiln::examples
