#include "backends/cuda/lt_dense.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

#include "backends/cuda/device_runtime.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/testing.h"

namespace kiln::cuda {
namespace {

constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

void check_lt(cublasStatus_t st, const char* call, Device device) {
  if (st != CUBLAS_STATUS_SUCCESS) throw_library_error("cuBLASLt", st, cublasGetStatusString(st), call, device);
}

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("KILN_CUDA_LT");
    return env == nullptr || std::string(env) != "0";
  }()};
  return on;
}

struct LtThreadState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

LtThreadState& thread_state(int device) {
  thread_local std::array<LtThreadState, kMaxDevicesPerKind> states{};
  LtThreadState& s = states[static_cast<size_t>(device)];
  if (s.handle == nullptr) {
    const Device dev = Device::cuda(device);
    check_lt(cublasLtCreate(&s.handle), "cublasLtCreate", dev);
    KILN_CUDA_CHECK(cudaMalloc(&s.workspace, kLtWorkspaceBytes), dev);
  }
  return s;
}

// The descriptors and algorithm of one problem; the bias pointer is set per call.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_bias = false;
};

cudaDataType_t lt_type(DType t) {
  return t == DType::kFloat16 ? CUDA_R_16F : t == DType::kBfloat16 ? CUDA_R_16BF : CUDA_R_32F;
}

LtPlan make_plan(const FullyConnectedDims& fc, DType t, bool has_bias, bool relu, LtThreadState& state,
                 Device dev) {
  LtPlan p;
  p.has_bias = has_bias;
  const cublasComputeType_t compute =
      t == DType::kFloat32 && tf32_allowed() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check_lt(cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate", dev);
  // Column-major D [n, m] = W^T-as-stored [n, k] . X^T [k, m]: row-major out [m, n] = x . w^T.
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa),
           "cublasLtMatmulDescSetAttribute(TRANSA)", dev);
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb),
           "cublasLtMatmulDescSetAttribute(TRANSB)", dev);
  const cublasLtEpilogue_t epilogue = has_bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                               : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
           "cublasLtMatmulDescSetAttribute(EPILOGUE)", dev);
  const cudaDataType_t dt = lt_type(t);
  const auto m = static_cast<uint64_t>(fc.m), n = static_cast<uint64_t>(fc.n), k = static_cast<uint64_t>(fc.k);
  check_lt(cublasLtMatrixLayoutCreate(&p.a, dt, k, n, static_cast<int64_t>(k)), "cublasLtMatrixLayoutCreate(A)", dev);
  check_lt(cublasLtMatrixLayoutCreate(&p.b, dt, k, m, static_cast<int64_t>(k)), "cublasLtMatrixLayoutCreate(B)", dev);
  check_lt(cublasLtMatrixLayoutCreate(&p.d, dt, n, m, static_cast<int64_t>(n)), "cublasLtMatrixLayoutCreate(D)", dev);
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", dev);
  const size_t ws = kLtWorkspaceBytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
           "cublasLtMatmulPreferenceSetAttribute", dev);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(state.handle, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
    p.desc = nullptr;  // no algorithm: the caller takes the unfused path
    return p;
  }
  p.algo = result.algo;
  return p;
}

}  // namespace

bool lt_enabled() { return enabled_flag().load(std::memory_order_relaxed); }
void set_lt_enabled(bool on) { enabled_flag().store(on, std::memory_order_relaxed); }

bool testing::set_lt_enabled(bool on) { return enabled_flag().exchange(on); }

bool testing::set_tf32_allowed(bool allowed) {
  const bool before = tf32_allowed();
  cuda::set_tf32_allowed(allowed);
  return before;
}

bool lt_dense(const KernelContext& ctx, const FullyConnectedDims& fc, const TensorView& x, const TensorView& w,
              const TensorView* bias, std::optional<ActType> act, const TensorView& out) {
  if (!lt_enabled()) return false;
  if (act && *act != ActType::kRelu) return false;
  const DType t = out.dtype;
  if (x.dtype != t || w.dtype != t || (bias != nullptr && bias->dtype != t)) return false;
  if (t != DType::kFloat32 && t != DType::kFloat16 && t != DType::kBfloat16) return false;
  if (fc.m == 0 || fc.n == 0 || fc.k == 0) return false;
  if (t != DType::kFloat32 && (fc.m % 8 != 0 || fc.n % 8 != 0 || fc.k % 8 != 0)) return false;
  if (fc.m >= (int64_t{1} << 31) || fc.n >= (int64_t{1} << 31) || fc.k >= (int64_t{1} << 31)) return false;
  const Device dev = ctx.run.device;
  LtThreadState& state = thread_state(dev.id);
  thread_local std::unordered_map<std::string, LtPlan> plans;
  const bool relu = act.has_value();
  const std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", dev.id, static_cast<int>(t), fc.m, fc.n, fc.k,
                                      bias != nullptr, relu, t == DType::kFloat32 && tf32_allowed());
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(fc, t, bias != nullptr, relu, state, dev)).first;
  LtPlan& p = it->second;
  if (p.desc == nullptr) return false;
  if (bias != nullptr) {
    const void* bp = bias->data;
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp),
             "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", dev);
  }
  const float one = 1.0f, zero = 0.0f;
  check_lt(cublasLtMatmul(state.handle, p.desc, &one, w.data, p.a, x.data, p.b, &zero, out.data, p.d, out.data, p.d,
                          &p.algo, state.workspace, kLtWorkspaceBytes, stream_of(ctx)),
           "cublasLtMatmul", dev);
  return true;
}

}  // namespace kiln::cuda
