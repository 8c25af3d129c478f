#!/usr/bin/env bash
# Kiln against ONNX Runtime (CPU execution provider) on one ONNX file, same
# batch, same threads, in one run: the d2l ResNet-18 (models::resnet18(10),
# input [B,1,28,28] float32, predict mode) written by Kiln's own exporter,
# timed by `kiln run --benchmark` and by bench/ort_compare.js.
#
#   bash scripts/bench-onnx-vs-ort.sh [KILN_BINARY]        # build/kiln by default
#
# Prints each side's `name value unit` lines, then
# `onnx_resnet18_kiln_over_ort R x` (Kiln's throughput over ORT's). Rounds
# alternate Kiln and ORT (KILN_BENCH_ROUNDS, default 2); each side's figures
# are those of its best round by throughput. KILN_BENCH_CALLS (20 timed calls
# after a warm-up call), KILN_BENCH_BATCH (256), KILN_BENCH_THREADS (2: Kiln's
# KILN_CPU_THREADS and OMP_NUM_THREADS, ORT's intraOpNumThreads; ORT's
# interOpNumThreads is 1).
#
# The model is made once and kept in build/bench-onnx/ (delete it to remake):
# one hybridized training epoch on the first 256 Fashion-MNIST images
# (`kiln train --export`; the weights' values do not change the speed), then
# `kiln export` at the batch size, ONNX opset 17. Needs the Release build,
# the Fashion-MNIST files (scripts/install-deps.sh) and ONNX Runtime
# (scripts/install-ort.sh). Measure on a quiet machine (`uptime` below 0.5).
set -euo pipefail
cd "$(dirname "$0")/.."

kiln=${1:-build/kiln}
rounds=${KILN_BENCH_ROUNDS:-2}
calls=${KILN_BENCH_CALLS:-20}
batch=${KILN_BENCH_BATCH:-256}
threads=${KILN_BENCH_THREADS:-2}
[[ -x $kiln ]] || { echo "bench-onnx-vs-ort: $kiln is not built (bash scripts/build.sh kiln_cli)" >&2; exit 2; }
[[ -d bench/node_modules/onnxruntime-node ]] || { echo "bench-onnx-vs-ort: run bash scripts/install-ort.sh first" >&2; exit 2; }

work=build/bench-onnx
model=$work/resnet18_b$batch.onnx
input=$work/x_b$batch.npy
mkdir -p "$work"
if [[ ! -f $model ]]; then
  echo "== making $model"
  "$kiln" train --model resnet18 --epochs 1 --batch-size 256 --train-limit 256 --test-limit 256 \
    --hybridize --export "$work/resnet18" >/dev/null
  "$kiln" export "$work/resnet18-symbol.json" "$work/resnet18-0000.params" --shape "data=$batch,1,28,28" \
    --output "$model"
fi
if [[ ! -f $input ]]; then
  # Uniform values in [-1, 1), fixed seed, as NumPy's .npy version 1.0.
  python3 - "$input" "$batch" <<'EOF'
import array, random, sys
path, batch = sys.argv[1], int(sys.argv[2])
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 1, 28, 28), }" % batch
header += " " * (63 - (10 + len(header)) % 64) + "\n"
rng = random.Random(42)
values = array.array("f", (rng.uniform(-1, 1) for _ in range(batch * 28 * 28)))
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + values.tobytes())
EOF
fi

echo "== ResNet-18 (d2l, 10 classes), batch $batch, $threads threads, $calls calls, $rounds rounds; load: $(cut -d' ' -f1-3 /proc/loadavg)"
best_kiln="" best_ort="" best_bf16="" kiln_ips=0 ort_ips=0 bf16_ips=0
for ((r = 1; r <= rounds; ++r)); do
  out=$(KILN_CPU_THREADS=$threads OMP_NUM_THREADS=$threads "$kiln" run "$model" --input "data=$input" \
          --benchmark "$calls" | grep -E '^(latency|throughput)_')
  ips=$(awk '$1 == "throughput_items_per_s" { print $2 }' <<<"$out")
  if awk -v a="$ips" -v b="$kiln_ips" 'BEGIN { exit !(a > b) }'; then kiln_ips=$ips best_kiln=$out; fi
  # The same file in mixed precision (bfloat16 compute, float32 parameters).
  out=$(KILN_CPU_THREADS=$threads OMP_NUM_THREADS=$threads "$kiln" run "$model" --input "data=$input" \
          --dtype bf16 --benchmark "$calls" | grep -E '^(latency|throughput)_')
  ips=$(awk '$1 == "throughput_items_per_s" { print $2 }' <<<"$out")
  if awk -v a="$ips" -v b="$bf16_ips" 'BEGIN { exit !(a > b) }'; then bf16_ips=$ips best_bf16=$out; fi
  out=$(node bench/ort_compare.js "$model" --shape "data=$batch,1,28,28" --calls "$calls" --threads "$threads")
  ips=$(awk '$1 == "ort_throughput_items_per_s" { print $2 }' <<<"$out")
  if awk -v a="$ips" -v b="$ort_ips" 'BEGIN { exit !(a > b) }'; then ort_ips=$ips best_ort=$out; fi
done
sed 's/^/kiln_/' <<<"$best_kiln"
sed 's/^/kiln_bf16_/' <<<"$best_bf16"
echo "$best_ort"
awk -v k="$kiln_ips" -v o="$ort_ips" 'BEGIN { printf "onnx_resnet18_kiln_over_ort %.3f x\n", k / o }'
awk -v k="$bf16_ips" -v o="$ort_ips" 'BEGIN { printf "onnx_resnet18_kiln_bf16_over_ort %.3f x\n", k / o }'
