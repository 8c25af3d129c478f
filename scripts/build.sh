#!/usr/bin/env bash
# Configures (the first time) and builds Kiln into build/: Release, Ninja, all cores.
#
#   bash scripts/build.sh              # everything: library, `kiln`, tests
#   bash scripts/build.sh kiln_cli     # only the named targets
#
# Incremental: a second run with nothing changed takes about a second.
# KILN_BUILD_DIR overrides build/; extra CMake options go in KILN_CMAKE_ARGS
# (read the first time only, e.g. KILN_CMAKE_ARGS="-DKILN_CUDA=OFF").
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${KILN_BUILD_DIR:-build}
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
  if command -v ccache >/dev/null; then args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  # shellcheck disable=SC2206  # word splitting of KILN_CMAKE_ARGS is intended
  args+=(${KILN_CMAKE_ARGS:-})
  cmake -S . -B "$build_dir" "${args[@]}"
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j"$(nproc)" "${targets[@]}"
