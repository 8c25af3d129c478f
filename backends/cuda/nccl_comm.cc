#include "backends/cuda/nccl_comm.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/cuda/device_runtime.h"
#include "ir/error.h"
#include "runtime/storage.h"

#if KILN_HAVE_NCCL
#include <nccl.h>
#endif

namespace kiln::cuda {

#if !KILN_HAVE_NCCL

std::string nccl_unavailable() { return "this build has no NCCL (nccl.h was not found when it was configured)"; }
std::string nccl_description() { return "no (" + nccl_unavailable() + ")"; }
bool nccl_supports(DType) { return false; }
NcclId nccl_make_id() { throw NotSupported("NCCL: " + nccl_unavailable()); }

struct NcclComm::Impl {};
NcclComm::NcclComm(std::vector<int> devices, int first_rank, int nranks)
    : devices_(std::move(devices)), first_rank_(first_rank), nranks_(nranks) {}
NcclComm::~NcclComm() = default;
std::shared_ptr<NcclComm> NcclComm::in_process(const std::vector<int>&) {
  throw NotSupported("NCCL: " + nccl_unavailable());
}
std::shared_ptr<NcclComm> NcclComm::across_processes(int, int, int, const NcclId&, double) {
  throw NotSupported("NCCL: " + nccl_unavailable());
}
std::string NcclComm::describe() const { return {}; }
void NcclComm::run(const NcclBucket&) { throw NotSupported("NCCL: " + nccl_unavailable()); }
std::string NcclComm::failure() const { return {}; }
void NcclComm::abort_after_timeout(const std::string&, bool) {}

#else

namespace {

// The entry points Kiln uses, resolved from the library opened at run time.
struct Api {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetLastError) last_error = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitAll) init_all = nullptr;
  decltype(&ncclCommInitRankConfig) init_rank_config = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclCommGetAsyncError) async_error = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  int version = 0;
  std::string library;
  std::string unavailable;  // empty: loaded
};

const Api& api() {
  static const Api a = [] {
    Api r;
    const char* off = std::getenv("KILN_NCCL");
    if (off != nullptr && std::string(off) == "0") {
      r.unavailable = "NCCL is turned off (KILN_NCCL=0)";
      return r;
    }
    const char* path = std::getenv("KILN_NCCL_LIBRARY");
    r.library = path != nullptr && *path != '\0' ? path : "libnccl.so.2";
    void* h = dlopen(r.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      r.unavailable = fmt::format("{} could not be loaded ({}); set KILN_NCCL_LIBRARY to its path", r.library,
                                  e != nullptr ? e : "no reason given");
      return r;
    }
    bool ok = true;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)> >(dlsym(h, name));
      if (fn == nullptr && ok) {
        ok = false;
        r.unavailable = fmt::format("{} has no {} (NCCL older than 2.14?)", r.library, name);
      }
    };
    get(r.get_version, "ncclGetVersion");
    get(r.error_string, "ncclGetErrorString");
    get(r.last_error, "ncclGetLastError");
    get(r.get_unique_id, "ncclGetUniqueId");
    get(r.init_all, "ncclCommInitAll");
    get(r.init_rank_config, "ncclCommInitRankConfig");
    get(r.abort, "ncclCommAbort");
    get(r.async_error, "ncclCommGetAsyncError");
    get(r.group_start, "ncclGroupStart");
    get(r.group_end, "ncclGroupEnd");
    get(r.all_reduce, "ncclAllReduce");
    get(r.broadcast, "ncclBroadcast");
    if (ok && r.get_version(&r.version) != ncclSuccess) r.unavailable = r.library + ": ncclGetVersion failed";
    return r;  // the handle stays open until exit
  }();
  return a;
}

const Api& loaded_api() {
  const Api& a = api();
  if (!a.unavailable.empty()) throw NotSupported("NCCL: " + a.unavailable);
  return a;
}

// "ncclAllReduce failed: unhandled cuda error (run with NCCL_DEBUG=INFO for details) [last error: ...]"
std::string nccl_error(const Api& a, ncclResult_t r, const char* call, ncclComm_t comm) {
  const char* last = a.last_error(comm);
  return fmt::format("{} failed: {}{}", call, a.error_string(r),
                     last != nullptr && *last != '\0' ? fmt::format(" [{}]", last) : std::string());
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBfloat16:
      return ncclBfloat16;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kInt8:
      return ncclInt8;
    case DType::kUint8:
      return ncclUint8;
    case DType::kUint32:
      return ncclUint32;
    case DType::kUint64:
      return ncclUint64;
    default:
      throw TypeError(fmt::format("NCCL cannot sum {} arrays", dtype_name(t)));
  }
}

