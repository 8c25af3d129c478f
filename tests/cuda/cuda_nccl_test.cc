// NCCL on one GPU: the nccl KVStore over a one-rank communicator on
// [cuda(0)] against the CPU's sums (float32, float16, bfloat16; many keys
// packed into small buckets, a key larger than a bucket), its errors, the
// Trainer with it, and SyncBatchNorm on GPUs (through NCCL on [cuda(0)],
// through host memory on [cuda(0), cpu(0)]) against BatchNorm. One GPU
// cannot hold two NCCL ranks: several GPUs in a process and several
// processes (NcclDist, which needs two GPUs) are not exercised here. Every
// test skips with one line without a GPU (and the NCCL ones without NCCL).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/kvstore.h"
#include "frontend/nd.h"
#include "frontend/nn/nn.h"
#include "frontend/sync_sum.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/data_parallel_util.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using test::error_of;

[[maybe_unused]] const bool kTf32Off = [] { return setenv("KILN_CUDA_TF32", "0", 1) == 0; }();

constexpr Device kGpu = Device::cuda(0);
constexpr Device kCpu = Device::cpu(0);

#define REQUIRE_NCCL()                                                                          \
  do {                                                                                          \
    KILN_REQUIRE_CUDA();                                                                        \
    if (!kv::nccl_unavailable().empty()) GTEST_SKIP() << "no NCCL: " << kv::nccl_unavailable(); \
  } while (0)

// The store with buckets of `mb` MiB (read when the store is made).
std::unique_ptr<kv::KVStore> nccl_store(const char* mb) {
  setenv("KILN_NCCL_BUCKET_MB", mb, 1);
  auto kv = kv::KVStore::create("nccl");
  unsetenv("KILN_NCCL_BUCKET_MB");
  return kv;
}

NDArray values_of(int64_t n, double offset, DType dtype, Device device) {
  return (nd::arange(static_cast<double>(n)) * 0.25 + offset).astype(dtype).copy_to(device);
}

std::vector<float> as_floats(const NDArray& a) { return a.copy_to(kCpu).astype(DType::kFloat32).to_vector<float>(); }

TEST(NcclStore, InfoAndType) {
  REQUIRE_NCCL();
  auto kv = kv::KVStore::create("nccl");
  EXPECT_EQ(kv->type(), "nccl");
  EXPECT_EQ(kv->num_workers(), 1);
  std::cout << "NCCL: " << kv::nccl_description() << "\n";
}

// float32 keys of many sizes through 1 KiB buckets: two values on cuda(0)
// each (summed there first), then the one-rank allreduce of packed buckets.
TEST(NcclStore, ManyKeysAcrossBucketsEqualTheCpuSum) {
  REQUIRE_NCCL();
  auto kv = nccl_store("0.0009765625");  // 1 KiB
  std::vector<kv::KVStore::PushItem> items;
  std::vector<std::vector<float>> want;
  for (int k = 0; k < 40; ++k) {
    int64_t n = 1 + (k * 37) % 300;  // 4 B .. 1.2 KiB: several keys per bucket, some alone
    NDArray a = values_of(n, k, DType::kFloat32, kGpu), b = values_of(n, 100 - k, DType::kFloat32, kGpu);
    std::string key = fmt::format("k{}", k);
    kv->init(key, a);
    items.push_back({key, {a, b}, k});
    want.push_back((a.copy_to(kCpu) + b.copy_to(kCpu)).to_vector<float>());
  }
  kv->push_batch(items);
  for (int k = 0; k < 40; ++k) {
    NDArray out = nd::zeros(items[static_cast<size_t>(k)].values[0].shape(), {.device = kGpu});
    kv->pull(items[static_cast<size_t>(k)].key, {out});
    EXPECT_EQ(out.to_vector<float>(), want[static_cast<size_t>(k)]) << "key " << k;
    EXPECT_EQ(kv->home(items[static_cast<size_t>(k)].key), kGpu);
  }
}

