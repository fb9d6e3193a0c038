#!/usr/bin/env bash
# Measures what tfd does under the faults of docs/reliability.md's table, on MNIST with the mlp:
# 1 ps + 2 workers on this machine, each fault injected by signals at a fixed point of the run.
# Prints one markdown row per fault: detection time (from the fault to the first log line naming
# the lost peer), the steps the run lost, and the chief's final test accuracy beside an undisturbed
# run's. Usage: test/bench/fault_table.sh [BUILD_DIR] [MNIST_DIR]
set -euo pipefail
build=${1:-build}
mnist=$(realpath "${2:-data/mnist}")
tfd=$(realpath "$build/daemon/tfd")
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
# The time of the first log line of FILE matching PATTERN, in seconds since the epoch.
line_time() {
  local l
  l=$(grep -m1 -- "$2" "$1" | cut -c1-23) || return 1
  date -d "$l" +%s.%N
}
wait_for() {  # FILE PATTERN: until a line matches (60 s at most)
  for _ in $(seq 600); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1" >&2; return 1
}

run() {  # NAME UPDATE: starts ps and workers in $work/NAME
  local d=$work/$1; mkdir -p "$d"
  local c="\"cluster\": {\"ps\": [\"127.0.0.1:$(port)\"], \"worker\": [\"127.0.0.1:$(port)\", \"127.0.0.1:$(port)\"]}"
  echo "{\"model\": {\"name\": \"mlp\", \"init\": \"glorot_uniform\"}, \"data\": \"$mnist\", \"epochs\": 3, \"batch_size\": 100, \"seed\": 5,
         \"optimizer\": {\"type\": \"adam\", \"learning_rate\": 0.002}, \"update\": $2}" > "$d/job.json"
  for t in ps:0 worker:0 worker:1; do
    echo "{$c, \"task\": {\"type\": \"${t%%:*}\", \"index\": ${t##*:}}}" > "$d/${t/:/}.tfconfig"
  done
  TF_CONFIG=$(cat "$d/ps0.tfconfig") "$tfd" > /dev/null 2> "$d/ps0.err" & echo $! > "$d/ps0.pid"
  for w in 0 1; do
    TF_CONFIG=$(cat "$d/worker$w.tfconfig") "$tfd" --job "$d/job.json" > /dev/null 2> "$d/worker$w.err" & echo $! > "$d/worker$w.pid"
  done
}
restart() {  # NAME TASK (ps0, worker1, ...)
  local d=$work/$1 extra=(); [[ $2 == worker* ]] && extra=(--job "$d/job.json")
  TF_CONFIG=$(cat "$d/$2.tfconfig") "$tfd" "${extra[@]}" > /dev/null 2>> "$d/$2.err" & echo $! > "$d/$2.pid"
}
finish() {  # NAME: waits for every task; sets acc to the chief's final test accuracy
  local d=$work/$1 t code
  for t in worker0 worker1 ps0; do
    code=0; wait "$(cat "$d/$t.pid")" || code=$?
    [ "$code" = 0 ] || echo "($t of $1 exited $code)" >&2
  done
  acc=$(grep -o 'done: .*test_accuracy=[0-9.]*' "$d/worker0.err" | grep -o '[0-9.]*$')
}
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f s", a - b }'; }
row() { printf '| %s | %s | %s | %s | %s |\n' "$@"; }

run clean '{"mode": "async"}'; finish clean; base=$acc
echo "undisturbed async run: chief test_accuracy $base"
echo
row "fault (MNIST mlp, 1 ps + 2 workers)" "what happened" "detected after" "steps lost" "final accuracy (undisturbed $base)"
row "---" "---" "---" "---" "---"

# kill -9 a worker in async mode, start it again after 1 s.
run wkill '{"mode": "async"}'; d=$work/wkill
wait_for "$d/worker1.err" "epoch=1 "; t0=$(now); kill -9 "$(cat "$d/worker1.pid")"
wait_for "$d/ps0.err" "lost worker:1"; det=$(secs "$(line_time "$d/ps0.err" "lost worker:1")" "$t0")
sleep 1; restart wkill worker1; finish wkill
resume=$(grep -o 'local_step [0-9]* was applied' "$d/worker1.err" | grep -o '[0-9]*')
row "kill -9 a worker (async), restart it 1 s later" "others trained on; it rejoined and resumed after step $resume" "$det" \
    "≤ 1 (the step in flight)" "$acc"

# kill -9 the ps, start it again after 1 s.
run pkill '{"mode": "async"}'; d=$work/pkill
wait_for "$d/worker1.err" "epoch=1 "; t0=$(now); kill -9 "$(cat "$d/ps0.pid")"
wait_for "$d/worker0.err" "lost ps:0"; det=$(secs "$(line_time "$d/worker0.err" "lost ps:0")" "$t0")
sleep 1; restart pkill ps0; finish pkill
at=$(grep -o 'at global_step [0-9]*' "$d/ps0.err" | tail -1 | grep -o '[0-9]*$')
row "kill -9 the ps, restart it 1 s later" "workers reconnected; the chief initialised it again at global_step $at; the step in flight was sent again" \
    "$det" "0 (optimizer slots restarted)" "$acc"

# SIGSTOP a worker for 10 s (past the 8 s peer timeout).
run wstop '{"mode": "async"}'; d=$work/wstop
wait_for "$d/worker1.err" "epoch=1 "; t0=$(now); kill -STOP "$(cat "$d/worker1.pid")"
wait_for "$d/ps0.err" "lost worker:1"; det=$(secs "$(line_time "$d/ps0.err" "lost worker:1")" "$t0")
sleep 2; kill -CONT "$(cat "$d/worker1.pid")"; finish wstop
row "SIGSTOP a worker for 10 s (async)" "the ps dropped it at the peer timeout; continued, it reconnected and went on" "$det" \
    "0" "$acc"

# sync, on_worker_loss wait: kill -9 a worker, restart it 2 s later.
run swait '{"mode": "sync", "on_worker_loss": "wait"}'; d=$work/swait
wait_for "$d/worker1.err" "epoch=1 "; t0=$(now); kill -9 "$(cat "$d/worker1.pid")"
wait_for "$d/ps0.err" "waits for worker:1"; det=$(secs "$(line_time "$d/ps0.err" "waits for worker:1")" "$t0")
sleep 2; restart swait worker1; finish swait
steps=$(grep -o 'done: global_step=[0-9]*' "$d/worker0.err" | grep -o '[0-9]*$')
row "kill -9 a worker (sync, on_worker_loss wait), restart it 2 s later" "the other waited; it resumed at the global step ($steps steps in all, as planned)" \
    "$det" "0" "$acc"

# sync, on_worker_loss shrink.
run sshrink '{"mode": "sync", "on_worker_loss": "shrink"}'; d=$work/sshrink
wait_for "$d/worker1.err" "epoch=1 "; t0=$(now); kill -9 "$(cat "$d/worker1.pid")"
wait_for "$d/ps0.err" "quorum: "; det=$(secs "$(line_time "$d/ps0.err" "quorum: ")" "$t0")
finish sshrink
row "kill -9 a worker (sync, on_worker_loss shrink)" "the quorum went from 2 to 1; the other finished alone" "$det" \
    "its shard's rest of the run" "$acc"
