#!/usr/bin/env python3
"""Cluster scale: N tfd tasks on this machine, one epoch of the softmax on MNIST, in async, sync and
allreduce; prints one table row per (mode, tasks) for docs/benchmarks.md ("Scale").

  test/bench/scale_bench.py [--tfd build/daemon/tfd] [--data data/mnist] [--tasks 8,32,128,256]
                            [--modes async,sync,allreduce] [--ring 64] [--batch 50]

ps modes: tasks/16 ps (at least 1), the rest workers; allreduce: every task is a ring member
(--ring N adds one ring of N workers). Each row: startup (tfd started -> every worker's `ready`
event), train (the first `ready` -> the last `done`), samples/s over that train time, peak RSS of a
worker (median) and its private part (RssAnon: the rest is file pages, the mapped MNIST images that
every task on the machine shares), peak RSS of a ps (max), the ps's peak threads and open
descriptors, and whether every task exited 0. RSS, threads and descriptors are sampled from /proc
every 100 ms.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def proc_stats(pid):
    """(rss_kib, threads, fds, rss_anon_kib) of a live process, or None once it has gone."""
    try:
        rss = threads = anon = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return rss, threads, fds, anon
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def events(path):
    out = []
    with open(path) as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict) and "event" in e:
                out.append(e)
    return out


def run(tfd, data, mode, num_ps, num_workers, batch, limit_s):
    d = tempfile.mkdtemp(prefix="tfd-scale-")
    job = {"model": {"name": "softmax"}, "data": os.path.abspath(data), "epochs": 1, "batch_size": batch,
           "optimizer": {"type": "sgd", "learning_rate": 0.1}, "update": {"mode": mode}, "seed": 5,
           "log_every_steps": 0, "evaluation": "none"}
    with open(os.path.join(d, "job.json"), "w") as f:
        json.dump(job, f)
    ports = free_ports(num_ps + num_workers)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports[num_ps:]]}
    if num_ps:
        cluster["ps"] = [f"127.0.0.1:{p}" for p in ports[:num_ps]]
    procs = []  # (role, index, Popen, out path)
    start = time.time()
    for role, count in (("ps", num_ps), ("worker", num_workers)):
        for i in range(count):
            env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": role, "index": i}}))
            argv = [tfd, "--log-format", "json", "--startup-timeout", str(limit_s)]
            if role == "worker":
                argv += ["--job", os.path.join(d, "job.json")]
            out = os.path.join(d, f"{role}{i}.out")
            p = subprocess.Popen(argv, env=env, stdout=open(out, "w"), stderr=open(os.path.join(d, f"{role}{i}.err"), "w"))
            procs.append((role, i, p, out))
    peak = {}  # pid -> [rss, threads, fds, rss_anon]
    deadline = start + limit_s
    while time.time() < deadline and any(p.poll() is None for _, _, p, _ in procs):
        for _, _, p, _ in procs:
            if p.poll() is None:
                s = proc_stats(p.pid)
                if s:
                    cur = peak.setdefault(p.pid, [0, 0, 0, 0])
                    for k in range(4):
                        cur[k] = max(cur[k], s[k])
        time.sleep(0.1)
    for _, _, p, _ in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    ok = all(p.returncode == 0 for _, _, p, _ in procs)
    ready, done, examples = [], [], 0
    for role, _, p, out in procs:
        if role != "worker":
            continue
        for e in events(out):
            if e["event"] == "ready":
                ready.append(e.get("ts", 0))
            elif e["event"] == "done":
                done.append(e.get("ts", 0))
            elif e["event"] == "epoch":
                examples += 0  # the rate comes from the steps below
    steps = (60000 // num_workers) // batch  # every worker's steps (StepsPerEpoch)
    examples = steps * batch * num_workers
    startup = (max(ready) - start) if len(ready) == num_workers else float("nan")
    train = (max(done) - min(ready)) if ready and len(done) == num_workers else float("nan")
    worker_rss = [peak[p.pid][0] for r, _, p, _ in procs if r == "worker" and p.pid in peak]
    worker_anon = [peak[p.pid][3] for r, _, p, _ in procs if r == "worker" and p.pid in peak]
    ps = [peak[p.pid] for r, _, p, _ in procs if r == "ps" and p.pid in peak]
    failed = [f"{r}:{i}={p.returncode}" for r, i, p, _ in procs if p.returncode != 0]
    if ok:
        shutil.rmtree(d, ignore_errors=True)  # a failed run's folder stays, named in its row, for its logs
    return {
        "mode": mode, "tasks": num_ps + num_workers, "ps": num_ps, "workers": num_workers, "ok": ok,
        "startup_s": startup, "train_s": train, "samples_per_s": examples / train if train == train and train > 0 else float("nan"),
        "worker_rss_mib": statistics.median(worker_rss) / 1024 if worker_rss else float("nan"),
        "worker_anon_mib": statistics.median(worker_anon) / 1024 if worker_anon else float("nan"),
        "ps_rss_mib": max(x[0] for x in ps) / 1024 if ps else float("nan"),
        "ps_threads": max(x[1] for x in ps) if ps else 0, "ps_fds": max(x[2] for x in ps) if ps else 0,
        "failed": failed[:4], "dir": d,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tfd", default="build/daemon/tfd")
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--tasks", default="8,32,128,256")
    ap.add_argument("--modes", default="async,sync,allreduce")
    ap.add_argument("--ring", type=int, default=0)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--limit", type=float, default=300)
    a = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}, {os.cpu_count()} cpus", flush=True)
    rows = []
    for mode in a.modes.split(","):
        sizes = [int(t) for t in a.tasks.split(",")]
        if mode == "allreduce" and a.ring:
            sizes.append(a.ring)
        for n in sizes:
            num_ps = 0 if mode == "allreduce" else max(1, n // 16)
            r = run(a.tfd, a.data, mode, num_ps, n - num_ps, a.batch, a.limit)
            rows.append(r)
            print(json.dumps(r), flush=True)
    print("\n| mode | tasks (ps + workers) | exit 0 | startup s | train s | samples/s | worker RSS MiB (median) | worker RssAnon MiB (median) | ps RSS MiB (max) | ps threads | ps fds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['tasks']} ({r['ps']} + {r['workers']}) | {'yes' if r['ok'] else 'NO ' + ' '.join(r['failed'])} | "
              f"{r['startup_s']:.2f} | {r['train_s']:.2f} | {r['samples_per_s']:.0f} | {r['worker_rss_mib']:.1f} | {r['worker_anon_mib']:.1f} | "
              f"{r['ps_rss_mib']:.1f} | {r['ps_threads']} | {r['ps_fds']} |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