double default_timeout_s() {
  const char* env = std::getenv("KILN_DIST_TIMEOUT_S");
  return env != nullptr ? std::atof(env) : 300.0;
}

// Segments are packed at this alignment (the padding is reduced too, unread).
constexpr size_t kPackAlign = 256;
size_t round_up(size_t n) { return (n + kPackAlign - 1) / kPackAlign * kPackAlign; }

// Restores the calling thread's current GPU.
struct DeviceGuard {
  int saved = -1;
  DeviceGuard() { (void)cudaGetDevice(&saved); }
  ~DeviceGuard() {
    if (saved >= 0) (void)cudaSetDevice(saved);
  }
};

}  // namespace

std::string nccl_unavailable() { return api().unavailable; }

std::string nccl_description() {
  const Api& a = api();
  if (!a.unavailable.empty()) return "no (" + a.unavailable + ")";
  // Since NCCL 2.9 the code is major * 10000 + minor * 100 + patch.
  return fmt::format("{}.{}.{} ({})", a.version / 10000, a.version / 100 % 100, a.version % 100, a.library);
}

bool nccl_supports(DType t) {
  try {
    (void)nccl_type(t);
    return true;
  } catch (const TypeError&) {
    return false;
  }
}

NcclId nccl_make_id() {
  const Api& a = loaded_api();
  ncclUniqueId id;
  ncclResult_t r = a.get_unique_id(&id);
  if (r != ncclSuccess) throw Error("NCCL: " + nccl_error(a, r, "ncclGetUniqueId", nullptr));
  NcclId out;
  static_assert(sizeof(id) == sizeof(out));
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

struct NcclComm::Impl {
  std::vector<ncclComm_t> comms;  // per local GPU
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> ready, done;
  bool nonblocking = false;
  double timeout_s = 300;
  std::mutex run_mu;  // serializes run(): a communicator is not thread-safe
  mutable std::mutex state_mu;
  // Guarded by state_mu: the watchdog's view.
  std::string failure;
  bool pending = false;
  std::chrono::steady_clock::time_point pending_since;
  std::string pending_what;
};

// Aborts communicators whose collectives outlive the timeout. One thread for
// the process, started by the first communicator with a timeout; the
// communicators it watches live until exit.
class NcclWatchdog {
 public:
  static NcclWatchdog& get() {
    static NcclWatchdog* w = [] {
      auto* made = new NcclWatchdog;  // never destroyed: its thread runs until exit
      // Registered after CUDA's own teardown (the first communicator made
      // CUDA calls), so it runs before it: no event is queried after that.
      std::atexit([] { get().stop(); });
      return made;
    }();
    return *w;
  }
  void watch(NcclComm* c) {
    std::lock_guard lock(mu_);
    comms_.push_back(c);
    if (!started_) {
      started_ = true;
      std::thread([this] { loop(); }).detach();
    }
  }

 private:
  void stop() {
    std::lock_guard lock(mu_);
    stopped_ = true;
  }
  void loop() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard lock(mu_);  // held while checking, so that stop() waits for a check
      if (stopped_) return;
      for (NcclComm* c : comms_) check(*c);
    }
  }
  static void check(NcclComm& c) {
    NcclComm::Impl& m = *c.impl_;
    std::string message;
    {
      std::lock_guard lock(m.state_mu);
      if (!m.pending || !m.failure.empty()) return;
      bool finished = true;
      for (cudaEvent_t e : m.done) {
        cudaError_t q = cudaEventQuery(e);
        if (q == cudaErrorNotReady) {
          finished = false;
        } else if (q != cudaSuccess) {
          (void)cudaGetLastError();  // a device error: the next synchronization reports it
        }
      }
      if (finished) {
        m.pending = false;
        return;
      }
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - m.pending_since).count();
      if (waited < m.timeout_s) return;
      message = fmt::format(
          "NCCL ({}): {} has not finished after {:.0f} s: another rank has died, is stuck, or issued different "
          "collectives; the communicator was aborted (ncclCommAbort; KILN_DIST_TIMEOUT_S sets the limit)",
          c.describe(), m.pending_what, waited);
    }
    c.abort_after_timeout(message, false);
  }

  std::mutex mu_;
  std::vector<NcclComm*> comms_;
  bool started_ = false;
  bool stopped_ = false;
};

