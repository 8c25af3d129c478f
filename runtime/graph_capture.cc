#include "runtime/graph_capture.h"

#include <fmt/format.h>

#include <cstdlib>

namespace kiln {

namespace {

struct Counters {
  std::atomic<int64_t> captures{0}, recaptures{0}, replays{0}, warmups{0};
  std::atomic<int64_t> fallbacks[kNumGraphFallbacks] = {};
};

Counters& counters() {
  static auto* c = new Counters();  // leaked: counted into by engine workers until exit
  return *c;
}

// -1: not read from the environment yet.
std::atomic<int> g_enabled{-1};

}  // namespace

std::string_view graph_fallback_name(GraphFallback reason) {
  switch (reason) {
    case GraphFallback::kDisabled:
      return "disabled";
    case GraphFallback::kRandomPerCall:
      return "random per call";
    case GraphFallback::kUnsafeOp:
      return "op not capturable";
    case GraphFallback::kEmptyArray:
      return "empty array";
    case GraphFallback::kCaptureFailed:
      return "capture failed";
    case GraphFallback::kOutOfMemory:
      return "out of memory";
    case GraphFallback::kModeChanged:
      return "mode changed";
    case GraphFallback::kReplayFailed:
      return "replay failed";
    case GraphFallback::kMemoryMoves:
      return "memory moves";
  }
  return "unknown";
}

int64_t GraphCaptureStats::total_fallbacks() const {
  int64_t n = 0;
  for (int64_t f : fallbacks) n += f;
  return n;
}

std::string GraphCaptureStats::to_string() const {
  std::string s = fmt::format("captures {} (recaptured {}), replays {}, warm-up runs {}, fallbacks {}", captures,
                              recaptures, replays, warmups, total_fallbacks());
  const char* sep = ": ";
  for (int i = 0; i < kNumGraphFallbacks; ++i) {
    if (fallbacks[i] == 0) continue;
    s += fmt::format("{}{} {}", sep, graph_fallback_name(static_cast<GraphFallback>(i)), fallbacks[i]);
    sep = ", ";
  }
  return s;
}

GraphCaptureStats graph_capture_stats() {
  Counters& c = counters();
  GraphCaptureStats s;
  s.captures = c.captures.load(std::memory_order_relaxed);
  s.recaptures = c.recaptures.load(std::memory_order_relaxed);
  s.replays = c.replays.load(std::memory_order_relaxed);
  s.warmups = c.warmups.load(std::memory_order_relaxed);
  for (int i = 0; i < kNumGraphFallbacks; ++i) s.fallbacks[i] = c.fallbacks[i].load(std::memory_order_relaxed);
  return s;
}

void graph_capture_reset_stats() {
  Counters& c = counters();
  for (auto* a : {&c.captures, &c.recaptures, &c.replays, &c.warmups}) a->store(0, std::memory_order_relaxed);
  for (auto& a : c.fallbacks) a.store(0, std::memory_order_relaxed);
}

void graph_capture_count_capture(bool recapture) {
  counters().captures.fetch_add(1, std::memory_order_relaxed);
  if (recapture) counters().recaptures.fetch_add(1, std::memory_order_relaxed);
}
void graph_capture_count_replay() { counters().replays.fetch_add(1, std::memory_order_relaxed); }
void graph_capture_count_warmup() { counters().warmups.fetch_add(1, std::memory_order_relaxed); }
void graph_capture_count_fallback(GraphFallback reason) {
  counters().fallbacks[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
}

bool graph_capture_enabled() {
  int v = g_enabled.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("KILN_CUDA_GRAPHS");
    v = env != nullptr && std::string_view(env) == "0" ? 0 : 1;
    int expected = -1;
    // A concurrent set_enabled wins over the environment.
    if (!g_enabled.compare_exchange_strong(expected, v, std::memory_order_relaxed)) v = expected;
  }
  return v == 1;
}

void graph_capture_set_enabled(bool on) { g_enabled.store(on ? 1 : 0, std::memory_order_relaxed); }

std::optional<GraphFallback> capture_blocker(std::span<const OpId> ops, std::span<const bool> draws_random,
                                             bool empty_binding, const std::function<bool(OpId)>& op_capturable,
                                             std::string* detail) {
  // Random draws first: they block however capturable the kernel is (the
  // graph would replay the recorded stream positions, the same mask each call).
  for (size_t i = 0; i < ops.size(); ++i) {
    if (i < draws_random.size() && draws_random[i]) {
      if (detail) *detail = std::string(op_def(ops[i]).name);
      return GraphFallback::kRandomPerCall;
    }
  }
  for (OpId op : ops) {
    if (!op_capturable(op)) {
      if (detail) *detail = std::string(op_def(op).name);
      return GraphFallback::kUnsafeOp;
    }
  }
  if (empty_binding) return GraphFallback::kEmptyArray;
  return std::nullopt;
}

}  // namespace kiln