// One value per key: the one-rank sum is the value itself, so this checks
// packing and unpacking of 16-bit types, in buckets and alone.
TEST(NcclStore, HalfAndBfloat16KeysRoundTripThroughBuckets) {
  REQUIRE_NCCL();
  auto kv = nccl_store("0.0009765625");
  for (DType t : {DType::kFloat16, DType::kBfloat16}) {
    std::vector<kv::KVStore::PushItem> items;
    for (int k = 0; k < 12; ++k) {
      int64_t n = 3 + k * 61;  // up to 1.4 KiB: one key alone
      std::string key = fmt::format("{}_{}", dtype_name(t), k);
      NDArray a = values_of(n, k, t, kGpu);
      kv->init(key, a);
      items.push_back({key, {a}, 0});
    }
    kv->push_batch(items);
    for (const auto& item : items) {
      NDArray out = nd::zeros(item.values[0].shape(), {.dtype = t, .device = kGpu});
      kv->pull(item.key, {out});
      EXPECT_EQ(as_floats(out), as_floats(item.values[0])) << item.key;
    }
  }
}

TEST(NcclStore, KeyLargerThanABucketPushPullInPlaceAndBroadcast) {
  REQUIRE_NCCL();
  auto kv = nccl_store("0.0009765625");
  NDArray a = values_of(100000, 1, DType::kFloat32, kGpu), b = values_of(100000, 2, DType::kFloat32, kGpu);
  std::vector<float> want = (a.copy_to(kCpu) + b.copy_to(kCpu)).to_vector<float>();
  kv->init("big", a);
  kv->pushpull("big", {a, b}, {a, b});  // in place
  EXPECT_EQ(a.to_vector<float>(), want);
  EXPECT_EQ(b.to_vector<float>(), want);
  NDArray w = values_of(10, 5, DType::kFloat32, kGpu), w_out = nd::zeros({10}, {.device = kGpu});
  kv->broadcast("w", w, {w_out});
  EXPECT_EQ(w_out.to_vector<float>(), w.to_vector<float>());
}

TEST(NcclStore, ErrorsNameTheKeyTheStoreAndTheDevice) {
  REQUIRE_NCCL();
  auto kv = kv::KVStore::create("nccl");
  std::string msg = error_of<DeviceError>([&] { kv->init("cpu_key", nd::ones({4})); });
  EXPECT_CONTAINS(msg, "KVStore(nccl)");
  EXPECT_CONTAINS(msg, "'cpu_key'");
  EXPECT_CONTAINS(msg, "cpu(0)");
  msg = error_of<ValueError>([&] { kv->push("nowhere", {nd::ones({4}, {.device = kGpu})}); });
  EXPECT_CONTAINS(msg, "KVStore(nccl)");
  EXPECT_CONTAINS(msg, "'nowhere'");
  kv->init("g", nd::ones({4}, {.device = kGpu}));
  msg = error_of<DeviceError>([&] { kv->push("g", {nd::ones({4}, {.device = kGpu}), nd::ones({4})}); });
  EXPECT_CONTAINS(msg, "'g'");
  EXPECT_CONTAINS(msg, "cpu(0)");
  msg = error_of<DeviceError>([&] { kv->pull("g", {nd::zeros({4})}); });
  EXPECT_CONTAINS(msg, "KVStore(nccl) pull of key 'g'");
  EXPECT_CONTAINS(msg, "cpu(0)");
}

// One GPU: the Trainer has nothing to aggregate, so the store only has to
// be made and left alone; the step must equal the device store's.
TEST(NcclStore, TrainerStepOnOneGpuEqualsTheDeviceStore) {
  REQUIRE_NCCL();
  test::RunResult nccl = test::train_lenet({kGpu}, "nccl", false, 8, 2);
  test::RunResult device = test::train_lenet({kGpu}, "device", false, 8, 2);
  test::expect_same_params(device, nccl, {kGpu}, 1e-5);  // cuDNN may pick other algorithms between runs
}

// ---- SyncSum and SyncBatchNorm on GPUs