NcclComm::NcclComm(std::vector<int> devices, int first_rank, int nranks)
    : devices_(std::move(devices)), first_rank_(first_rank), nranks_(nranks), impl_(std::make_unique<Impl>()) {
  impl_->timeout_s = default_timeout_s();
}

// Communicators live until exit (as streams do); nothing is destroyed here
// while work may still be queued on them.
NcclComm::~NcclComm() = default;

std::string NcclComm::describe() const {
  std::vector<std::string> devs;
  for (int d : devices_) devs.push_back(fmt::format("{}", Device::cuda(d)));
  if (devices_.size() == 1) return fmt::format("rank {} of {} on {}", first_rank_, nranks_, devs[0]);
  return fmt::format("ranks {}-{} of {} on {}", first_rank_, first_rank_ + static_cast<int>(devices_.size()) - 1,
                     nranks_, fmt::join(devs, ", "));
}

std::string NcclComm::failure() const {
  std::lock_guard lock(impl_->state_mu);
  return impl_->failure;
}

void NcclComm::abort_after_timeout(const std::string& message, bool caller_runs) {
  {
    std::lock_guard lock(impl_->state_mu);
    if (!impl_->failure.empty()) return;
    impl_->failure = message;
  }
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  // The watchdog takes run() out of the way when it is not itself stuck
  // inside NCCL (then the abort is what releases it).
  std::unique_lock run_lock(impl_->run_mu, std::defer_lock);
  for (int i = 0; !caller_runs && i < 20 && !run_lock.try_lock(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const Api& a = api();
  for (ncclComm_t c : impl_->comms) (void)a.abort(c);
}

namespace {

// Makes the per-GPU streams and events of a new communicator.
void make_streams(NcclComm::Impl& m, const std::vector<int>& devices) {
  for (int d : devices) {
    bind_device(d);
    Device dev = Device::cuda(d);
    cudaStream_t s = nullptr;
    KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), dev);
    m.streams.push_back(s);
    cudaEvent_t r = nullptr, e = nullptr;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&r, cudaEventDisableTiming), dev);
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), dev);
    m.ready.push_back(r);
    m.done.push_back(e);
  }
}

// Waits while a non-blocking communicator reports ncclInProgress.
ncclResult_t wait_ready(const Api& a, ncclComm_t comm, double timeout_s, bool* timed_out) {
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = a.async_error(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (timeout_s > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s) {
      *timed_out = true;
      return ncclInProgress;
    }
    std::this_thread::yield();
  }
}

}  // namespace

std::shared_ptr<NcclComm> NcclComm::in_process(const std::vector<int>& devices) {
  const Api& a = loaded_api();
  KILN_CHECK(!devices.empty(), ValueError, "NCCL: a communicator needs at least one GPU");
  for (size_t i = 0; i < devices.size(); ++i) {
    KILN_CHECK(std::count(devices.begin(), devices.end(), devices[i]) == 1, ValueError,
               "NCCL: {} appears twice in a communicator's devices (NCCL takes one rank per GPU)",
               Device::cuda(devices[i]));
  }
  static std::mutex mu;
  static auto* cache = new std::map<std::vector<int>, std::shared_ptr<NcclComm> >;  // kept until exit
  std::lock_guard lock(mu);
  auto it = cache->find(devices);
  if (it != cache->end()) return it->second;
  std::shared_ptr<NcclComm> c(new NcclComm(devices, 0, static_cast<int>(devices.size())));
  c->impl_->comms.resize(devices.size());
  {
    DeviceGuard guard;
    ncclResult_t r = a.init_all(c->impl_->comms.data(), static_cast<int>(devices.size()), devices.data());
    if (r != ncclSuccess) {
      throw Error(fmt::format("NCCL ({}): {}", c->describe(), nccl_error(a, r, "ncclCommInitAll", nullptr)));
    }
    make_streams(*c->impl_, devices);
  }
  if (c->impl_->timeout_s > 0) NcclWatchdog::get().watch(c.get());
  cache->emplace(devices, c);
  return c;
}

