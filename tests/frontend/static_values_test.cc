// Values of compiled graphs that depend only on parameters (frontend/static_values.h):
// computed once, recomputed after a parameter write, equal to imperative
// results; the engine's write sequence numbers they rely on.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "frontend/amp.h"
#include "frontend/kiln.h"
#include "models/zoo.h"
#include "runtime/engine.h"
#include "runtime/engine_writes.h"
#include "runtime/profiler.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using test::expect_close;

TEST(EngineWrites, EveryPushedWriteAndNewVariableTakesANewNumber) {
  NDArray a = nd::zeros({4}), b = nd::zeros({4});
  const uint64_t a0 = engine::last_write(a.var()), b0 = engine::last_write(b.var());
  EXPECT_NE(a0, 0u);
  EXPECT_NE(a0, b0);
  engine::Var* reads[] = {a.var()};
  engine::Var* writes[] = {b.var()};
  engine::get().push([](engine::RunContext) {}, reads, writes, {});
  engine::wait_all();
  EXPECT_EQ(engine::last_write(a.var()), a0) << "a read is not a write";
  const uint64_t b1 = engine::last_write(b.var());
  EXPECT_GT(b1, b0);
  NDArray c = nd::zeros({4});
  EXPECT_GT(engine::last_write(c.var()), b1) << "a new variable gets a number no earlier value had";
  EXPECT_EQ(engine::last_write(nullptr), 0u);
}

int count_events(const std::string& name) {
  int n = 0;
  for (const profiler::Event& e : profiler::events()) n += e.name == name;
  return n;
}

// A bfloat16 MLP: its weights' casts depend only on parameters.
TEST(StaticValues, WeightCastsRunOnceAndAgainAfterAParameterWrite) {
  nd::random::seed(3);
  auto net = models::mlp_chapter();
  net.initialize();
  NDArray x = nd::random::normal({4, 512});
  NDArray want;
  {
    amp::Autocast autocast(DType::kBfloat16);
    want = net(x);
  }
  net.hybridize({.amp = DType::kBfloat16});
  engine::wait_all();
  profiler::clear();
  profiler::start();
  std::vector<NDArray> got;
  for (int i = 0; i < 3; ++i) got.push_back(net(x));
  engine::wait_all();
  profiler::stop();
  for (const NDArray& y : got) expect_close(y, want, 0, "hybridized call");
  const int params = static_cast<int>(net.collect_params().names().size());
  // Each parameter cast once, the input once per call.
  EXPECT_EQ(count_events("CachedOp/Cast"), params + 3);

  // A write to a parameter (set_data copies into its array) is seen: the
  // last layer's weight and bias doubled double the output, exactly in bf16.
  auto all = net.collect_params();
  const std::vector<std::string> names = all.names();
  for (const std::string& name : {names[names.size() - 2], names.back()}) {
    nn::Parameter p = all.at(name);
    p.set_data(p.data() * 2.0);
  }
  NDArray doubled = net(x);
  expect_close(doubled.astype(DType::kFloat32), (want.astype(DType::kFloat32) * 2.0), 0, "after set_data");
}

}  // namespace
}  // namespace kiln
