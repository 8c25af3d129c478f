#!/usr/bin/env bash
# Installs the Debian 12 packages Kiln needs to build and test.
#
#   bash scripts/install-deps.sh           # build + test dependencies
#   bash scripts/install-deps.sh --bench   # also PyTorch, NumPy, ONNX, torchvision (bench/, scripts/make_onnx_fixtures.py)
#
# Idempotent: asks dpkg what is missing and runs apt-get (and `apt-get update`)
# only when something is. Must run as root; otherwise prints the command to run
# with sudo and fails if anything is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build git pkg-config
  libfmt-dev nlohmann-json3-dev libdnnl-dev libgtest-dev libcli11-dev zlib1g-dev
  libopenblas-openmp-dev  # float32 products oneDNN's AVX2 gemm runs slowly (backends/cpu/openblas_gemm.h)
  libopenmpi-dev openmpi-bin llvm-14-dev
  clang-14 libclang-rt-14-dev libomp-14-dev  # the sanitizer build and its fuzz targets (build-asan/)
  ocl-icd-opencl-dev  # libdnnl-dev's CMake config looks for OpenCL (a Recommends, skipped by --no-install-recommends)
  dataset-fashion-mnist
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata  # ONNX import/export and ONNX's node tests
  graphviz libgraphviz-dev librsvg2-bin libxml2-dev  # kiln inspect --svg runs `dot`; the SVG tests parse with libxml2 and render with rsvg-convert
  fortunes  # the byte-level text dataset of the GPT model
)
for arg in "$@"; do
  case "$arg" in
    --bench) packages+=(python3-torch python3-numpy python3-onnx python3-torchvision) ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown argument '$arg' (expected --bench)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == installed ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: missing: ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: not root; run:" >&2
  echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
