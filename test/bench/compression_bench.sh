#!/usr/bin/env bash
# Gradient compression's accuracy and bytes (docs/benchmarks.md, "Gradient compression"): MODEL
# (dnn: the seed's, configs/jobs/mnist-dnn-seed.json's model, optimizer and batch; cnn: the seed's
# cnn as configs/jobs/mnist-cnn-adam.json trains it) trained EPOCHS epochs by 2 allreduce workers
# on 127.0.0.1 with each update.compression method. Prints, per method, the
# final test accuracy, its difference from uncompressed, the ring bytes per step each worker
# measured (ring_bytes_per_step) and what the arithmetic says they are (its log line), and
# whether both workers ended with the same parameters. ONLY (comma-separated method names, as the
# table names them, "none" first) runs those alone.
# SEED (default 1) is the jobs' seed: the weights' draw and the epochs' shuffles.
#   [SEED=N] test/bench/compression_bench.sh [EPOCHS [OUT_DIR [MODEL [ONLY]]]]
set -euo pipefail
cd "$(dirname "$0")/../.."
epochs=${1:-5}
out=${2:-$(mktemp -d)}
model=${3:-dnn}
only=${4:-}
seed=${SEED:-1}
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "compression_bench: SEED is a non-negative integer, not \"$seed\"" >&2; exit 2; }
case "$model" in
  dnn) training='"batch_size": 50, "optimizer": {"type": "momentum", "learning_rate": 0.01, "momentum": 0.95}' ;;
  cnn) training='"batch_size": 64, "optimizer": {"type": "adam", "learning_rate": 0.001}' ;;
  *) echo "compression_bench: MODEL is dnn or cnn, not \"$model\"" >&2; exit 2 ;;
esac
tfd=build/daemon/tfd
data=${TFD_MNIST_DIR:-data/mnist}
[ -x "$tfd" ] || { echo "compression_bench: $tfd is not built" >&2; exit 2; }
[ -f "$data/train-images-idx3-ubyte" ] || { echo "compression_bench: no MNIST in $data (scripts/fetch_mnist.sh)" >&2; exit 77; }
# topk's default warm-up is 1 epoch: "topk 0.01" has it; "no warm-up" turns it off.
all=('none|"none"' 'fp16|"fp16"' 'bf16|"bf16"' 'topk 0.01|{"method": "topk", "ratio": 0.01}'
     'topk 0.01 no warm-up|{"method": "topk", "ratio": 0.01, "warmup_epochs": 0}'
     'topk 0.01 warm-up 2|{"method": "topk", "ratio": 0.01, "warmup_epochs": 2}' 'topk 0.1|{"method": "topk", "ratio": 0.1}'
     'powersgd 2|{"method": "powersgd", "rank": 2}' 'powersgd 4|{"method": "powersgd", "rank": 4}')
methods=()
for m in "${all[@]}"; do
  if [ -z "$only" ] || [[ ",$only," == *",${m%%|*},"* ]]; then methods+=("$m"); fi
done
port=$((23000 + RANDOM % 20000))
for m in "${methods[@]}"; do
  name=${m%%|*} compression=${m#*|} dir="$out/${name// /_}"
  mkdir -p "$dir"
  cat > "$dir/job.json" <<JOB
{"model": "$model", "data": "$data", "epochs": $epochs, $training, "seed": $seed, "log_every_steps": 0,
 "update": {"mode": "allreduce", "compression": $compression}}
JOB
  cluster="{\"worker\": [\"127.0.0.1:$port\", \"127.0.0.1:$((port + 1))\"]}"
  pids=()
  for i in 0 1; do
    TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": $i}}" "$tfd" --job "$dir/job.json" --log-format json \
      > "$dir/worker$i.out" 2> "$dir/worker$i.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "compression_bench: $name failed; see $dir" >&2; exit 1; }; done
  port=$((port + 2))
done
/usr/bin/python3 - "$out" "${methods[@]%%|*}" <<'PY'
import json, re, sys
out, names = sys.argv[1], sys.argv[2:]
def done(d, i):
    for line in open(f"{d}/worker{i}.out"):
        e = json.loads(line)
        if e.get("event") == "done": return e
base = None
print("| method | test accuracy | vs none | ring bytes per step (measured) | stated by the worker | same parameters on both |")
print("|---|---|---|---|---|---|")
for n in names:
    d = f"{out}/{n.replace(' ', '_')}"
    w0, w1 = done(d, 0), done(d, 1)
    err = open(f"{d}/worker0.err").read()
    measured = re.findall(r"ring_bytes_per_step=(\d+)", err)[-1]
    stated = re.search(r"update.compression \w+: (\d+) bytes per step", err)
    acc = w0["test_accuracy"]
    base = acc if base is None else base
    print(f"| {n} | {100 * acc:.2f}% | {100 * (acc - base):+.2f} pt | {measured} | {stated.group(1) if stated else measured} | "
          f"{'yes' if w0['params_sha256'] == w1['params_sha256'] else 'NO'} |")
PY
