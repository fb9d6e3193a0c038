#!/usr/bin/env bash
# Installs npm's onnxruntime-node (pinned below) into DIR (default third_party/onnxruntime-node,
# gitignored): ONNX Runtime, the peer that the tests and benchmarks run tfd's exported model.onnx
# in (test/tools/ort_run.js looks for it there). Does nothing when that version is already there.
# --ignore-scripts: the CPU library ships inside the package; the install script only downloads the
# CUDA provider from NuGet, which the tests do not use. About 290 MB.
set -euo pipefail

dir=${1:-third_party/onnxruntime-node}
version=1.30.0
pkg_json="$dir/node_modules/onnxruntime-node/package.json"

installed() {  # 0 when the pinned version and its native binding are in $dir
  [ -f "$pkg_json" ] && grep -q "\"version\": \"$version\"" "$pkg_json" &&
    [ -n "$(find "$dir/node_modules/onnxruntime-node/bin" -name onnxruntime_binding.node -print -quit 2>/dev/null)" ]
}

if installed; then
  exit 0
fi
command -v npm >/dev/null || { echo "fetch_onnxruntime: npm is not installed (run scripts/setup)" >&2; exit 1; }
mkdir -p "$dir"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "fetch_onnxruntime: installing onnxruntime-node@$version into $dir"
npm install --prefix "$dir" --ignore-scripts --no-audit --no-fund --no-save "onnxruntime-node@$version" >"$log" 2>&1 || {
  echo "fetch_onnxruntime: npm install onnxruntime-node@$version failed: $(tail -n 1 "$log")" >&2; exit 1; }
installed || { echo "fetch_onnxruntime: $dir: onnxruntime-node@$version installed without its native binding" >&2; exit 1; }
echo "fetch_onnxruntime: onnxruntime-node@$version is in $dir"
