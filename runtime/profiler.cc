// The profiler's event log and its Chrome trace writer.
//
// Trace layout: one process per device (pid = 1000 * device kind + id, named
// "cpu(0)"), one thread row per recording thread (tid = Event::thread, named
// after its lane: "compute" or "copy"), one complete ("X") event per op with
// ts/dur in microseconds.
#include "runtime/profiler.h"

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "ir/error.h"

namespace kiln::profiler {

namespace detail {
std::atomic<bool> g_enabled{false};
}  // namespace detail

namespace {

// Leaked on purpose: engine workers may record while statics are destroyed.
struct Log {
  std::mutex mutex;
  std::vector<Event> events;
};
Log& log() {
  static Log* l = new Log;
  return *l;
}

std::chrono::steady_clock::time_point epoch() {
  static const auto t = std::chrono::steady_clock::now();
  return t;
}

const char* lane_name(int lane) { return lane == 1 ? "copy" : "compute"; }

int device_pid(Device d) { return 1000 * static_cast<int>(d.kind) + d.id; }

// Appends `s` as a JSON string literal.
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string trace_json(const std::vector<Event>& events) {
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  bool first = true;
  auto begin_event = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  std::map<int, Device> devices;                        // pid -> device
  std::set<std::pair<int, std::pair<uint64_t, int>>> rows;  // (pid, (tid, lane))
  for (const Event& e : events) {
    devices.emplace(device_pid(e.device), e.device);
    rows.insert({device_pid(e.device), {e.thread, e.lane}});
  }
  for (const auto& [pid, device] : devices) {
    begin_event();
    out += fmt::format("{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":", pid);
    append_json_string(out, device.to_string());
    out += fmt::format("}}}},\n{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{},\"tid\":0,"
                       "\"args\":{{\"sort_index\":{}}}}}",
                       pid, pid);
  }
  for (const auto& [pid, row] : rows) {
    begin_event();
    out += fmt::format("{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}",
                       pid, row.first, lane_name(row.second));
  }
  for (const Event& e : events) {
    begin_event();
    out += "{\"name\":";
    append_json_string(out, e.name);
    out += fmt::format(",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f},"
                       "\"args\":{{\"bytes\":{}}}}}",
                       lane_name(e.lane), device_pid(e.device), e.thread, e.start_ns / 1000.0,
                       std::max<int64_t>(0, e.end_ns - e.start_ns) / 1000.0, e.bytes);
  }
  out += "\n]}\n";
  return out;
}

std::string* g_exit_path = nullptr;  // KILN_PROFILE, dumped at exit

}  // namespace

void start() {
  epoch();
  detail::g_enabled.store(true, std::memory_order_relaxed);
}

void stop() { detail::g_enabled.store(false, std::memory_order_relaxed); }

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch()).count();
}

void record(Event event) {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.events.push_back(std::move(event));
}

std::vector<Event> events() {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  return l.events;
}

void clear() {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.events.clear();
}

void dump(const std::string& path) {
  std::string json = trace_json(events());
  std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw IOError(fmt::format("profiler: cannot write '{}': {}", tmp, std::strerror(errno)));
  bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  int saved = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    throw IOError(fmt::format("profiler: writing '{}' failed: {}", tmp, std::strerror(saved ? saved : errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw IOError(fmt::format("profiler: cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err)));
  }
}

void init_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* path = std::getenv("KILN_PROFILE");
    if (!path || !*path) return;
    g_exit_path = new std::string(path);
    start();
    std::atexit([] {
      try {
        dump(*g_exit_path);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln: KILN_PROFILE: %s\n", e.what());
      }
    });
  });
}

}  // namespace kiln::profiler