std::shared_ptr<NcclComm> NcclComm::across_processes(int device, int rank, int nranks, const NcclId& id,
                                                     double timeout_s) {
  const Api& a = loaded_api();
  static std::mutex mu;
  static auto* only = new std::shared_ptr<NcclComm>;  // kept until exit
  std::lock_guard lock(mu);
  if (*only != nullptr) {
    const NcclComm& c = **only;
    KILN_CHECK(c.devices_[0] == device && c.first_rank_ == rank && c.nranks_ == nranks, ValueError,
               "NCCL: this process already has a communicator ({}); asked for rank {} of {} on {}", c.describe(), rank,
               nranks, Device::cuda(device));
    return *only;
  }
  std::shared_ptr<NcclComm> c(new NcclComm({device}, rank, nranks));
  c->impl_->nonblocking = true;
  c->impl_->timeout_s = timeout_s;
  c->impl_->comms.resize(1);
  DeviceGuard guard;
  bind_device(device);
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof(uid));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing rank times out instead of hanging here
  ncclResult_t r = a.init_rank_config(&c->impl_->comms[0], nranks, uid, rank, &config);
  bool timed_out = false;
  if (r == ncclSuccess || r == ncclInProgress) r = wait_ready(a, c->impl_->comms[0], timeout_s, &timed_out);
  if (timed_out) {
    (void)a.abort(c->impl_->comms[0]);
    throw Error(
        fmt::format("NCCL ({}): ncclCommInitRankConfig did not complete within {:.0f} s: not every process joined "
                    "(KILN_DIST_TIMEOUT_S sets the limit)",
                    c->describe(), timeout_s));
  }
  if (r != ncclSuccess) {
    throw Error(
        fmt::format("NCCL ({}): {}", c->describe(), nccl_error(a, r, "ncclCommInitRankConfig", c->impl_->comms[0])));
  }
  make_streams(*c->impl_, c->devices_);
  if (timeout_s > 0) NcclWatchdog::get().watch(c.get());
  *only = c;
  return c;
}