TEST(GpuSyncSum, OneGpuGoesThroughNccl) {
  REQUIRE_NCCL();
  SyncSum sum(1, "gpu sum", 20, {kGpu});
  EXPECT_TRUE(sum.uses_nccl());
  auto out = sum(0, {nd::array(std::vector<float>{1, 2, 3}, kGpu), nd::array(std::vector<float>{7}, kGpu)});
  EXPECT_EQ(out[0].device(), kGpu);
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{7}));
  std::string msg = error_of<DeviceError>([&] { sum(0, {nd::ones({2})}); });
  EXPECT_CONTAINS(msg, "expects cuda(0)");
}

TEST(GpuSyncSum, AGpuAndACpuMeetInHostMemory) {
  KILN_REQUIRE_CUDA();
  SyncSum sum(2, "mixed sum", 20);
  EXPECT_FALSE(sum.uses_nccl());
  auto a = sum(0, {nd::array(std::vector<float>{1, 2}, kGpu)});
  auto b = sum(1, {nd::array(std::vector<float>{10, 20}, kCpu)});
  EXPECT_EQ(a[0].device(), kGpu);
  EXPECT_EQ(a[0].to_vector<float>(), (std::vector<float>{11, 22}));
  EXPECT_EQ(b[0].to_vector<float>(), (std::vector<float>{11, 22}));
}

struct BnResult {
  std::vector<float> y, dx, dgamma, dbeta, running_mean, running_var;
};

// Train-mode forward and backward of `bn` (already initialized on the
// shards' devices) over `x` split into `rows` per device, head sum(y * w).
BnResult run_bn(nn::BatchNorm& bn, const NDArray& x, const NDArray& w, const std::vector<Device>& devices,
                const std::vector<int64_t>& rows) {
  std::vector<NDArray> xs, ws, ys, heads;
  int64_t at = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    xs.push_back(nd::slice_axis(x, 0, at, at + rows[i]).copy_to(devices[i]));
    ws.push_back(nd::slice_axis(w, 0, at, at + rows[i]).copy_to(devices[i]));
    xs.back().attach_grad();
    at += rows[i];
  }
  {
    autograd::Record record;
    for (size_t i = 0; i < devices.size(); ++i) {
      ys.push_back(bn(xs[i]));
      heads.push_back(nd::sum(ys[i] * ws[i]));
    }
  }
  autograd::backward(heads);
  BnResult r;
  NDArray dgamma = nd::zeros({3}), dbeta = nd::zeros({3});
  for (size_t i = 0; i < devices.size(); ++i) {
    auto y = ys[i].copy_to(kCpu).to_vector<float>(), dx = xs[i].grad().copy_to(kCpu).to_vector<float>();
    r.y.insert(r.y.end(), y.begin(), y.end());
    r.dx.insert(r.dx.end(), dx.begin(), dx.end());
    dgamma = dgamma + bn.gamma().grad(devices[i]).copy_to(kCpu);
    dbeta = dbeta + bn.beta().grad(devices[i]).copy_to(kCpu);
  }
  r.dgamma = dgamma.to_vector<float>();
  r.dbeta = dbeta.to_vector<float>();
  r.running_mean = bn.running_mean().data(devices.back()).copy_to(kCpu).to_vector<float>();
  r.running_var = bn.running_var().data(devices.back()).copy_to(kCpu).to_vector<float>();
  return r;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_LT(std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i])), tol)
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

