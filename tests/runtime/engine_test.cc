// The engine contract (runtime/engine.h), for both engines where it applies:
// ordering, errors, delete_var, back-pressure, priorities, lanes, threads.
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ir/error.h"

namespace kiln::engine {
namespace {

using namespace std::chrono_literals;

// A latch that ops block on; opening it lets them continue. Waiting gives up
// after 10 s (and fails the test) so a broken engine fails instead of hanging.
class Gate {
 public:
  void open() { open_.store(true, std::memory_order_release); }
  bool wait() const {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!open_.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "gate never opened";
        return false;
      }
      std::this_thread::sleep_for(50us);
    }
    return true;
  }
  bool is_open() const { return open_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> open_{false};
};

std::string kind_name(const testing::TestParamInfo<Kind>& info) {
  return info.param == Kind::kNaive ? "naive" : "threaded";
}

class EngineTest : public testing::TestWithParam<Kind> {
 protected:
  std::unique_ptr<Engine> engine_ = create(GetParam());
};

INSTANTIATE_TEST_SUITE_P(Kinds, EngineTest, testing::Values(Kind::kThreaded, Kind::kNaive), kind_name);

// Expects `f` to throw a kiln::Error whose message contains `part`.
template <typename F>
void expect_error_containing(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST_P(EngineTest, KindIsTheRequestedOne) { EXPECT_EQ(engine_->kind(), GetParam()); }

TEST_P(EngineTest, WaitsWithNothingPendingReturn) {
  engine_->wait_all();
  Var* v = engine_->new_var();
  engine_->wait_for_var(v);
  engine_->delete_var(v);
  engine_->wait_all();
  EXPECT_EQ(engine_->num_pending(), 0);
  EXPECT_EQ(engine_->pending_bytes(), 0);
}

TEST_P(EngineTest, OpsSeeTheirRunContext) {
  engine_->set_cpu_threads(Device::cpu(1), 3);
  EXPECT_EQ(engine_->cpu_threads(Device::cpu(1)), 3);
  EXPECT_GE(engine_->cpu_threads(Device::cpu(0)), 1);
  RunContext seen[2];
  Var* v = engine_->new_var();
  engine_->push([&](RunContext ctx) { seen[0] = ctx; }, {}, {v}, {.device = Device::cpu(1), .name = "a"});
  engine_->push([&](RunContext ctx) { seen[1] = ctx; }, {}, {v},
                {.device = Device::cpu(2), .lane = Lane::kCopy, .name = "b"});
  engine_->wait_for_var(v);
  EXPECT_EQ(seen[0].device, Device::cpu(1));
  EXPECT_EQ(seen[0].lane, Lane::kCompute);
  EXPECT_EQ(seen[0].num_threads, 3);
  EXPECT_EQ(seen[0].stream, nullptr);
  EXPECT_EQ(seen[1].device, Device::cpu(2));
  EXPECT_EQ(seen[1].lane, Lane::kCopy);
  EXPECT_EQ(seen[1].num_threads, engine_->cpu_threads(Device::cpu(2)));
  engine_->delete_var(v);
  EXPECT_THROW(engine_->set_cpu_threads(Device::cpu(0), 0), ValueError);
}

TEST_P(EngineTest, RejectsDevicesOutOfRange) {
  Var* v = engine_->new_var();
  EXPECT_THROW(engine_->push([](RunContext) {}, {}, {v}, {.device = Device::cpu(kMaxDevicesPerKind)}),
               DeviceError);
  EXPECT_THROW(engine_->push([](RunContext) {}, {}, {v}, {.device = Device::cpu(-1)}), DeviceError);
  engine_->wait_all();
  engine_->delete_var(v);
}

TEST_P(EngineTest, WritesToOneVarRunInPushOrderAcrossDevices) {
  Var* v = engine_->new_var();
  std::vector<int> order;  // guarded by the engine's ordering on v
  for (int i = 0; i < 2000; ++i) {
    engine_->push([&order, i](RunContext) { order.push_back(i); }, {}, {v},
                  {.device = Device::cpu(i % 3), .lane = i % 5 == 0 ? Lane::kCopy : Lane::kCompute});
  }
  engine_->wait_for_var(v);
  ASSERT_EQ(order.size(), 2000u);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(order[i], i);
  engine_->delete_var(v);
}

TEST_P(EngineTest, ReadersSeeTheLastEarlierWrite) {
  Var* v = engine_->new_var();
  int64_t value = 0;
  std::vector<int64_t> seen(300, -1);
  for (int i = 0; i < 100; ++i) {
    engine_->push([&value, i](RunContext) { value = i; }, {}, {v}, {.device = Device::cpu(i % 2)});
    for (int r = 0; r < 3; ++r) {
      int slot = 3 * i + r;
      engine_->push([&, slot](RunContext) { seen[slot] = value; }, {v}, {}, {.device = Device::cpu(r)});
    }
  }
  engine_->wait_all();
  for (int slot = 0; slot < 300; ++slot) EXPECT_EQ(seen[slot], slot / 3) << slot;
  engine_->delete_var(v);
}

TEST_P(EngineTest, WaitAfterEveryOpSeesItsResult) {
  // Mostly tiny ops (the waiter spins), some slow ones (the waiter sleeps).
  Var* v = engine_->new_var();
  int value = -1;
  for (int i = 0; i < 2000; ++i) {
    engine_->push(
        [&value, i](RunContext) {
          if (i % 97 == 0) std::this_thread::sleep_for(200us);
          value = i;
        },
        {}, {v}, {.device = Device::cpu(i % 3)});
    if (i % 2 == 0) {
      engine_->wait_for_var(v);
    } else {
      engine_->wait_all();
    }
    ASSERT_EQ(value, i);
  }
  engine_->delete_var(v);
}

TEST_P(EngineTest, DuplicateAndOverlappingVarsDoNotDeadlock) {
  Var* a = engine_->new_var();
  Var* b = engine_->new_var();
  int runs = 0;
  Var* const reads[] = {a, a, b, nullptr};
  Var* const writes[] = {b, a, b};
  for (int i = 0; i < 10; ++i) engine_->push([&](RunContext) { ++runs; }, reads, writes, {});
  engine_->push([&](RunContext) { ++runs; }, {a, a, a, a, a, a, a, a}, {a, a, a, a, a, a, a, a}, {});
  engine_->wait_all();
  EXPECT_EQ(runs, 11);
  engine_->delete_var(a);
  engine_->delete_var(b);
}

TEST_P(EngineTest, NestedPushesAreWaitedFor) {
  Var* v = engine_->new_var();
  std::atomic<int> runs{0};
  Engine* e = engine_.get();
  engine_->push(
      [&, e, v](RunContext) {
        ++runs;
        for (int i = 0; i < 10; ++i) e->push([&](RunContext) { ++runs; }, {}, {v}, {.device = Device::cpu(1)});
      },
      {}, {}, {});
  engine_->wait_all();
  EXPECT_EQ(runs.load(), 11);
  engine_->delete_var(v);
}

TEST_P(EngineTest, ThrowingOpPoisonsItsOutputsAndTheirDependants) {
  Var* a = engine_->new_var();
  Var* b = engine_->new_var();
  Var* c = engine_->new_var();
  Var* d = engine_->new_var();
  std::atomic<bool> dependant_ran{false}, independent_ran{false};
  engine_->push([](RunContext) { throw ValueError("the value was bad"); }, {}, {a},
                {.device = Device::cpu(1), .name = "exploder"});
  engine_->push([&](RunContext) { dependant_ran = true; }, {a}, {b}, {.name = "dependant"});
  engine_->push([&](RunContext) { dependant_ran = true; }, {b}, {c}, {.name = "grandchild"});
  engine_->push([&](RunContext) { independent_ran = true; }, {}, {d}, {.name = "independent"});

  engine_->wait_for_var(d);
  EXPECT_TRUE(independent_ran);
  for (Var* v : {a, b, c}) {
    // The original type survives, and the message names the op and device.
    EXPECT_THROW(engine_->wait_for_var(v), ValueError);
    expect_error_containing([&] { engine_->wait_for_var(v); }, "exploder on cpu(1): the value was bad");
  }
  EXPECT_FALSE(dependant_ran);
  expect_error_containing([&] { engine_->wait_all(); }, "exploder");
  engine_->wait_all();  // the record was cleared

  // The engine keeps working, and the poison stays until a clean overwrite.
  int value = 0;
  engine_->push([&](RunContext) { value = 7; }, {}, {d}, {});
  engine_->wait_for_var(d);
  EXPECT_EQ(value, 7);
  EXPECT_THROW(engine_->wait_for_var(a), ValueError);
  engine_->wait_all();
  for (Var* v : {a, b, c, d}) engine_->delete_var(v);
}

TEST_P(EngineTest, NonKilnExceptionsBecomeKilnErrorsWithContext) {
  Var* a = engine_->new_var();
  engine_->push([](RunContext) { throw std::runtime_error("disk on fire"); }, {}, {a},
                {.device = Device::cpu(2), .lane = Lane::kCopy, .name = "writer"});
  expect_error_containing([&] { engine_->wait_for_var(a); }, "writer on cpu(2): disk on fire");
  engine_->push([](RunContext) { throw 42; }, {}, {a}, {.name = "odd"});
  expect_error_containing([&] { engine_->wait_for_var(a); }, "odd on cpu(0): unknown exception");
  EXPECT_THROW(engine_->wait_all(), Error);
  engine_->delete_var(a);
}

TEST_P(EngineTest, CleanOverwriteClearsPoisonButReadModifyWriteKeepsIt) {
  Var* a = engine_->new_var();
  Var* b = engine_->new_var();
  engine_->push([](RunContext) { throw ValueError("boom"); }, {}, {a, b}, {.name = "fail"});
  bool rmw_ran = false, overwrite_ran = false;
  engine_->push([&](RunContext) { rmw_ran = true; }, {b}, {b}, {.name = "rmw"});  // reads b: skipped
  engine_->push([&](RunContext) { overwrite_ran = true; }, {}, {a}, {.name = "fill"});
  engine_->wait_for_var(a);  // clean again
  EXPECT_TRUE(overwrite_ran);
  EXPECT_FALSE(rmw_ran);
  expect_error_containing([&] { engine_->wait_for_var(b); }, "fail on cpu(0): boom");
  EXPECT_THROW(engine_->wait_all(), ValueError);
  engine_->delete_var(a);
  engine_->delete_var(b);
}

TEST_P(EngineTest, WaitAllRethrowsTheFirstErrorOnce) {
  Var* a = engine_->new_var();
  Var* b = engine_->new_var();
  engine_->push([](RunContext) { throw ValueError("first"); }, {}, {a}, {.name = "one"});
  engine_->push([](RunContext) { throw IndexError("second"); }, {}, {a}, {.name = "two"});  // after "one"
  engine_->push([](RunContext) {}, {a}, {b}, {.name = "skipped"});
  EXPECT_THROW(engine_->wait_all(), ValueError);
  engine_->wait_all();
  EXPECT_THROW(engine_->wait_for_var(a), IndexError);  // the last write's error
  expect_error_containing([&] { engine_->wait_for_var(b); }, "two on cpu(0): second");
  engine_->push([](RunContext) { throw ValueError("third"); }, {}, {}, {.name = "three"});
  expect_error_containing([&] { engine_->wait_all(); }, "three on cpu(0): third");
  engine_->wait_all();
  engine_->delete_var(a);
  engine_->delete_var(b);
}

TEST_P(EngineTest, DeleteVarWithPendingWorkIsDeferred) {
  std::vector<int> log;  // ordered by v
  Var* v = engine_->new_var();
  engine_->push([&](RunContext) { log.push_back(1); }, {}, {v}, {.device = Device::cpu(1)});
  engine_->push([&](RunContext) { log.push_back(2); }, {v}, {}, {.device = Device::cpu(2)});
  engine_->delete_var(v);
  // The record must not be reused while those ops still hold it.
  std::vector<Var*> fresh;
  for (int i = 0; i < 100; ++i) fresh.push_back(engine_->new_var());
  for (Var* f : fresh) engine_->push([](RunContext) {}, {}, {f}, {});
  engine_->wait_all();
  EXPECT_EQ(log, (std::vector<int>{1, 2}));
  for (Var* f : fresh) engine_->delete_var(f);
}

TEST_P(EngineTest, DeleteVarFromInsideAnOpAndFromAClosureDestructor) {
  Engine* e = engine_.get();
  Var* a = engine_->new_var();
  int value = 0;
  engine_->push(
      [&value, a, e](RunContext) {
        value = 1;
        e->delete_var(a);  // the op still holds a
      },
      {}, {a}, {});
  // A closure owning a "chunk" whose destructor deletes its variable (as
  // NDArray storage does when the last op holding it is destroyed).
  Var* b = engine_->new_var();
  auto chunk = std::shared_ptr<int>(new int(5), [e, b](int* p) {
    delete p;
    e->delete_var(b);
  });
  for (int i = 0; i < 3; ++i)
    engine_->push([chunk](RunContext) { ++*chunk; }, {}, {b}, {.device = Device::cpu(i)});
  chunk.reset();
  engine_->wait_all();
  EXPECT_EQ(value, 1);
  // A poisoned variable's record comes back clean.
  Var* c = engine_->new_var();
  engine_->push([](RunContext) { throw ValueError("x"); }, {}, {c}, {});
  engine_->delete_var(c);
  EXPECT_THROW(engine_->wait_all(), ValueError);
  for (int i = 0; i < 200; ++i) {
    Var* d = engine_->new_var();
    engine_->wait_for_var(d);
    engine_->delete_var(d);
  }
}

// delete_var's on_idle runs once the variable is idle: at once when nothing
// is pending, else after the last op using it (what frees NDArray storage).
TEST_P(EngineTest, DeleteVarRunsOnIdleAfterTheLastOpUsingIt) {
  Var* idle = engine_->new_var();
  bool ran_at_once = false;
  engine_->delete_var(idle, [&] { ran_at_once = true; });
  EXPECT_TRUE(ran_at_once);

  Engine* e = engine_.get();
  Var* v = engine_->new_var();
  std::atomic<int> stage{0};  // 1: the reader ran; 2: on_idle ran
  std::atomic<bool> idle_after_reader{false};
  engine_->push([](RunContext) {}, {}, {v}, {});
  engine_->push(
      [&, v, e](RunContext) {
        // Deleted while this op (the last one using v) still runs.
        e->delete_var(v, [&] { idle_after_reader.store(stage.load() == 1); stage.store(2); });
        EXPECT_EQ(stage.load(), 0);  // not before the op has finished
        stage.store(1);
      },
      {v}, {}, {});
  engine_->wait_all();
  EXPECT_EQ(stage.load(), 2);
  EXPECT_TRUE(idle_after_reader.load());
}

// An op that throws still lets go of its variables: on_idle runs once it
// (the last op using the variable) has finished, failed or skipped.
TEST_P(EngineTest, DeleteVarRunsOnIdleAfterTheLastOpFails) {
  Gate gate;
  if (GetParam() == Kind::kNaive) gate.open();  // runs each op inside push
  Var* v = engine_->new_var();
  std::atomic<int> idle_calls{0};
  engine_->push(
      [&gate](RunContext) {
        gate.wait();
        throw ValueError("the write failed");
      },
      {}, {v}, {.name = "failing_write"});
  engine_->push([](RunContext) { ADD_FAILURE() << "ran on a poisoned input"; }, {v}, {}, {.name = "skipped_read"});
  engine_->delete_var(v, [&] { idle_calls.fetch_add(1); });
  if (GetParam() == Kind::kThreaded) {
    EXPECT_EQ(idle_calls.load(), 0);  // both ops still pending
  }
  gate.open();
  expect_error_containing([&] { engine_->wait_all(); }, "the write failed");
  EXPECT_EQ(idle_calls.load(), 1);
}

// wait_for_var returns once the pending write has finished (the polling fast
// path), and still rethrows the writer's error.
TEST_P(EngineTest, WaitForVarAfterEachShortWrite) {
  Var* v = engine_->new_var();
  int value = 0;
  for (int i = 0; i < 200; ++i) {
    engine_->push([&value, i](RunContext) { value = i; }, {}, {v}, {});
    engine_->wait_for_var(v);
    ASSERT_EQ(value, i);
  }
  engine_->push([](RunContext) { throw ValueError("bad write"); }, {}, {v}, {});
  expect_error_containing([&] { engine_->wait_for_var(v); }, "bad write");
  EXPECT_THROW(engine_->wait_all(), ValueError);
  engine_->delete_var(v);
}

TEST_P(EngineTest, SeveralThreadsPushingKeepPerThreadOrderOnEveryVar) {
#ifdef KILN_TSAN_BUILD
  constexpr int kOpsPerThread = 2000;
#else
  constexpr int kOpsPerThread = 10000;
#endif
  constexpr int kThreads = 4, kVars = 8;
  struct Entry {
    int thread, seq;
  };
  std::vector<Var*> vars;
  std::vector<std::vector<Entry>> logs(kVars);  // per var, ordered by the engine
  for (int i = 0; i < kVars; ++i) vars.push_back(engine_->new_var());
  std::vector<std::vector<int>> min_seen(kThreads);
  Engine* e = engine_.get();
  auto pusher = [&](int t) {
    std::vector<int>& mins = min_seen[t];
    mins.resize(kOpsPerThread, 0);
    uint64_t rng = 12345 + t;
    int last_write_on[kVars] = {};
    for (int i = 0; i < kOpsPerThread; ++i) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      int x = static_cast<int>((rng >> 33) % kVars), y = static_cast<int>((rng >> 45) % kVars);
      int seq = i + 1;
      if (rng & (1ull << 20)) {  // write x and y (in a random order: must not deadlock)
        e->push(
            [&logs, t, seq, x, y](RunContext) {
              logs[x].push_back({t, seq});
              if (y != x) logs[y].push_back({t, seq});
            },
            {}, {vars[x], vars[y]}, {.device = Device::cpu(t % 2)});
        last_write_on[x] = last_write_on[y] = seq;
      } else {  // read x: must see this thread's last write to x
        int expect = last_write_on[x];
        e->push(
            [&logs, &mins, t, i, x, expect](RunContext) {
              int last = 0;
              for (auto it = logs[x].rbegin(); it != logs[x].rend(); ++it)
                if (it->thread == t) {
                  last = it->seq;
                  break;
                }
              mins[i] = last >= expect ? 0 : 1;
            },
            {vars[x]}, {}, {.device = Device::cpu(2 + t % 2)});
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(pusher, t);
  for (auto& th : threads) th.join();
  engine_->wait_all();
  int64_t total = 0;
  for (int v = 0; v < kVars; ++v) {
    int last[kThreads] = {};
    for (const Entry& en : logs[v]) {
      ASSERT_GT(en.seq, last[en.thread]) << "var " << v << " thread " << en.thread;
      last[en.thread] = en.seq;
    }
    total += static_cast<int64_t>(logs[v].size());
  }
  EXPECT_GT(total, 0);
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kOpsPerThread; ++i) ASSERT_EQ(min_seen[t][i], 0) << "thread " << t << " op " << i;
  for (Var* v : vars) engine_->delete_var(v);
}

// ---- threaded engine only

class ThreadedEngineTest : public testing::Test {
 protected:
  std::unique_ptr<Engine> engine_ = create(Kind::kThreaded);
};

TEST_F(ThreadedEngineTest, WaitFromInsideAnOpThrows) {
  Var* v = engine_->new_var();
  Engine* e = engine_.get();
  std::atomic<int> threw{0};
  engine_->push(
      [&, e, v](RunContext) {
        try {
          e->wait_all();
        } catch (const Error&) {
          ++threw;
        }
        try {
          e->wait_for_var(v);
        } catch (const Error&) {
          ++threw;
        }
      },
      {}, {}, {});
  engine_->wait_all();
  EXPECT_EQ(threw.load(), 2);
  engine_->delete_var(v);
}

TEST_F(ThreadedEngineTest, DevicesAndLanesRunInParallel) {
  // Each op waits for a flag that only another lane's op sets: this passes
  // only if cpu(0) compute, cpu(1) compute and cpu(0) copy have their own threads.
  Gate g01, g10, gcopy;
  engine_->push([&](RunContext) { g10.open(); g01.wait(); }, {}, {}, {.device = Device::cpu(0)});
  engine_->push([&](RunContext) { g01.open(); g10.wait(); gcopy.wait(); }, {}, {}, {.device = Device::cpu(1)});
  engine_->push([&](RunContext) { g10.wait(); gcopy.open(); }, {}, {}, {.device = Device::cpu(0), .lane = Lane::kCopy});
  engine_->wait_all();
  EXPECT_TRUE(g01.is_open() && g10.is_open() && gcopy.is_open());
}

TEST_F(ThreadedEngineTest, HigherPriorityRunsFirstAmongReadyOps) {
  Gate started, release;
  std::vector<int> order;  // appended on cpu(0)'s compute thread only
  engine_->push([&](RunContext) { started.open(); release.wait(); }, {}, {}, {.name = "gate"});
  ASSERT_TRUE(started.wait());
  const int priorities[] = {0, 5, -1, 5, 10, 0, -3, 10};
  for (int i = 0; i < 8; ++i)
    engine_->push([&order, i](RunContext) { order.push_back(i); }, {}, {}, {.priority = priorities[i]});
  release.open();
  engine_->wait_all();
  EXPECT_EQ(order, (std::vector<int>{4, 7, 1, 3, 0, 5, 2, 6}));
}

TEST_F(ThreadedEngineTest, OpsReadiedTogetherRunInPushOrder) {
  Var* v = engine_->new_var();
  Gate release;
  std::vector<int> order;  // appended on cpu(1)'s compute thread only
  engine_->push([&](RunContext) { release.wait(); }, {}, {v}, {.name = "writer"});
  for (int i = 0; i < 6; ++i)
    engine_->push([&order, i](RunContext) { order.push_back(i); }, {v}, {}, {.device = Device::cpu(1)});
  release.open();
  engine_->wait_all();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  engine_->delete_var(v);
}

TEST_F(ThreadedEngineTest, PushOnADeletedVarIsCaughtWhileItIsPending) {
  Var* v = engine_->new_var();
  Gate release;
  engine_->push([&](RunContext) { release.wait(); }, {}, {v}, {});
  engine_->delete_var(v);  // deferred: the gate op holds v
  EXPECT_THROW(engine_->push([](RunContext) {}, {v}, {}, {.name = "late"}), InternalError);
  EXPECT_EQ(engine_->num_pending(), 1);
  release.open();
  engine_->wait_all();
}

TEST_F(ThreadedEngineTest, WaitForVarWaitsForWritesOnly) {
  Var* v = engine_->new_var();
  Gate release;
  int value = 0;
  engine_->push([&](RunContext) { value = 3; }, {}, {v}, {});
  engine_->push([&](RunContext) { release.wait(); }, {v}, {}, {.device = Device::cpu(1)});
  engine_->wait_for_var(v);  // must not wait for the blocked reader
  EXPECT_EQ(value, 3);
  release.open();
  engine_->wait_all();
  engine_->delete_var(v);
}

TEST_F(ThreadedEngineTest, BackPressureBoundsPendingBytes) {
  constexpr int64_t kBound = 1000, kOpBytes = 100;
  engine_->set_max_pending_bytes(kBound);
  std::atomic<int64_t> max_seen{0};
  Engine* e = engine_.get();
  int64_t max_after_push = 0;
  for (int i = 0; i < 200; ++i) {
    engine_->push(
        [&, e](RunContext) {
          int64_t p = e->pending_bytes();
          int64_t m = max_seen.load();
          while (p > m && !max_seen.compare_exchange_weak(m, p)) {
          }
          std::this_thread::sleep_for(20us);
        },
        {}, {}, {.device = Device::cpu(i % 3), .bytes = kOpBytes});
    max_after_push = std::max(max_after_push, engine_->pending_bytes());
  }
  engine_->wait_all();
  // The bound holds per device (three here); while another device has
  // nothing pending (a worker that got ahead on a loaded machine) a device's
  // backlog may grow to kStarvingSlack times the bound, no further.
  constexpr int64_t kDevices = 3;
  constexpr int64_t kLimit = kDevices * (Engine::kStarvingSlack * kBound + kOpBytes);
  EXPECT_LE(max_seen.load(), kLimit);
  EXPECT_LE(max_after_push, kLimit);
  EXPECT_GE(max_after_push, kBound / 2);  // it did run ahead, up to the bound
  EXPECT_EQ(engine_->pending_bytes(), 0);
}

TEST_F(ThreadedEngineTest, BackPressureNeverBlocksAnEmptyEngineOrAWorker) {
  engine_->set_max_pending_bytes(0);
  Engine* e = engine_.get();
  std::atomic<int> inner{0};
  // A huge op on an empty engine is accepted; its pushes from the worker
  // thread must not wait for it (they would wait for themselves).
  engine_->push(
      [&, e](RunContext) {
        for (int i = 0; i < 5; ++i) e->push([&](RunContext) { ++inner; }, {}, {}, {.bytes = 1 << 30});
      },
      {}, {}, {.bytes = int64_t{1} << 40});
  engine_->wait_all();
  EXPECT_EQ(inner.load(), 5);
}

TEST_F(ThreadedEngineTest, APendingRendezvousSuspendsBackPressure) {
  // SyncBatchNorm's pattern from one thread: cpu(0)'s rendezvous op waits for
  // an op of cpu(1) that is pushed only after many more cpu(0) ops, which
  // are over the bound. Were those pushes held back, cpu(1)'s op would never
  // be pushed: this test would hang.
  engine_->set_max_pending_bytes(100);
  Gate partner;
  Var* v = engine_->new_var();
  engine_->push([&](RunContext) { ASSERT_TRUE(partner.wait()); }, {}, {v},
                {.device = Device::cpu(0), .name = "rendezvous", .rendezvous = true});
  for (int i = 0; i < 20; ++i) engine_->push([](RunContext) {}, {v}, {}, {.device = Device::cpu(0), .bytes = 1000});
  engine_->push([&](RunContext) { partner.open(); }, {}, {},
                {.device = Device::cpu(1), .name = "partner", .rendezvous = true});
  engine_->wait_all();
  // With no rendezvous pending (and cpu(1) busy), the bound applies again.
  engine_->push([](RunContext) { std::this_thread::sleep_for(20ms); }, {}, {}, {.device = Device::cpu(1)});
  engine_->push([](RunContext) { std::this_thread::sleep_for(1ms); }, {}, {}, {.bytes = 1000});
  engine_->push([](RunContext) {}, {}, {}, {.bytes = 1000});
  EXPECT_LE(engine_->pending_bytes(), 1000);
  engine_->wait_all();
  engine_->delete_var(v);
}

TEST_F(ThreadedEngineTest, BackPressureDoesNotHoldOneDeviceWhileARecentlyFedOneIdles) {
  // A data-parallel loop issues shard 0's ops for cpu(0), then shard 1's for
  // cpu(1), from one thread. cpu(0) is over the bound and stuck here; were
  // its pushes held, cpu(1) (fed last step, idle now) would wait for nothing.
  engine_->set_max_pending_bytes(100);
  engine_->push([](RunContext) {}, {}, {}, {.device = Device::cpu(1)});
  engine_->wait_all();
  Gate release;
  std::thread opener([&] {  // frees cpu(0) after 2 s, in case the pushes below are held
    for (int i = 0; i < 200 && !release.is_open(); ++i) std::this_thread::sleep_for(10ms);
    release.open();
  });
  auto start = std::chrono::steady_clock::now();
  // Six ops of 60 bytes: past the bound of 100, within kStarvingSlack times it.
  static_assert(6 * 60 <= Engine::kStarvingSlack * 100);
  engine_->push([&](RunContext) { release.wait(); }, {}, {}, {.device = Device::cpu(0), .bytes = 60});
  for (int i = 0; i < 5; ++i) engine_->push([](RunContext) {}, {}, {}, {.device = Device::cpu(0), .bytes = 60});
  auto held = std::chrono::steady_clock::now() - start;
  release.open();
  opener.join();
  engine_->wait_all();
  EXPECT_LT(held, 1s);
}

TEST_F(ThreadedEngineTest, OneOpLargerThanTheSlackDoesNotHoldAnIdleDevicesWork) {
  // A hybridized data-parallel step: cpu(0)'s forward is one op holding far
  // more than kStarvingSlack times the bound (its saved values); the next
  // push for cpu(0) (the loss) must not wait for it while cpu(1), fed last
  // step, idles, or cpu(1)'s forward would start only after cpu(0)'s. The
  // push after that is held again: the backlog stays bounded.
  engine_->set_max_pending_bytes(100);
  engine_->push([](RunContext) {}, {}, {}, {.device = Device::cpu(1)});
  engine_->wait_all();
  Gate release;
  std::thread opener([&] {  // frees cpu(0) after 2 s, in case the push below is held
    for (int i = 0; i < 200 && !release.is_open(); ++i) std::this_thread::sleep_for(10ms);
    release.open();
  });
  engine_->push([&](RunContext) { release.wait(); }, {}, {}, {.device = Device::cpu(0), .bytes = 100000});
  auto start = std::chrono::steady_clock::now();
  engine_->push([](RunContext) {}, {}, {}, {.device = Device::cpu(0), .bytes = 10});
  auto held = std::chrono::steady_clock::now() - start;
  EXPECT_LT(held, 1s) << "the push after one large op waited while cpu(1) was idle";
  // A third push waits for cpu(0) (the opener frees it after 2 s).
  start = std::chrono::steady_clock::now();
  engine_->push([](RunContext) {}, {}, {}, {.device = Device::cpu(0), .bytes = 10});
  EXPECT_GE(std::chrono::steady_clock::now() - start, 500ms) << "the backlog grew past one large op plus one";
  release.open();
  opener.join();
  engine_->wait_all();
}

TEST_F(ThreadedEngineTest, DestroyingAnEngineWaitsForItsWork) {
  std::atomic<int> runs{0};
  {
    auto e = create(Kind::kThreaded);
    Var* v = e->new_var();
    for (int i = 0; i < 100; ++i)
      e->push([&](RunContext) { ++runs; std::this_thread::sleep_for(10us); }, {}, {v}, {.device = Device::cpu(i % 2)});
    e->delete_var(v);
  }
  EXPECT_EQ(runs.load(), 100);
}

TEST(GlobalEngine, IsThreadedByDefaultAndWaitAllWorks) {
  Engine& e = get();
  EXPECT_EQ(&e, &get());
  if (!std::getenv("KILN_ENGINE")) {
    EXPECT_EQ(e.kind(), Kind::kThreaded);
  }
  Var* v = e.new_var();
  int value = 0;
  e.push([&](RunContext) { value = 1; }, {}, {v}, {});
  wait_all();
  EXPECT_EQ(value, 1);
  // Left pending on purpose: the engine must shut down cleanly at exit.
  e.push([](RunContext) { std::this_thread::sleep_for(1ms); }, {}, {v}, {});
  e.delete_var(v);
}

}  // namespace
}  // namespace kiln::engine