void NcclComm::run(const NcclBucket& b) {
  const Api& a = loaded_api();
  Impl& m = *impl_;
  const size_t n_dev = devices_.size(), n_seg = b.bytes.size();
  KILN_ASSERT(b.srcs.size() == n_dev && b.dsts.size() == n_dev);
  for (size_t i = 0; i < n_dev; ++i) KILN_ASSERT(b.srcs[i].size() == n_seg && b.dsts[i].size() == n_seg);
  const ncclDataType_t type = nccl_type(b.dtype);
  const size_t elem = dtype_size(b.dtype);
  auto where = [&] { return fmt::format("NCCL ({}), {}", describe(), b.what); };

  std::lock_guard run_lock(m.run_mu);
  {
    std::lock_guard lock(m.state_mu);
    if (!m.failure.empty()) throw Error(fmt::format("{}: {}", b.what, m.failure));
  }
  DeviceGuard guard;
  size_t total = 0;  // packed bytes
  for (size_t k = 0; k < n_seg; ++k) total += n_seg == 1 ? b.bytes[k] : round_up(b.bytes[k]);
  std::vector<storage::Block> buffers(n_dev);
  // On an error, the buffers go back once the NCCL streams are done with them.
  struct FreeOnError {
    std::vector<storage::Block>& buffers;
    const std::vector<cudaStream_t>& streams;
    ~FreeOnError() {
      for (size_t i = 0; i < buffers.size(); ++i) {
        if (buffers[i].ptr == nullptr) continue;
        (void)cudaStreamSynchronize(streams[i]);
        storage::pool(buffers[i].device).free(buffers[i]);
      }
    }
  } free_on_error{buffers, m.streams};
  std::vector<void*> send(n_dev), recv(n_dev);
  // 1. Each NCCL stream follows its GPU's compute stream; inputs are packed.
  // Buffers are taken from the pool before the event is recorded: kernels
  // still using a block that was freed into the pool were queued before
  // its free, hence before the event.
  for (size_t i = 0; i < n_dev; ++i) {
    const int d = devices_[i];
    const Device dev = Device::cuda(d);
    bind_device(d);
    const bool own_buffer = n_seg > 1 || b.dsts[i][0].empty();
    if (own_buffer) buffers[i] = storage::pool(dev).alloc(total);
    KILN_CUDA_CHECK(cudaEventRecord(m.ready[i], stream(d, StreamKind::kCompute)), dev);
    KILN_CUDA_CHECK(cudaStreamWaitEvent(m.streams[i], m.ready[i], 0), dev);
    if (n_seg == 1) {
      send[i] = const_cast<void*>(b.srcs[i][0]);
      recv[i] = own_buffer ? buffers[i].ptr : b.dsts[i][0][0];
      continue;
    }
    send[i] = recv[i] = buffers[i].ptr;
    size_t at = 0;
    for (size_t k = 0; k < n_seg; ++k) {
      KILN_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(buffers[i].ptr) + at, b.srcs[i][k], b.bytes[k],
                                      cudaMemcpyDeviceToDevice, m.streams[i]),
                      dev);
      at += round_up(b.bytes[k]);
    }
  }
  // 2. One collective per GPU, grouped (one thread drives every local rank).
  const size_t count = total / elem;
  if (count > 0) {
    bool timed_out = false;
    ncclResult_t r = a.group_start();
    const char* call = "ncclGroupStart";
    for (size_t i = 0; i < n_dev && r == ncclSuccess; ++i) {
      bind_device(devices_[i]);
      if (b.op == NcclBucket::Op::kAllReduce) {
        call = "ncclAllReduce";
        r = a.all_reduce(send[i], recv[i], count, type, ncclSum, m.comms[i], m.streams[i]);
      } else {
        call = "ncclBroadcast";
        r = a.broadcast(send[i], recv[i], count, type, 0, m.comms[i], m.streams[i]);
      }
    }
    ncclResult_t end = a.group_end();
    if (r == ncclSuccess) {
      r = end;
      call = "ncclGroupEnd";
    }
    if (m.nonblocking && (r == ncclSuccess || r == ncclInProgress)) {
      for (size_t i = 0; i < n_dev && (r == ncclSuccess || r == ncclInProgress); ++i) {
        r = wait_ready(a, m.comms[i], m.timeout_s, &timed_out);
      }
    }
    if (timed_out) {
      abort_after_timeout(fmt::format("NCCL ({}): {} was not accepted within {:.0f} s; the communicator was aborted",
                                      describe(), b.what, m.timeout_s),
                          true);
      throw Error(failure());
    }
    if (r != ncclSuccess) {
      throw Error(fmt::format("{}: {}", where(), nccl_error(a, r, call, m.comms[0])));
    }
  }
  // 3. Results to their destinations; the compute streams follow.
  std::lock_guard state_lock(m.state_mu);
  for (size_t i = 0; i < n_dev; ++i) {
    const int d = devices_[i];
    const Device dev = Device::cuda(d);
    bind_device(d);
    size_t at = 0;
    for (size_t k = 0; k < n_seg; ++k) {
      const char* from = static_cast<const char*>(recv[i]) + at;
      for (void* dst : b.dsts[i][k]) {
        if (dst == from) continue;
        KILN_CUDA_CHECK(cudaMemcpyAsync(dst, from, b.bytes[k], cudaMemcpyDeviceToDevice, m.streams[i]), dev);
      }
      at += n_seg == 1 ? b.bytes[k] : round_up(b.bytes[k]);
    }
    KILN_CUDA_CHECK(cudaEventRecord(m.done[i], m.streams[i]), dev);
    KILN_CUDA_CHECK(cudaStreamWaitEvent(stream(d, StreamKind::kCompute), m.done[i], 0), dev);
    if (lanes_async()) {
      note_queued_work(d);
    } else {
      KILN_CUDA_CHECK(cudaStreamSynchronize(m.streams[i]), dev);
    }
    // Safe now: every later user of the memory follows the compute stream,
    // or (another collective) this NCCL stream.
    if (buffers[i].ptr != nullptr) {
      storage::pool(dev).free(buffers[i]);
      buffers[i] = {};
    }
  }
  if (!m.pending) {
    m.pending = true;
    m.pending_since = std::chrono::steady_clock::now();
    m.pending_what = b.what;
  }
  for (size_t i = 0; i < n_dev; ++i) {
    ncclResult_t state = ncclSuccess;
    if (a.async_error(m.comms[i], &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress) {
      throw Error(fmt::format("{}: {}", where(), nccl_error(a, state, "ncclCommGetAsyncError", m.comms[i])));
    }
  }
}

#endif  // KILN_HAVE_NCCL

}  // namespace kiln::cuda