void expect_sync_bn_matches(const std::vector<Device>& devices, const std::vector<int64_t>& rows) {
  nd::random::seed(7);
  NDArray x = nd::random::normal({8, 3, 4, 5}, 1.0, 2.0), w = nd::random::normal({8, 3, 4, 5});
  NDArray gamma = nd::array(std::vector<float>{0.5f, 1.5f, -1.0f}),
          beta = nd::array(std::vector<float>{0.1f, -0.2f, 0.3f});
  nn::BatchNorm bn(1, 0.9, 1e-5, true, true, false, 3);
  bn.initialize();
  bn.gamma().set_data(gamma);
  bn.beta().set_data(beta);
  BnResult want = run_bn(bn, x, w, {kCpu}, {8});
  for (int step = 0; step < 2; ++step) {  // step 1 knows the devices from step 0
    nn::SyncBatchNorm sbn(static_cast<int>(devices.size()), 0.9, 1e-5, true, true, false, 3, 20);
    sbn.initialize(init::Zero(), devices);
    sbn.gamma().set_data(gamma);
    sbn.beta().set_data(beta);
    if (step == 1) run_bn(sbn, x, w, devices, rows);
    BnResult got = run_bn(sbn, x, w, devices, rows);
    SCOPED_TRACE(fmt::format("second step: {}", step == 1));
    expect_near(got.y, want.y, 1e-4, "y");
    expect_near(got.dx, want.dx, 1e-4, "dx");
    expect_near(got.dgamma, want.dgamma, 1e-4, "dgamma");
    expect_near(got.dbeta, want.dbeta, 1e-4, "dbeta");
    if (step == 0) {
      expect_near(got.running_mean, want.running_mean, 1e-5, "running_mean");
      expect_near(got.running_var, want.running_var, 1e-5, "running_var");
    }
  }
}

TEST(GpuSyncBatchNorm, OneGpuEqualsBatchNorm) {
  KILN_REQUIRE_CUDA();
  expect_sync_bn_matches({kGpu}, {8});
}

TEST(GpuSyncBatchNorm, GpuAndCpuEqualBatchNormOnTheWholeBatch) {
  KILN_REQUIRE_CUDA();
  expect_sync_bn_matches({kGpu, kCpu}, {5, 3});
}

// ---- two processes, one GPU each (needs two GPUs: NCCL refuses two ranks on one)

void write_params(const test::RunResult& r, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& [key, v] : r.params) {
    std::string name = key.substr(0, key.find('@'));
    out << name << " " << v.size() << "\n";
    out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  }
}

// Run by NcclDist.TwoProcessesMatchOneProcess through mpirun.
TEST(NcclDist, Worker) {
  const char* out = std::getenv("KILN_NCCL_DIST_OUT");
  if (out == nullptr || !kv::launched_under_mpi()) GTEST_SKIP() << "a worker of NcclDist.TwoProcessesMatchOneProcess";
  kv::ProcessGroup g = kv::launched_process_group();
  Device gpu = Device::cuda(g.rank % device_count(DeviceKind::kCUDA));
  write_params(test::train_lenet({gpu}, "auto", false, 8, 3, g.rank, g.size),
               fmt::format("{}/rank{}.bin", out, g.rank));
}

TEST(NcclDist, TwoProcessesMatchOneProcess) {
  REQUIRE_NCCL();
  if (device_count(DeviceKind::kCUDA) < 2) GTEST_SKIP() << "needs two GPUs (NCCL refuses two ranks on one GPU)";
  if (!kv::dist_available() || kv::launched_under_mpi()) GTEST_SKIP() << "needs an MPI build, not under mpirun";
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / fmt::format("kiln_nccl_dist_{}", ::getpid());
  fs::create_directories(dir);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string cmd = fmt::format(
      "KILN_NCCL_DIST_OUT={0} KILN_DIST_TIMEOUT_S=60 timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 "
      "-x KILN_NCCL_DIST_OUT -x KILN_DIST_TIMEOUT_S -x LD_LIBRARY_PATH {1} --gtest_filter=NcclDist.Worker > {0}/log "
      "2>&1",
      dir.string(), exe);
  int rc = std::system(cmd.c_str());
  std::stringstream log;
  log << std::ifstream(dir / "log").rdbuf();
  ASSERT_EQ(rc, 0) << cmd << "\n" << log.str();
  test::RunResult one = test::train_lenet({kGpu}, "auto", false, 8, 3);
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(dir / fmt::format("rank{}.bin", rank), std::ios::binary);
    std::string name;
    size_t n = 0;
    while (in >> name >> n) {
      in.get();
      std::vector<float> got(n);
      in.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(n * sizeof(float)));
      const std::vector<float>& want = one.params.at(name + "@" + kGpu.to_string());
      expect_near(got, want, 1e-4, name.c_str());
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
