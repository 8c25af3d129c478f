#!/usr/bin/env bash
# Every GPU check of the CUDA backend, in one place (backends/cuda/README.md).
#
#   bash scripts/gpu-check.sh bundle   # HERE (the CPU machine): build a CUDA-on Release into build-gpu/
#                                      # and pack what a GPU machine needs into .gpu-bundle/ (gitignored)
#   bash scripts/gpu-check.sh          # ON THE GPU MACHINE: unpack .gpu-bundle/ (or, when absent, build
#                                      # from source), then run every GPU test and GPU benchmark
#
# With the device tool: run(command="bash scripts/gpu-check.sh", carry=[".gpu-bundle"]). The GPU
# machine's image is not Debian 12 and cannot fetch packages (no oneDNN, fmt or GTest there), so the
# bundle carries Kiln's binaries and the shared libraries they need except the C/C++ runtime and
# CUDA's own (cudart, cuBLAS, cuDNN are found on the GPU machine: /usr/local/cuda, or the NVIDIA
# wheels beside PyTorch). Fashion-MNIST is carried too when it is here, for the training runs.
#
# Two optional extras for a bundle that carries untested GPU code (both outside git):
# KILN_GPU_BUNDLE_FALLBACK_LIB=FILE packs a libkiln.so.0 built from an earlier commit; when
# op_parity_test fails with the new library, the later steps run with the fallback (so a broken
# kernel does not cost the training runs). KILN_GPU_BUNDLE_EXTRA=DIR packs the programs in DIR
# (standalone GPU checks, statically linked to cudart), each run with a 60 s timeout after the tests.
#
# Prints every command before running it, and a summary line per step at the end; exits non-zero
# when a step failed. Every step runs under `timeout`, and the whole check keeps to a budget
# (KILN_GPU_CHECK_BUDGET_S, default 480 s): a step that would start past it is skipped, so a hang
# cannot eat the lease. Environment: KILN_GPU_CHECK_QUICK=1 skips the training runs;
# KILN_GPU_CHECK_SYNC_LANES=0 skips the second pass of the tests with synchronous lanes;
# KILN_GPU_CHECK_PEERS="eager compile eager_bf16 compile_bf16" runs those PyTorch twins of the
# ResNet-18 recipe (KILN_GPU_CHECK_PEER_EPOCHS each, default 3) one after the other;
# KILN_GPU_CHECK_PROFILE=1 prints per-op GPU time of ResNet-18 training (float32 and bf16);
# KILN_GPU_CHECK_TESTS="PROGRAM..." (or none) picks the test programs; KILN_GPU_CHECK_BENCH=0 skips
# the GPU benchmarks; KILN_GPU_CHECK_CPU_COMPARE="PREFIX..." runs bench/pytorch_compare.py on the host CPU;
# KILN_GPU_CHECK_GDB="PROGRAM..." runs test programs under cuda-gdb and prints their backtraces;
# KILN_GPU_CHECK_AB=1 trains hybridized ResNet-18 with CUDA graphs and NVRTC fusion each on and off;
# KILN_GPU_CHECK_EPOCHS (default 1) sets LeNet's length, KILN_GPU_CHECK_RESNET_EPOCHS (default 2)
# ResNet-18's; KILN_GPU_CHECK_TORCH_SEEDS (default "0 1 2 3 4 5 6 7", empty to skip) runs the
# PyTorch twin of the ResNet-18 recipe on the GPU in the background, one 2-epoch run per seed, to
# measure the recipe's spread of test accuracy (issue 3). KILN_GPU_CHECK_CHAPTER=N (default 0: off)
# trains ResNet-18 for N epochs (the chapter's 12.6: 10; KILN_GPU_CHECK_CHAPTER_FLAGS adds flags such as
# --hybridize) and then the PyTorch twin for N epochs (unless KILN_GPU_CHECK_CHAPTER_TORCH=0), one after
# the other, for s/epoch and test accuracy side by side. Every step's log is packed
# into $OUT/gpu-check-logs.tgz when OUT is set (the device tool's output folder).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bundle_dir=$root/.gpu-bundle
bundle=$bundle_dir/kiln-gpu.tar.xz
# The programs a GPU run needs: the kiln program and the test programs of tests/cuda.
gpu_tests=(cuda_runtime_test cuda_attention_test op_parity_test fused_nvrtc_test cuda_graph_test cuda_data_parallel_test cuda_nccl_test cuda_fault_test)

