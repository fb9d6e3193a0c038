#!/bin/bash
# tfd serve beside a Node.js server running onnxruntime-node on the same model.onnx
# (docs/benchmarks.md, "Serving"): requests/s and p50/p99 latency with wrk at 1, 16 and 64
# connections, one MNIST instance per request, and the serving process's RSS.
#   test/bench/serve_bench.sh BUILD_DIR [MODEL (dnn)] [SECONDS (10)]
# Needs wrk and curl (Debian) and onnxruntime-node (ORT_NODE_MODULES, default third_party/onnxruntime-node/node_modules, scripts/fetch_onnxruntime.sh).
set -euo pipefail
build=${1:?usage: serve_bench.sh BUILD_DIR [MODEL] [SECONDS]}
model=${2:-dnn}
seconds=${3:-10}
modules=${ORT_NODE_MODULES:-$(cd "$(dirname "$0")/../.." && pwd)/third_party/onnxruntime-node/node_modules}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
for tool in wrk curl node; do command -v $tool >/dev/null || { echo "serve_bench: $tool not found" >&2; exit 77; }; done
[ -d "$modules/onnxruntime-node" ] || { echo "serve_bench: no onnxruntime-node in $modules (npm install --ignore-scripts onnxruntime-node)" >&2; exit 77; }

"$build/test/tools/tfd_write_test_model" "$work/model" "$model" mnist 1 >/dev/null
/usr/bin/python3 -c "
import json, random
random.seed(1)
print(json.dumps({'instances': [[random.randint(0, 255) for _ in range(784)]]}))" > "$work/body.json"
cat > "$work/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$work/body.json")
wrk.body = f:read("*a")
f:close()
LUA

port_tfd=$((20000 + RANDOM % 10000)); port_ort=$((port_tfd + 1))
"$build/daemon/tfd" serve --model "$work/model" --bind 127.0.0.1:$port_tfd --batch-max 64 --batch-timeout-us 500 --queue-max 4096 \
  --max-connections 1024 2>"$work/tfd.err" & pids+=($!); tfd_pid=$!
NODE_PATH=$modules node "$here/serve_ort_peer.js" "$work/model/1/model.onnx" $port_ort 2>"$work/ort.err" & pids+=($!); ort_pid=$!
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$port_tfd/healthz" >/dev/null && curl -sf -o /dev/null -X POST --data-binary @"$work/body.json" \
    "http://127.0.0.1:$port_ort/" && break
  sleep 0.2
done
# Both answer the same instance alike (model.onnx holds the same weights and preprocessing).
/usr/bin/python3 - "$work/body.json" $port_tfd $port_ort <<'PY'
import json, sys, urllib.request
body = open(sys.argv[1], 'rb').read()
ask = lambda url: json.load(urllib.request.urlopen(urllib.request.Request(url, body, {'Content-Type': 'application/json'})))
a = ask(f'http://127.0.0.1:{sys.argv[2]}/v1/models/model:predict')['predictions'][0]['probabilities']
b = ask(f'http://127.0.0.1:{sys.argv[3]}/')['predictions'][0]['probabilities']
err = max(abs(x - y) for x, y in zip(a, b))
print(f'probabilities max |tfd - ort| = {err:.2e}')
assert err < 1e-5, 'tfd serve and onnxruntime disagree'
PY
grep -h "ort peer" "$work/ort.err" | grep -v listening
lscpu | grep 'Model name' | sed 's/  */ /g'
printf '%-6s %-8s %12s %10s %10s\n' server clients 'requests/s' p50 p99
for c in 1 16 64; do
  for side in tfd ort; do
    if [ $side = tfd ]; then url="http://127.0.0.1:$port_tfd/v1/models/model:predict"; else url="http://127.0.0.1:$port_ort/"; fi
    out=$(wrk -t $((c < 2 ? 1 : 2)) -c $c -d ${seconds}s --latency -s "$work/post.lua" "$url")
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p50=$(echo "$out" | awk '$1 == "50%" {print $2}')
    p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
    bad=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
    printf '%-6s %-8s %12s %10s %10s %s\n' $side $c "$rps" "$p50" "$p99" "${bad:+non-2xx: $bad}"
  done
done
echo "RSS tfd serve: $(awk '/VmRSS/ {print $2, $3}' /proc/$tfd_pid/status) (peak $(awk '/VmHWM/ {print $2, $3}' /proc/$tfd_pid/status))"
echo "RSS node+ort:  $(awk '/VmRSS/ {print $2, $3}' /proc/$ort_pid/status) (peak $(awk '/VmHWM/ {print $2, $3}' /proc/$ort_pid/status))"
curl -s "http://127.0.0.1:$port_tfd/metrics" | grep -E '^tfd_serve_batch_size_(sum|count)'
