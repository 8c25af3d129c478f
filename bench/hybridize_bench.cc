// hybridize benchmarks: d2l 12.1's MLP (512 -> 256 -> 128 -> 2) called 1,000
// times on a 1x512 input, imperative and hybridized (MXNet there: 504 us and
// 187 us per call). Per-call microseconds: 1,000 calls then one wait, best of
// `repeat` after a warm-up round.
#include "bench/bench.h"
#include "frontend/nd.h"
#include "models/zoo.h"
#include "runtime/engine.h"

namespace kiln::bench {

double mlp_us_per_call(const Options& options, bool hybridize, Device device,
                       const std::function<void()>& after_warmup) {
  nd::random::seed(0);
  auto net = models::mlp_chapter();
  net.initialize(init::Uniform(), device);
  net.hybridize(hybridize);
  NDArray x = nd::random::normal({1, 512}).copy_to(device);
  constexpr int kCalls = 1000;
  auto round = [&] {
    engine::wait_all();
    auto start = Clock::now();
    NDArray y;
    for (int i = 0; i < kCalls; ++i) y = net(x);
    y.wait_to_read();
    return seconds_since(start);
  };
  round();  // warm-up: deferred init, trace, plans (on a GPU: the graph's warm-up run and capture)
  if (after_warmup) after_warmup();
  return best_of(options.repeat, round) / kCalls * 1e6;
}

namespace {

std::vector<Figure> bench_mlp(const Options& options) {
  const Device cpu = Device::cpu(0);
  return {{"mlp_imperative_us", mlp_us_per_call(options, false, cpu), "us"},
          {"mlp_hybridized_us", mlp_us_per_call(options, true, cpu), "us"}};
}

}  // namespace

void register_hybridize_benchmarks() { add({"mlp", {"mlp_imperative_us", "mlp_hybridized_us"}, &bench_mlp}); }

}  // namespace kiln::bench
