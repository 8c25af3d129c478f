// How an engine op runs on a GPU's lane (the CUDA backend's
// DeviceBackend::run and drain, backend.cc; run_op calls it for every op whose
// device is cuda(i)).
//
// Completion, synchronous mode (KILN_CUDA_LANES=sync): the op's function launches its
// work on ctx.stream (compute lane: the GPU's compute stream; copy lane: the
// D2D stream, and copies pick the H2D/D2H/D2D stream by direction and
// synchronize it themselves, copy.cc); the hook then waits for the stream.
// So an op completes when its GPU work has finished, which keeps the engine's
// dependency tracking exact (no cross-stream events needed), lets device
// memory be reused as soon as it is freed, and attributes an asynchronous
// kernel error (illegal address, failed launch) to the op that caused it.
// The cost is a host/GPU round trip per op.
//
// Asynchronous mode (the default, device_runtime.h): a compute-lane op
// completes once launched; the stream orders it before later compute ops,
// copies order themselves after the compute stream, and waits drain it
// (drain_lanes). Launch errors still name the op.
#include "backends/cuda/deferred_check.h"
#include "backends/cuda/device_runtime.h"

namespace kiln::cuda {

namespace {

// Clears the in-lane flag and frees deferred blocks however the op ends.
struct LaneOpScope {
  LaneOpScope() { set_in_cuda_lane_op(true); }
  ~LaneOpScope() {
    set_in_cuda_lane_op(false);
    flush_deferred_frees();
  }
};

}  // namespace

void run_on_lane(engine::Fn& fn, engine::RunContext ctx) {
  const int id = ctx.device.id;
  bind_device(id);
  cudaStream_t s = stream(id, ctx.lane == engine::Lane::kCompute ? StreamKind::kCompute : StreamKind::kD2D);
  ctx.stream = s;
  LaneOpScope scope;
  try {
    fn(ctx);
  } catch (...) {
    // Work the op launched before it threw may still use its buffers.
    (void)cudaStreamSynchronize(s);
    (void)cudaGetLastError();
    throw;
  }
  // A launch error (bad configuration, no kernel image for this GPU) is
  // reported by cudaGetLastError; an execution error by the synchronize.
  KILN_CUDA_CHECK(cudaGetLastError(), ctx.device);
  if (ctx.lane == engine::Lane::kCompute && lanes_async()) {
    note_queued_work(id);
    return;
  }
  KILN_CUDA_CHECK(cudaStreamSynchronize(s), ctx.device);
  // The label checks of kernels replayed from CUDA graphs (deferred_check.h).
  if (ctx.lane == engine::Lane::kCompute) deferred_check_drain(id);
}

void drain_lanes() {
  if (lanes_async()) drain_queued_work();
}

}  // namespace kiln::cuda
