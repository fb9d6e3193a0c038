#!/bin/bash
# The cost of summaries and metrics: 1 ps + 2 async workers (the local cluster's mlp with adam, 5
# epochs of data/mnist) with --summaries-dir and --metrics on every task ("on") or neither ("off").
# Prints the workers' samples/s summed (each worker's mean over its epochs). Run pairs alternating:
#   for i in 1 2 3 4 5; do echo "off=$(test/bench/observability_cost.sh off) on=$(test/bench/observability_cost.sh on)"; done
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
TFD=$root/build/daemon/tfd
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
P0=$((20000 + RANDOM % 20000)); P1=$((P0+1)); P2=$((P0+2))
CL="\"cluster\": {\"ps\": [\"127.0.0.1:$P0\"], \"worker\": [\"127.0.0.1:$P1\", \"127.0.0.1:$P2\"]}"
cat > job.json <<J
{"model": {"name": "mlp", "init": "glorot_uniform"}, "data": "$root/data/mnist", "epochs": 5, "batch_size": 100,
 "optimizer": {"type": "adam", "learning_rate": 0.001}, "update": {"mode": "async"}, "seed": 1}
J
X=()
if [ "${1:-}" = on ]; then X=(--summaries-dir tb); fi
M() { if [ "$1" = on ]; then echo "--metrics 127.0.0.1:0"; fi; }
export OPENBLAS_NUM_THREADS=1
TF_CONFIG="{$CL, \"task\": {\"type\": \"ps\", \"index\": 0}}" $TFD "${X[@]}" $(M "${1:-}") 2>/dev/null & PS=$!
sleep 0.2
for i in 0 1; do TF_CONFIG="{$CL, \"task\": {\"type\": \"worker\", \"index\": $i}}" $TFD --job job.json --log-format json "${X[@]}" $(M "${1:-}") > w$i.jsonl 2>/dev/null & done
wait
python3 - <<'P'
import json
tot = 0
for i in (0, 1):
    v = [json.loads(l)["samples_per_sec"] for l in open(f"w{i}.jsonl") if '"event":"epoch"' in l]
    tot += sum(v) / len(v)
print(round(tot))
P
