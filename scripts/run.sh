#!/usr/bin/env bash
# The main job: installs dependencies, builds `kiln` into build/ and runs it.
#
#   bash scripts/run.sh                # = bash scripts/run.sh train (LeNet, 3 epochs)
#   bash scripts/run.sh demo
#   bash scripts/run.sh info           # any `kiln` subcommand and its arguments
#   bash scripts/run.sh bench matmul
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
bash scripts/build.sh kiln_cli
if [[ $# -eq 0 ]]; then set -- train; fi
exec "${KILN_BUILD_DIR:-build}/kiln" "$@"
