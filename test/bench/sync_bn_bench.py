#!/usr/bin/env python3
"""What synchronising a job's batch norms costs an allreduce ring (docs/benchmarks.md, "Synchronised batch norm").

Usage: sync_bn_bench.py TFD JOB.json DEVICE EPOCHS [WORKERS]

Runs WORKERS (default 2) local allreduce workers of JOB.json (run from the folder its "data" is
relative to) on DEVICE (cpu, or cuda:N shared by the workers at 0.4 of its memory each) for EPOCHS,
first with every batch_norm's "sync" false, then true. Prints, per run and worker, samples/s of each
epoch, the test accuracy, the start of params_sha256 (the same on every worker only when synchronised)
and the wall time of the run.
"""
import json, os, socket, subprocess, sys, time, tempfile

tfd, job_file, device, epochs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
workers = int(sys.argv[5]) if len(sys.argv) > 5 else 2

def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks: s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks: s.close()
    return ports

def set_sync(layers, sync):
    for l in layers:
        if l["type"] == "batch_norm": l["sync"] = sync
        if "layers" in l: set_sync(l["layers"], sync)

base = json.load(open(job_file))
for sync in (False, True):
    job = json.loads(json.dumps(base))
    set_sync(job["model"]["layers"], sync)
    job["epochs"] = epochs
    job["update"] = {"mode": "allreduce"}
    job["log_every_steps"] = 0
    if device != "cpu": job["device"], job["gpu_memory_fraction"] = device, 0.4
    d = tempfile.mkdtemp()
    path = os.path.join(d, "job.json")
    json.dump(job, open(path, "w"))
    cluster = {"worker": ["127.0.0.1:%d" % p for p in free_ports(workers)]}
    procs = []
    t0 = time.time()
    for i in range(workers):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}))
        procs.append(subprocess.Popen([tfd, "--log-format", "json", "--job", path], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    wall = time.time() - t0
    for i, (out, err) in enumerate(outs):
        events = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        rates = [round(e["samples_per_sec"]) for e in events if e.get("event") == "epoch"]
        done = [e for e in events if e.get("event") == "done"]
        if procs[i].returncode != 0 or not done:
            print("sync=%s worker %d rc=%d\n%s" % (sync, i, procs[i].returncode, err[-3000:]))
            continue
        print("sync=%-5s worker %d: samples/s per epoch %s, test_accuracy %.4f, sha %s, wall %.1f s" %
              (sync, i, rates, done[0].get("test_accuracy", -1), done[0]["params_sha256"][:12], wall))
