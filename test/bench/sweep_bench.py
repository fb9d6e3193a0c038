#!/usr/bin/env python3
"""tfctl sweep against a plain loop of tfd --standalone runs (docs/benchmarks.md, "Sweeps").

Usage: sweep_bench.py TFD TFCTL MNIST_DIR [OUT_DIR]

The same grid of the seed's dnn (6 learning rates, 3 epochs each) three ways: one tfd --standalone
after another; tfctl sweep on 2 workers without a scheduler; and with ASHA (grace 1, eta 3). For each:
the wall time until the best trial (by its best val_accuracy, on 5000 held-out training examples: the
test set never chooses) had ended, the total wall time, the CPU time of every process (user + system,
children included), and the winner's test_accuracy at its best epoch (reported, not used to choose).
Prints a markdown table.
"""
import json, os, resource, subprocess, sys, tempfile, time

tfd, tfctl, mnist = sys.argv[1:4]
out = sys.argv[4] if len(sys.argv) > 4 else tempfile.mkdtemp(prefix="sweep-bench-")
os.makedirs(out, exist_ok=True)
rates = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3]
job = {"model": "dnn", "data": mnist, "epochs": 3, "batch_size": 50, "log_every_steps": 0,
       "optimizer": {"type": "momentum", "learning_rate": 0.01, "momentum": 0.9}, "validation_split": 5000, "seed": 1}


def cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


rows = []
# 1. A plain loop.
start, cpu0 = time.time(), cpu()
finished = []
for lr in rates:
    j = dict(job, optimizer=dict(job["optimizer"], learning_rate=lr))
    path = os.path.join(out, f"loop-{lr}.json")
    json.dump(j, open(path, "w"))
    p = subprocess.run([tfd, "--standalone", "--job", path, "--log-format", "json"], capture_output=True, text=True)
    # A rate that diverges fails (exit 1) as it would in the sweep.
    # (val_accuracy, test_accuracy) of each epoch; the best by validation.
    epochs = [json.loads(l) for l in p.stdout.splitlines() if '"epoch"' in l]
    best = max([(e.get("val_accuracy", 0), e.get("test_accuracy", 0)) for e in epochs] or [(0, 0)])
    finished.append((time.time() - start, best, lr))
total, cpu_loop = time.time() - start, cpu() - cpu0
t_best = max(finished, key=lambda f: f[1][0])
rows.append(("loop of tfd --standalone, one after another", t_best[0], total, cpu_loop, t_best[2], t_best[1][0], t_best[1][1], "-"))

# 2, 3. tfctl sweep without and with ASHA.
for name, sched in (("tfctl sweep, 2 workers, no scheduler", "none"),
                    ("tfctl sweep, 2 workers, ASHA (grace 1, eta 3)", {"type": "asha", "grace_epochs": 1, "reduction_factor": 3, "max_epochs": 3})):
    sweep = {"job": job, "space": {"optimizer.learning_rate": rates}, "objective": {"metric": "val_accuracy"}, "workers": 2, "scheduler": sched}
    path = os.path.join(out, f"sweep-{sched if isinstance(sched, str) else 'asha'}.json")
    json.dump(sweep, open(path, "w"))
    runs = os.path.join(out, "runs-" + os.path.basename(path))
    start, cpu0 = time.time(), cpu()
    subprocess.run([tfctl, "sweep", path, "--tfd", tfd, "--run-dir", runs], capture_output=True)
    total, cpu_sweep = time.time() - start, cpu() - cpu0
    run = os.path.join(runs, os.listdir(runs)[0])
    lines = [json.loads(l) for l in open(os.path.join(run, "trials.jsonl"))]
    t0 = min(l["ts"] for l in lines)
    epochs = sum(1 for l in lines if l["event"] == "epoch")
    best = {}  # trial -> (val_accuracy, test_accuracy) at its best val_accuracy
    for l in lines:
        if l["event"] == "epoch":
            m = l["metrics"]
            best[l["trial"]] = max(best.get(l["trial"], (0, 0)), (m["val_accuracy"], m.get("test_accuracy", 0)))
    win = max(best, key=lambda t: best[t][0])
    ended = next(l["ts"] for l in lines if l["event"] == "end" and l["trial"] == win)
    lr = next(l["params"]["optimizer.learning_rate"] for l in lines if l["trial"] == win)
    rows.append((name, ended - t0, total, cpu_sweep, lr, best[win][0], best[win][1], epochs))

print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
print("| run | time to the best trial (s) | total (s) | CPU time (s) | best lr | its best val_accuracy | its test_accuracy there | epoch reports |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]:.1f} | {r[2]:.1f} | {r[3]:.1f} | {r[4]} | {r[5]:.4f} | {r[6]:.4f} | {r[7]} |")
