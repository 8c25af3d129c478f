#!/usr/bin/env bash
# Installs ONNX Runtime for Node.js (onnxruntime-node, the version
# bench/package.json pins, locked by bench/package-lock.json) into
# bench/node_modules/ (not committed), for bench/ort_compare.js and
# scripts/bench-onnx-vs-ort.sh.
#
#   bash scripts/install-ort.sh
#
# Needs node (18 or newer) and npm, and the npm registry. The CPU library
# (libonnxruntime.so) ships inside the package; --ignore-scripts skips the
# package's install script, which would fetch GPU provider libraries.
# Idempotent: does nothing when the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/../bench"

want=$(node -p "require('./package.json').dependencies['onnxruntime-node']")
have=$(node -p "try { require('onnxruntime-node/package.json').version } catch (e) { '' }")
if [[ "$have" == "$want" ]]; then
  echo "install-ort: onnxruntime-node $have present"
  exit 0
fi
npm ci --ignore-scripts --no-audit --no-fund
node -e "const ort = require('onnxruntime-node'); console.log('install-ort: onnxruntime-node', ort.env.versions.node)"
