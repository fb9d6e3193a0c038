#!/usr/bin/env bash
# What an allreduce ring's checkpoints cost (docs/benchmarks.md, "Allreduce checkpoints"): two
# allreduce workers on 127.0.0.1 train the seed's dnn on MNIST for 3 epochs, with no checkpoints,
# a checkpoint every 100 steps and every 600 (once an epoch), ROUNDS rounds alternating; prints the
# chief's epoch 2 and 3 samples/s per run and each setting's mean, and the checkpoints it wrote.
# COMPRESSION (update.compression's JSON, e.g. '{"method": "topk", "ratio": 0.01}') trains every
# run compressed: under topk and powersgd each save also gathers every worker's error feedback.
# TFD (default build/daemon/tfd) runs another binary, to compare two builds. MODE (default
# allreduce) sync or async runs the ps modes instead, with one ps task beside the two workers
# (under topk each save also collects every worker's residual through the ps).
#   [MODE=M] [COMPRESSION=JSON] [TFD=PATH] test/bench/allreduce_ckpt_cost.sh [ROUNDS [OUT_DIR]]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
out=${2:-$(mktemp -d)}
compression=${COMPRESSION:-'"none"'}
mode=${MODE:-allreduce}
tfd=${TFD:-build/daemon/tfd}
data=${TFD_MNIST_DIR:-data/mnist}
[ -x "$tfd" ] || { echo "allreduce_ckpt_cost: $tfd is not built" >&2; exit 2; }
[ -f "$data/train-images-idx3-ubyte" ] || { echo "allreduce_ckpt_cost: no MNIST in $data (scripts/fetch_mnist.sh)" >&2; exit 77; }
port=$((23000 + RANDOM % 20000))
declare -A sum count
for round in $(seq 1 "$rounds"); do
  for every in none 100 600; do
    dir="$out/$every-$round"
    mkdir -p "$dir"
    extra=""
    [ "$every" != none ] && extra=", \"checkpoint\": {\"dir\": \"$dir/ckpt\", \"every_steps\": $every, \"keep\": 3}"
    cat > "$dir/job.json" <<JOB
{"model": "dnn", "data": "$data", "epochs": 3, "batch_size": 50,
 "optimizer": {"type": "momentum", "learning_rate": 0.01, "momentum": 0.95}, "seed": 1, "log_every_steps": 0,
 "update": {"mode": "$mode", "compression": $compression}$extra}
JOB
    cluster="{\"worker\": [\"127.0.0.1:$port\", \"127.0.0.1:$((port + 1))\"]}"
    pids=()
    if [ "$mode" != allreduce ]; then
      cluster="{\"worker\": [\"127.0.0.1:$port\", \"127.0.0.1:$((port + 1))\"], \"ps\": [\"127.0.0.1:$((port + 2))\"]}"
      TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"ps\", \"index\": 0}}" "$tfd" > "$dir/ps.out" 2> "$dir/ps.err" &
      pids+=($!)
    fi
    for i in 0 1; do
      TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": $i}}" "$tfd" --job "$dir/job.json" \
        > "$dir/worker$i.out" 2> "$dir/worker$i.err" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || { echo "allreduce_ckpt_cost: every=$every failed; see $dir" >&2; exit 1; }; done
    port=$((port + 3))
    rates=$(grep -o "samples_per_sec=[0-9.]*" "$dir/worker0.err" | tail -2 | cut -d= -f2)
    saves=$(grep -c "info checkpoint .* global_step=" "$dir/worker0.err" || true)
    echo "round $round, checkpoint every $every steps: epochs 2 and 3 at $(echo $rates) samples/s; $saves checkpoints"
    for r in $rates; do
      sum[$every]=$(echo "${sum[$every]:-0} + $r" | bc)
      count[$every]=$(( ${count[$every]:-0} + 1 ))
    done
  done
done
base=$(echo "${sum[none]} / ${count[none]}" | bc -l)
for every in none 100 600; do
  mean=$(echo "${sum[$every]} / ${count[$every]}" | bc -l)
  printf "every %-4s mean %.0f samples/s, %.2fx no checkpoints\n" "$every" "$mean" "$(echo "$mean / $base" | bc -l)"
done