step() { echo; echo "== $*"; }
run() { echo "+ $*"; "$@"; }
budget=${KILN_GPU_CHECK_BUDGET_S:-480}
# timed SECONDS CMD...: run CMD under a timeout of at most SECONDS, cut to what is left of the budget.
timed() {
  local limit=$1; shift
  local left=$((budget - SECONDS))
  if (( left < 10 )); then echo "+ SKIPPED (budget of ${budget} s spent): $*"; return 125; fi
  (( limit > left )) && limit=$left
  echo "+ [timeout ${limit}s] $*"
  timeout --kill-after=5 "$limit" "$@"
}

# ---- bundle: on the CPU machine
if [[ "${1:-}" == "bundle" ]]; then
  build=${KILN_BUILD_DIR:-build-gpu}
  step "configure $build (CUDA on; LLVM JIT off: libLLVM is too large to carry)"
  if [[ ! -f $build/CMakeCache.txt ]]; then
    args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DKILN_LLVM=OFF)
    if command -v ccache >/dev/null; then args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache); fi
    run cmake -S . -B "$build" "${args[@]}" || exit 1
  fi
  step "build"
  start=$SECONDS
  run cmake --build "$build" -j"$(nproc)" --target kiln_cli "${gpu_tests[@]}" || exit 1
  echo "build took $((SECONDS - start)) s"
  step "pack $bundle"
  stage=$(mktemp -d)
  mkdir -p "$stage/kiln/bin" "$stage/kiln/lib"
  cp "$build/kiln" "$stage/kiln/bin/"
  for t in "${gpu_tests[@]}"; do cp "$build/tests/$t" "$stage/kiln/bin/"; done
  # Every shared library the programs load, except the C/C++ runtime and CUDA's libraries.
  for f in "$stage"/kiln/bin/*; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    case $(basename "$lib") in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libdl.so*|libpthread.so*|librt.so*) ;;
      libcuda.so*|libcudart.so*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*) ;;
      *) cp -L "$lib" "$stage/kiln/lib/" ;;
    esac
  done
  data=${KILN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
  if [[ -f $data/train-images-idx3-ubyte.gz ]]; then
    mkdir -p "$stage/kiln/fashion-mnist" && cp "$data"/*.gz "$stage/kiln/fashion-mnist/"
  else
    echo "no Fashion-MNIST under $data: the bundle has no training data (the training runs will be skipped)"
  fi
  if [[ -n ${KILN_GPU_BUNDLE_FALLBACK_LIB:-} ]]; then
    mkdir -p "$stage/kiln/lib-fallback" && cp -L "$KILN_GPU_BUNDLE_FALLBACK_LIB" "$stage/kiln/lib-fallback/libkiln.so.0"
  fi
  if [[ -n ${KILN_GPU_BUNDLE_EXTRA:-} ]]; then
    mkdir -p "$stage/kiln/extra" && cp -L "$KILN_GPU_BUNDLE_EXTRA"/* "$stage/kiln/extra/"
  fi
  git rev-parse HEAD >"$stage/kiln/COMMIT"
  mkdir -p "$bundle_dir"
  run tar -C "$stage" -cJf "$bundle" kiln || exit 1
  rm -rf "$stage"
  ls -la "$bundle"
  echo "carry it: run(command=\"bash scripts/gpu-check.sh\", carry=[\".gpu-bundle\"]) (64 MiB at most with the tree)"
  exit 0
fi

# ---- check: on the GPU machine
declare -a summary
failed=0
record() {  # record NAME RC
  if [[ $2 -eq 0 ]]; then summary+=("PASS  $1"); else summary+=("FAIL  $1 (exit $2)"); failed=1; fi
}

step "machine"
run nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi: not available"
command -v nvcc >/dev/null && nvcc --version | tail -2

# CUDA's libraries: the toolkit's, then the NVIDIA wheels beside PyTorch (cuDNN usually lives there).
cuda_libs=""
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $dir ]] && cuda_libs+="$dir:"
done
for name in libcudnn.so.9 libcublas.so.13 libcublasLt.so.13 libcudart.so.13 libnccl.so.2 libnvrtc.so.13 libnvrtc-builtins.so.13.0; do
  hit=$(find /usr /opt -name "$name" 2>/dev/null | head -1)
  [[ -n $hit ]] && cuda_libs+="$(dirname "$hit"):"
done

if [[ -f $bundle ]]; then
  step "unpack $bundle"
  dest=/tmp/kiln-gpu
  rm -rf "$dest" && mkdir -p "$dest" && run tar -C "$dest" -xJf "$bundle" || exit 1
  echo "bundle built from commit $(cat "$dest/kiln/COMMIT"), this tree is at $(git rev-parse HEAD 2>/dev/null || echo '?')"
  bin=$dest/kiln/bin
  export LD_LIBRARY_PATH="$dest/kiln/lib:${cuda_libs}${LD_LIBRARY_PATH:-}"
  [[ -d $dest/kiln/fashion-mnist ]] && export KILN_FASHION_MNIST_DIR=$dest/kiln/fashion-mnist
  fallback_lib=$dest/kiln/lib-fallback
  extra_dir=$dest/kiln/extra
else
  step "no bundle: build from source into build-gpu/ (needs Kiln's dependencies on this machine)"
  start=$SECONDS
  run cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DKILN_LLVM=OFF || exit 1
  run cmake --build build-gpu -j"$(nproc)" --target kiln_cli "${gpu_tests[@]}" || exit 1
  echo "build took $((SECONDS - start)) s"
  mkdir -p build-gpu/bin
  for p in kiln "${gpu_tests[@]/#/tests/}"; do ln -sf "$root/build-gpu/$p" build-gpu/bin/; done
  bin=$root/build-gpu/bin
  export LD_LIBRARY_PATH="${cuda_libs}${LD_LIBRARY_PATH:-}"
fi
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
missing=$(ldd "$bin/kiln" | grep "not found")
[[ -n $missing ]] && echo "MISSING LIBRARIES:" && echo "$missing"

logs=/tmp/kiln-gpu-logs  # packed into $OUT/gpu-check-logs.tgz at the end (the device tool returns 8 files at most)
rm -rf "$logs" && mkdir -p "$logs"
data_dir=${KILN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
have_data=0
[[ -f $data_dir/train-images-idx3-ubyte.gz ]] && have_data=1

# The PyTorch twin of the ResNet-18 recipe, in the background: one process, seeds one after another.
torch_pid=""
torch_seeds=${KILN_GPU_CHECK_TORCH_SEEDS-0 1 2 3 4 5 6 7}
if [[ $have_data == 1 && -n $torch_seeds ]] && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  step "PyTorch ResNet-18 recipe on cuda, seeds $torch_seeds (background, log: $logs/torch_resnet18_seeds.log)"
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 python3 bench/pytorch_resnet18_fashion.py --device cuda --data "$data_dir" --epochs 2 \
    --seeds $torch_seeds >"$logs/torch_resnet18_seeds.log" 2>&1 &
  torch_pid=$!
fi

step "kiln info"
timed 30 "$bin/kiln" info
record "kiln info" $?

# KILN_GPU_CHECK_GDB="PROGRAM...": run those test programs under cuda-gdb first and print the
# backtrace where they stop (a crash, or at exit).
for t in ${KILN_GPU_CHECK_GDB:-}; do
  step "$t under cuda-gdb"
  timed 150 cuda-gdb -q -batch -ex run -ex bt -ex "thread apply all bt 8" --args "$bin/$t" --gtest_color=no 2>&1 \
    | grep -v '^\[       OK \]\|^\[ RUN      \]\|^\[New Thread\|^\[Thread' | tail -120
  record "$t under cuda-gdb" "${PIPESTATUS[0]}"
done

step "GPU tests (cuda_fault_test last: it destroys its process's CUDA context on purpose)"
# KILN_GPU_CHECK_TESTS="PROGRAM...": only those test programs (of the bundle's).
[[ -n ${KILN_GPU_CHECK_TESTS:-} ]] && read -r -a gpu_tests <<<"$KILN_GPU_CHECK_TESTS"
[[ ${KILN_GPU_CHECK_TESTS:-} == none ]] && gpu_tests=()
for t in "${gpu_tests[@]}"; do
  timed 90 "$bin/$t" --gtest_color=no 2>&1 | tee "$logs/$t.log" | grep -v '^\[       OK \]\|^\[ RUN      \]'
  record "$t" "${PIPESTATUS[0]}"
done

if [[ -n ${fallback_lib:-} && -d $fallback_lib ]] && grep -q "FAIL  op_parity_test" <(printf '%s\n' "${summary[@]}"); then
  step "op_parity_test failed: the later steps use the fallback library (an earlier commit's libkiln)"
  export LD_LIBRARY_PATH="$fallback_lib:$LD_LIBRARY_PATH"
  timed 90 "$bin/op_parity_test" --gtest_color=no 2>&1 | tail -5
  record "op_parity_test (fallback library)" "${PIPESTATUS[0]}"
fi

if [[ -n ${extra_dir:-} && -d $extra_dir ]]; then
  step "extra standalone GPU checks from the bundle"
  for p in "$extra_dir"/*; do
    timed 60 "$p" 2>&1 | tee "$logs/$(basename "$p").log" | tail -40
    record "extra: $(basename "$p")" "${PIPESTATUS[0]}"
  done
fi

# The same programs with synchronous lanes (KILN_CUDA_LANES=sync, the debugging mode: every GPU op
# finishes before the next; cuda_fault_test always runs so). KILN_GPU_CHECK_SYNC_LANES=0 skips them.
[[ ${KILN_GPU_CHECK_SYNC_LANES:-1} == 1 ]] && step "GPU tests with KILN_CUDA_LANES=sync"
for t in "${gpu_tests[@]}"; do
  [[ ${KILN_GPU_CHECK_SYNC_LANES:-1} == 1 ]] || break
  [[ $t == cuda_fault_test ]] && continue
  KILN_CUDA_LANES=sync timed 90 "$bin/$t" --gtest_color=no 2>&1 | tee "$logs/$t.sync.log" \
    | grep -v '^\[       OK \]\|^\[ RUN      \]'
  record "$t (sync lanes)" "${PIPESTATUS[0]}"
done

# KILN_GPU_CHECK_CPU_COMPARE="PREFIX...": Kiln's CPU benchmarks against PyTorch's on this machine's
# host CPU (2 threads each: the GPU machines' hosts have AMX, which the CPU issues' targets name).
if [[ -n ${KILN_GPU_CHECK_CPU_COMPARE:-} ]]; then
  step "CPU benchmarks against PyTorch on the host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  grep -o 'amx_bf16\|amx_tile\|avx512_bf16\|avx512_fp16' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  # shellcheck disable=SC2086
  KILN_CPU_THREADS=2 PYTHONUNBUFFERED=1 timed 240 python3 bench/pytorch_compare.py --kiln "$bin/kiln" --threads 2 \
    --only $KILN_GPU_CHECK_CPU_COMPARE --out "$logs/cpu_compare.md" 2>&1 | tee "$logs/cpu_compare.log"
  record "CPU benchmarks against PyTorch" "${PIPESTATUS[0]}"
fi

if [[ ${KILN_GPU_CHECK_BENCH:-1} == 1 ]]; then
step "GPU benchmarks"
timed 60 "$bin/kiln" bench cuda_
record "kiln bench cuda_" $?
KILN_CUDA_LANES=sync timed 60 "$bin/kiln" bench cuda_op_latency
record "kiln bench cuda_op_latency (sync lanes)" $?
fi

if [[ "${KILN_GPU_CHECK_QUICK:-0}" != 1 ]]; then
  epochs=${KILN_GPU_CHECK_EPOCHS:-1}
  resnet_epochs=${KILN_GPU_CHECK_RESNET_EPOCHS:-2}
  if [[ $have_data == 1 ]]; then
    step "training on cuda:0 (Fashion-MNIST)"
    timed 60 "$bin/kiln" train --data "$data_dir" --model lenet --epochs "$epochs" --batch-size 256 --lr 0.2 --devices cuda:0
    record "kiln train lenet cuda:0" $?
    timed 60 "$bin/kiln" train --data "$data_dir" --model lenet --epochs "$epochs" --batch-size 256 --lr 0.2 --devices cuda:0 --hybridize
    record "kiln train lenet cuda:0 --hybridize" $?
    timed 240 "$bin/kiln" train --data "$data_dir" --model resnet18 --epochs "$resnet_epochs" --batch-size 256 --lr 0.1 \
      --devices cuda:0 --log "$logs/kiln_resnet18.jsonl"
    record "kiln train resnet18 cuda:0" $?
    step "ResNet-18 with synchronous lanes, imperative ($resnet_epochs epoch(s)): the cost of a round trip per op"
    KILN_CUDA_LANES=sync timed 240 "$bin/kiln" train --data "$data_dir" --model resnet18 --epochs "$resnet_epochs" \
      --batch-size 256 --lr 0.1 --devices cuda:0
    record "kiln train resnet18 cuda:0 (sync lanes)" $?
    timed 240 "$bin/kiln" train --data "$data_dir" --model resnet18 --epochs "$resnet_epochs" \
      --batch-size 256 --lr 0.1 --devices cuda:0 --hybridize
    record "kiln train resnet18 cuda:0 --hybridize" $?
    step "mixed precision on cuda:0 (--amp: bf16/fp16 compute, float32 parameters)"
    for amp in bf16 fp16; do
      timed 60 "$bin/kiln" train --data "$data_dir" --model lenet --epochs "$epochs" --batch-size 256 --lr 0.2 \
        --devices cuda:0 --amp "$amp"
      record "kiln train lenet cuda:0 --amp $amp" $?
    done
    timed 60 "$bin/kiln" train --data "$data_dir" --model lenet --epochs "$epochs" --batch-size 256 --lr 0.2 \
      --devices cuda:0 --amp bf16 --hybridize
    record "kiln train lenet cuda:0 --amp bf16 --hybridize" $?
    timed 240 "$bin/kiln" train --data "$data_dir" --model resnet18 --epochs 1 --batch-size 256 --lr 0.1 \
      --devices cuda:0 --amp bf16 --hybridize
    record "kiln train resnet18 cuda:0 --amp bf16 --hybridize" $?
    step "data parallelism over cuda:0 and cpu:0 (the chapter's experiments, LeNet through the Trainer)"
    timed 90 "$bin/kiln" example --quick --devices cuda:0,cpu:0
    record "kiln example --devices cuda:0,cpu:0" $?
    timed 60 "$bin/kiln" train --data "$data_dir" --model lenet --epochs 1 --batch-size 256 --lr 0.2 \
      --devices cuda:0,cpu:0 --train-limit 8192
    record "kiln train lenet cuda:0,cpu:0" $?
  else
    summary+=("SKIP  training: no Fashion-MNIST (carry it in the bundle or set KILN_FASHION_MNIST_DIR)")
  fi
fi

chapter_epochs=${KILN_GPU_CHECK_CHAPTER:-0}
if [[ $chapter_epochs -gt 0 && $have_data == 1 ]]; then
  # KILN_GPU_CHECK_CHAPTER_FLAGS: Kiln's extra flags, one run per ';'-separated set (e.g.
  # "--hybridize;--hybridize --amp bf16");
  # KILN_GPU_CHECK_CHAPTER_TORCH=0 skips the PyTorch twin.
  IFS=';' read -r -a chapter_runs <<<"${KILN_GPU_CHECK_CHAPTER_FLAGS:-}"
  [[ ${#chapter_runs[@]} -eq 0 ]] && chapter_runs=("")
  for chapter_flags in "${chapter_runs[@]}"; do
    step "the chapter's ResNet-18 run: $chapter_epochs epochs ${chapter_flags}"
    # shellcheck disable=SC2086
    timed 300 "$bin/kiln" train --data "$data_dir" --model resnet18 --epochs "$chapter_epochs" \
      --batch-size 256 --lr 0.1 --devices cuda:0 $chapter_flags
    record "kiln train resnet18 cuda:0, $chapter_epochs epochs $chapter_flags" $?
  done
  if [[ ${KILN_GPU_CHECK_CHAPTER_TORCH:-1} == 1 ]]; then
    PYTHONUNBUFFERED=1 timed 200 python3 bench/pytorch_resnet18_fashion.py --device cuda --data "$data_dir" \
      --epochs "$chapter_epochs" --seeds 0
    record "PyTorch resnet18 cuda, $chapter_epochs epochs" $?
  fi
fi

# PyTorch peers of the ResNet-18 recipe, one after the other on the idle GPU (KILN_GPU_CHECK_PEERS:
# any of eager, compile, eager_bf16, compile_bf16; KILN_GPU_CHECK_PEER_EPOCHS epochs each, default 3).
peers=${KILN_GPU_CHECK_PEERS:-}
if [[ -n $peers && $have_data == 1 ]]; then
  step "PyTorch peers of the ResNet-18 recipe: $peers"
  for mode in $peers; do
    flags=()
    [[ $mode == compile* ]] && flags+=(--compile)
    [[ $mode == *_bf16 ]] && flags+=(--amp bf16)
    PYTHONUNBUFFERED=1 timed 240 python3 bench/pytorch_resnet18_fashion.py --device cuda --data "$data_dir" \
      --epochs "${KILN_GPU_CHECK_PEER_EPOCHS:-3}" --seeds 0 "${flags[@]}" 2>&1 | tee "$logs/torch_peer_$mode.log" \
      | grep -v Warning
    record "PyTorch resnet18 peer $mode" "${PIPESTATUS[0]}"
  done
fi

# What CUDA graphs and NVRTC fusion each bring to hybridized ResNet-18 training (KILN_GPU_CHECK_AB=1):
# 2 epochs per configuration on the first 25,600 images (float32: neither, graphs only, both; bf16:
# neither, both); the second epoch is the figure.
if [[ ${KILN_GPU_CHECK_AB:-0} == 1 && $have_data == 1 ]]; then
  ab_runs=(":KILN_CUDA_GRAPHS=0 KILN_CUDA_FUSED=interpret" ":KILN_CUDA_FUSED=interpret" ":"
           "bf16:KILN_CUDA_GRAPHS=0 KILN_CUDA_FUSED=interpret" "bf16:")
  # KILN_GPU_CHECK_AB_RUNS: ';'-separated AMP:ENV runs instead (e.g. ":;bf16:").
  [[ -n ${KILN_GPU_CHECK_AB_RUNS:-} ]] && IFS=';' read -r -a ab_runs <<<"$KILN_GPU_CHECK_AB_RUNS"
  for run in "${ab_runs[@]}"; do
    amp=${run%%:*} cfg=${run#*:}
    {
      step "A/B: ResNet-18 hybridized ${amp:+--amp $amp }with ${cfg:-graphs and NVRTC fusion on}"
      # shellcheck disable=SC2086
      (if [[ -n $cfg ]]; then export $cfg; fi
       timed 120 "$bin/kiln" train --data "$data_dir" --model resnet18 --epochs 2 --batch-size 256 \
         --lr 0.1 --devices cuda:0 --hybridize --train-limit 25600 --test-limit 1024 ${amp:+--amp $amp})
      record "A/B resnet18 ${amp:-f32} ${cfg:-graphs+nvrtc}" $?
    }
  done
fi

# Where a ResNet-18 training step's GPU time goes, per op: synchronous lanes (each op's time is its
# kernels' plus one round trip), 50 batches, hybridized, float32 and bf16 (KILN_GPU_CHECK_PROFILE=1).
if [[ ${KILN_GPU_CHECK_PROFILE:-0} == 1 && $have_data == 1 ]]; then
  for amp in "" bf16; do
    step "per-op profile of ResNet-18 training on cuda:0 ${amp:+(--amp $amp)}"
    KILN_CUDA_LANES=sync timed 90 "$bin/kiln" profile --trace "$logs/profile_resnet18${amp:+_$amp}.json" --top 18 -- \
      train --data "$data_dir" --model resnet18 --epochs 1 --batch-size 256 --lr 0.1 --devices cuda:0 --hybridize \
      --train-limit 12800 --test-limit 256 ${amp:+--amp $amp}
    record "kiln profile resnet18 ${amp:-f32}" $?
  done
fi


if [[ -n $torch_pid ]]; then
  step "PyTorch recipe seeds (waiting at most for what is left of the budget)"
  while kill -0 "$torch_pid" 2>/dev/null && (( SECONDS < budget )); do sleep 2; done
  kill "$torch_pid" 2>/dev/null && echo "stopped at the budget: seeds not finished are missing"
  wait "$torch_pid" 2>/dev/null
  grep test_acc "$logs/torch_resnet18_seeds.log"
  tail -3 "$logs/torch_resnet18_seeds.log" | grep -iv test_acc
fi

[[ -n ${OUT:-} ]] && tar -C "$logs" -czf "$OUT/gpu-check-logs.tgz" .

step "summary"
printf '%s\n' "${summary[@]}"
exit $failed
