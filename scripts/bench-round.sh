#!/usr/bin/env bash
# One measurement round for BENCHMARKS.md (and a dated entry in docs/perf-log.md,
# naming the machine), to run on a quiet machine (nothing else building or
# training: `uptime` below 0.5 first):
#   1. Kiln and PyTorch in the same run (bench/pytorch_compare.py, 2 threads,
#      best of two alternating rounds) for the figures PyTorch has twins of;
#   2. Kiln-only figures: data parallelism (two devices, two processes,
#      aggregation overlap), the hybridized training A/B, the engine's.
# Needs the --bench packages (bash scripts/install-deps.sh --bench) and a
# Release build (bash scripts/build.sh). Prints `name value unit` lines and
# the comparison table; takes about 10 minutes on 2 cores.
#
#   bash scripts/bench-round.sh [KILN_BINARY] [--only-kiln]
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=${1:-build/kiln}
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ "${2:-}" != "--only-kiln" ]]; then
  /usr/bin/python3 bench/pytorch_compare.py --kiln "$kiln" --threads 2 --rounds 2 \
    --only dispatch matmul normal_dot mlp infer_resnet18 train_lenet train_resnet18
fi
"$kiln" bench two_device runahead dp_overlap dp_lenet dp_resnet18 dp_mpi_resnet18 resnet18_hybridized
echo "== done, load: $(cut -d' ' -f1-3 /proc/loadavg)"
