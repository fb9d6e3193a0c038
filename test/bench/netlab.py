#!/usr/bin/python3
"""A lab network on this machine: N hosts as network namespaces on one bridge, each host's link
shaped with tc, tfd tasks placed on them by TF_CONFIG with each host's own address.

  test/bench/netlab.py [--hosts 4] [--workers-per-host 1] [--links 1g,10g,none] [--modes allreduce,sync]
                       [--hierarchical auto] [--compression none,fp16,powersgd:2] [--epochs 10] [--target 0.98]
                       [--ps-hosts 0] [--ps-only-hosts 0] [--placements balanced,by_host]
                       [--stop-at-target] [--loss PCT] [--report FILE] [--no-peer] [--hooks none,fp16,powersgd]
                       [--rounds 1] [--clean]

Host i is the namespace PREFIX-hI at 10.77.0.(i+2)/24 behind a veth pair (PREFIX-iI inside,
PREFIX-oI on the bridge PREFIX-br). A link preset shapes both ends of each pair, so a host sends
and receives at the preset's rate, as through a full-duplex NIC; the bridge is the switch and is
not shaped. Presets: 1g (1 Gbit/s, 0.2 ms one way between two hosts), 10g (10 Gbit/s, 0.05 ms),
none (the veths as they are). Rates are tc tbf; the delay and --loss need tc netem, which some
kernels lack: then the delay is left out (said once, and in the report) and loss is nftables'
random drop of packets arriving at each host.

Each configuration runs the seed's dnn (batch 50 per worker, momentum 0.01/0.95) on
--workers-per-host workers per host (worker i on host i // W, port 2222 + i % W): allreduce (a ring
over the workers, or with W > 1 and update.hierarchical true or auto, a ring inside each host and
one across the hosts' leaders; --hierarchical lists the settings to run, one row each) or sync (one
ps task on each host --ps-hosts lists, host 0 by default, beside its workers; --ps-only-hosts adds
hosts that run ps tasks and no worker, numbered after the workers' hosts; --placements lists the
job's ps placements to run, one row each), once per --compression method (the job's update.compression,
docs/config.md "Gradient compression": none, fp16, bf16, topk[:RATIO], powersgd[:RANK]; powersgd is
allreduce only, so sync skips it). Per configuration it prints samples/s (the workers' sum, each worker's mean over the epochs after the
first), time to --target test accuracy (the chief's epoch events), bytes each host sent per step
(its veth's tx_bytes over the run, divided by its worker's steps) beside the arithmetic of what
the mode must send, and worker 0's step split by its own clock (input / compute / update, where
update is the exchange and the wait for the others, which tfd's events do not split), with `wire`
= the bytes the busiest host sends per step at the link's rate: the part of update no software can
save without sending less. With python3-torch (scripts/setup --bench), PyTorch DDP (gloo) runs on
the same namespaces and links with each communication hook of --hooks (torch_lab_peer.py: tfd's
initialisation, optimizer, batch and learning rate; a seeded data order); else its rows say
"skipped: no torch". Per link the best of each side (the soonest to --target, else the most
samples/s) is marked, and a summary line per link gives DDP's best time to --target over tfd's best,
and each side's best samples/s against the same configuration unshaped. --stop-at-target ends a tfd
configuration once its chief reaches --target (the DDP peer always stops there), so a run to 98%
does not pay for the epochs after it. --rounds N runs each link's configurations N times in turn (so a
slow spell of a shared machine hits each alike) and prints each configuration's median samples/s
over the rounds and, with --hierarchical false,true, each round's ratio of the two and its median.

Everything it made (namespaces, bridge, the tasks) goes on exit, on an error and on Ctrl-C; a run
first removes what a killed earlier run with the same --prefix left. Needs root (else one line,
exit 77). --clean only removes. --report FILE writes every figure as JSON.
"""
import argparse
import json
import math
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

PROG = "netlab"
SKIP = 77
DNN_FLOATS = 230_250  # the dnn's parameters (docs/config.md): what a gradient or a pull carries
DNN_KERNELS = [(784, 160)] + [(160, 160)] * 4 + [(160, 10)]  # as n x m matrices (PowerSGD's view)
DNN_BIASES = [160] * 5 + [10]
PORT = 2222  # every host has its own addresses, so every task listens on the same port
PRESETS = {  # rate in bit/s, one-way delay between two hosts in ms
    "1g": (1_000_000_000, 0.2),
    "10g": (10_000_000_000, 0.05),
    "none": (None, 0.0),
}
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from scale_bench import events as events_of  # noqa: E402  (a task's JSON events, from its stdout file)


class LabError(Exception):
    pass


def sh(*argv, check=True):
    """Runs one command (an argv list, no shell); LabError naming it on failure."""
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {p.stderr.strip() or f'exit {p.returncode}'}")
    return p


def tc_has(kind, dev):
    """Whether this kernel has qdisc `kind` (tried on `dev`, then removed)."""
    ok = sh("tc", "qdisc", "add", "dev", dev, "root", kind, check=False).returncode == 0
    if ok:
        sh("tc", "qdisc", "del", "dev", dev, "root", check=False)
    return ok


class Lab:
    """The namespaces, veth pairs and bridge of one run; Down() removes them (and is idempotent)."""

    def __init__(self, prefix, hosts, subnet):
        if len(prefix) > 8:  # interface names are at most 15 bytes: PREFIX-br, PREFIX-o123
            raise LabError(f"--prefix {prefix!r}: at most 8 characters")
        self.prefix, self.hosts, self.subnet = prefix, hosts, subnet
        self.netem = None  # known after Up()
        self.notes = []

    def ns(self, i):
        return f"{self.prefix}-h{i}"

    def inside(self, i):
        return f"{self.prefix}-i{i}"

    def outside(self, i):
        return f"{self.prefix}-o{i}"

    def address(self, i):
        return f"{self.subnet}.{i + 2}"

    def bridge(self):
        return f"{self.prefix}-br"

    def Down(self):
        """Removes every namespace and link named with this prefix, this run's or an earlier one's."""
        for name in sh("ip", "netns", "list", check=False).stdout.split("\n"):
            name = name.split(" ")[0]
            if name.startswith(self.prefix + "-h"):
                # Tasks a killed run left would keep the namespace alive after its name goes.
                for pid in sh("ip", "netns", "pids", name, check=False).stdout.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                sh("ip", "netns", "del", name, check=False)  # takes its veth pair along
        links = json.loads(sh("ip", "-j", "link", "show", check=False).stdout or "[]")
        for link in links:
            if link["ifname"].startswith(self.prefix + "-"):
                sh("ip", "link", "del", link["ifname"], check=False)

    def Up(self):
        self.Down()
        sh("ip", "link", "add", self.bridge(), "type", "bridge")
        sh("ip", "link", "set", self.bridge(), "up")
        for i in range(self.hosts):
            ns = self.ns(i)
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", self.outside(i), "type", "veth", "peer", "name", self.inside(i))
            sh("ip", "link", "set", self.inside(i), "netns", ns)
            sh("ip", "link", "set", self.outside(i), "master", self.bridge(), "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", self.inside(i))
            sh("ip", "-n", ns, "link", "set", self.inside(i), "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        self.netem = tc_has("netem", self.outside(0))

    def Shape(self, preset, loss_pct):
        """Sets every host's link to `preset` (replacing the last one's shaping) and `loss_pct`."""
        rate, delay_ms = PRESETS[preset]
        for i in range(self.hosts):
            for dev, netns in ((self.outside(i), None), (self.inside(i), self.ns(i))):
                self._ShapeDev(dev, netns, rate, delay_ms / 2, loss_pct)  # each direction crosses two ends
            self._Drop(i, loss_pct)

    def _ShapeDev(self, dev, netns, rate, half_delay_ms, loss_pct):
        tc = ["tc"] if netns is None else ["tc", "-n", netns]
        sh(*tc, "qdisc", "del", "dev", dev, "root", check=False)
        netem_args = []
        if self.netem and half_delay_ms > 0:
            netem_args += ["delay", f"{half_delay_ms}ms"]
        if self.netem and loss_pct > 0 and netns is not None:
            netem_args += ["loss", f"{loss_pct}%"]
        if netem_args:
            # netem's own rate keeps delay and rate in one qdisc (a tbf under netem re-times packets).
            sh(*tc, "qdisc", "add", "dev", dev, "root", "netem", *netem_args,
               *(["rate", f"{rate}bit"] if rate else []), "limit", "100000")
        elif rate:
            # Bucket: half a millisecond at the rate, at least two 64 KB segments (veths pass GSO
            # segments whole); queue: 5 ms at the rate before tbf drops, as a switch port's buffer.
            burst = max(rate // 8 // 2000, 131072)
            sh(*tc, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate}bit", "burst", str(burst),
               "latency", "5ms")

    def _Drop(self, i, loss_pct):
        """Without netem: nftables drops loss_pct% of the packets arriving at host i."""
        ns = self.ns(i)
        sh("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "netlab", check=False)
        if loss_pct <= 0 or self.netem:
            return
        if shutil.which("nft") is None:
            raise LabError("--loss needs tc netem or nft (nftables), and this machine has neither")
        per_100k = str(int(round(loss_pct * 1000)))
        sh("ip", "netns", "exec", ns, "nft", "add", "table", "inet", "netlab")
        sh("ip", "netns", "exec", ns, "nft", "add", "chain", "inet", "netlab", "in",
           "{ type filter hook input priority 0; }")
        sh("ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "netlab", "in", "iifname", "!=", "lo",
           "numgen", "random", "mod", "100000", "<", per_100k, "drop")

    def TxBytes(self, i):
        """Bytes host i has sent through its veth (the namespace side's tx counter)."""
        links = json.loads(sh("ip", "-n", self.ns(i), "-j", "-s", "link", "show", self.inside(i)).stdout)
        return int(links[0]["stats64"]["tx"]["bytes"])


class Tasks:
    """The processes of one configuration, each in its own session so that Kill() takes its children."""

    def __init__(self):
        self.procs = []  # (name, Popen, stdout path, stderr path)

    def Start(self, name, ns, argv, env, folder):
        out, err = os.path.join(folder, f"{name}.out"), os.path.join(folder, f"{name}.err")
        with open(out, "wb") as o, open(err, "wb") as e:
            p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], env=env, stdout=o, stderr=e,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append((name, p, out, err))

    def Wait(self, deadline, stop=None):
        """Exit codes by task name; a task still running at `deadline` (monotonic) is killed (code None),
        and one still running when `stop()` (asked twice a second) first says True is killed too (code
        "stopped")."""
        stopped = False
        while time.monotonic() < deadline and any(p.poll() is None for _, p, _, _ in self.procs):
            if stop is not None and stop():
                stopped = True
                break
            time.sleep(0.5)
        codes = {name: p.poll() for name, p, _, _ in self.procs}
        if stopped:
            codes = {name: "stopped" if c is None else c for name, c in codes.items()}
        self.Kill()
        return codes

    def Kill(self):
        for _, p, _, _ in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()

    def Paths(self, name):
        """(stdout, stderr) file of task `name`."""
        for n, _, out, err in self.procs:
            if n == name:
                return out, err
        raise KeyError(name)

    def Events(self, name):
        return events_of(self.Paths(name)[0])


def last_error(tasks, name):
    """The task's last error event's message, else its last line of output."""
    out, err = tasks.Paths(name)
    msgs = [e.get("message", "") for e in events_of(out) if e["event"] == "error"]
    lines = [line for line in (open(out, errors="replace").read() + open(err, errors="replace").read()).split("\n") if line.strip()]
    return (msgs[-1] if msgs else (lines[-1] if lines else "no output"))[:300]


def parse_compression(item):
    """--compression's item ("none", "fp16", "bf16", "topk[:RATIO]", "powersgd[:RANK]") as the job's
    update.compression value (docs/config.md, "Gradient compression"); ValueError naming what is wrong."""
    method, colon, arg = item.partition(":")
    if method in ("none", "fp16", "bf16"):
        if colon:
            raise ValueError(f"{item!r}: {method} takes no argument")
        return method
    if method == "topk":
        try:
            ratio = float(arg) if arg else 0.01
        except ValueError:
            raise ValueError(f"{item!r}: the ratio {arg!r} is not a number") from None
        if not 0 < ratio <= 1:
            raise ValueError(f"{item!r}: the ratio {ratio} is not in (0, 1]")
        return {"method": "topk", "ratio": ratio}
    if method == "powersgd":
        if arg and not arg.isdigit():
            raise ValueError(f"{item!r}: the rank {arg!r} is not an integer")
        rank = int(arg) if arg else 2
        if not 1 <= rank <= 1024:
            raise ValueError(f"{item!r}: the rank {rank} is not in [1, 1024]")
        return {"method": "powersgd", "rank": rank}
    raise ValueError(f"{item!r} is not none, fp16, bf16, topk[:RATIO] or powersgd[:RANK]")


def dnn_job(data, mode, epochs, hierarchical=None, compression="none", placement="balanced", bucket_kb=None):
    job = {"model": "dnn", "data": data, "epochs": epochs, "batch_size": 50,
           "optimizer": {"type": "momentum", "learning_rate": 0.01, "momentum": 0.95},
           "update": {"mode": mode}, "seed": 1, "log_every_steps": 0, "placement": placement}
    if bucket_kb is not None and mode == "allreduce":
        job["update"]["bucket_kb"] = bucket_kb
    if hierarchical is not None:
        job["update"]["hierarchical"] = {"true": True, "false": False}.get(hierarchical, hierarchical)
    if compression != "none":
        job["update"]["compression"] = parse_compression(compression)
    return job


def gradient_bytes(compression):
    """(bytes every member all-reduces, bytes each member contributes to an all-gather) of one step's
    gradient under `compression` (an item of --compression), payload only: the control floats and
    headers on top are left out, so this is a floor."""
    spec = parse_compression(compression)
    method = spec if isinstance(spec, str) else spec["method"]
    if method == "none":
        return 4 * DNN_FLOATS, 0
    if method in ("fp16", "bf16"):
        return 2 * DNN_FLOATS, 0
    if method == "topk":  # per tensor ceil(ratio x size) (u32 index, float32 value) pairs, as TopKCount
        sizes = [n * m for n, m in DNN_KERNELS] + DNN_BIASES
        return 0, 8 * sum(min(max(math.ceil(spec["ratio"] * size), 1), size) for size in sizes)
    r = spec["rank"]  # powersgd: P (n x r) and Q (m x r) where that is smaller, else the kernel whole
    floats = sum((n + m) * r if (n + m) * r < n * m else n * m for n, m in DNN_KERNELS) + sum(DNN_BIASES)
    return 4 * floats, 0


def ps_shares(placement, ps_hosts, total=DNN_FLOATS):
    """The floats each ps task holds under `placement` (balanced or by_host, as tfd's Place cuts
    them; round_robin and greedy depend on the variables: None), ps j on host ps_hosts[j]."""
    if placement == "balanced":
        return [total * (j + 1) // len(ps_hosts) - total * j // len(ps_hosts) for j in range(len(ps_hosts))]
    if placement != "by_host":
        return None
    hosts = list(dict.fromkeys(ps_hosts))  # in the order they first appear
    shares = [0] * len(ps_hosts)
    for h, host in enumerate(hosts):
        begin, length = total * h // len(hosts), total * (h + 1) // len(hosts) - total * h // len(hosts)
        on = [j for j, x in enumerate(ps_hosts) if x == host]
        for k, j in enumerate(on):
            shares[j] = length * (k + 1) // len(on) - length * k // len(on)
    return shares


def expected_bytes_per_step(mode, hosts, host, per_host=1, hierarchical=False, compression="none", ps_hosts=(0,),
                            placement="balanced"):
    """What host `host` must send per step of its workers, payload only (no headers): the floor the
    counters are checked against. Workers of one host talk inside it, off its veth. None where the
    arithmetic is not known (sync with round_robin or greedy)."""
    reduced, gathered = gradient_bytes(compression)
    if mode == "allreduce":
        # A ring over N members sends 2 (N - 1) / N of the buffer on each link: the workers' ring
        # leaves each host once (its workers are neighbours); the leaders' ring runs over the hosts.
        # An all-gather (topk) passes N - 1 members' parts along each link.
        n = hosts if hierarchical or per_host == 1 else hosts * per_host
        return 2 * (n - 1) * reduced // n + (n - 1) * gathered
    # sync: each worker pushes its (compressed) gradient to every ps task, each its share; each ps
    # task sends its share of the parameters, float32, to every worker; what stays inside a host
    # (a worker and a ps beside it, on a Unix socket) is off its veth.
    shares = ps_shares(placement, list(ps_hosts))
    if shares is None:
        return None
    here = sum(share for share, h in zip(shares, ps_hosts) if h == host) / DNN_FLOATS
    workers_here = per_host if host < hosts else 0
    pulls = 4 * DNN_FLOATS * here * (hosts * per_host - workers_here)
    return round(pulls + workers_here * (reduced + gathered) * (1 - here))


def worker_means(evs):
    """(samples/s, input, compute, update ms per step, steps) over the epochs after the first (the
    only one if there is one)."""
    epochs = [e for e in evs if e["event"] == "epoch"]
    if not epochs:
        return None
    steady = epochs[1:] or epochs
    prev = {e["epoch"]: e["local_step"] for e in epochs}
    steps = sum(e["local_step"] - prev.get(e["epoch"] - 1, 0) for e in steady)
    ms = lambda key: 1e3 * sum(e.get(key, 0.0) for e in steady) / max(steps, 1)  # noqa: E731
    return (sum(e["samples_per_sec"] for e in steady) / len(steady), ms("input_s"), ms("compute_s"),
            ms("update_s"), epochs[-1]["local_step"])


def peers_seen(tasks, n):
    """Each worker's final parameters' hash, and the address the ps saw each worker's connection
    come from (its worker_done events: "worker:1 (10.77.0.3:41234)", or "(local pid N)")."""
    seen = {"params_sha256": [next((e["params_sha256"] for e in tasks.Events(f"w{i}")
                                    if e["event"] == "done"), None) for i in range(n)]}
    if any(name == "ps0" for name, _, _, _ in tasks.procs):
        peers = {}
        for e in tasks.Events("ps0"):
            if e["event"] == "worker_done":
                task, _, where = e["peer"].partition(" (")
                peers[task] = where.rstrip(")").rsplit(":", 1)[0] if not where.startswith("local") else "local"
        seen["ps_peers"] = peers
    return seen


def seconds_to(evs, target, start_wall):
    for e in evs:
        if e["event"] == "epoch" and e.get("test_accuracy", 0) >= target:
            return e["ts"] - start_wall  # seconds since the Unix epoch
    return None


class Bench:
    def __init__(self, a, lab, work):
        self.a, self.lab, self.work = a, lab, work
        self.token = os.path.join(work, "token")
        with open(os.open(self.token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(secrets.token_hex(32))
        self.running = None

    def RunTfd(self, preset, mode, hierarchical=None, compression="none", placement="balanced"):
        """One tfd configuration on the shaped lab: its row as a dict."""
        a, lab, n, w = self.a, self.lab, self.a.hosts, self.a.workers_per_host
        cluster = {"worker": [f"{lab.address(i // w)}:{PORT + i % w}" for i in range(n * w)]}
        if mode == "sync":
            cluster["ps"] = [f"{lab.address(h)}:{PORT + w + j}" for j, h in enumerate(a.ps_hosts)]
        flags = ["--log-format", "json"] + (["--insecure"] if a.insecure else [])

        def start(tasks, folder):
            job = os.path.join(folder, "job.json")
            with open(job, "w") as f:
                json.dump(dnn_job(a.data, mode, a.epochs, hierarchical, compression, placement, a.bucket_kb), f)
            if mode == "sync":
                for j, h in enumerate(a.ps_hosts):
                    tasks.Start(f"ps{j}", lab.ns(h), [a.tfd, *flags], self.Env(cluster, "ps", j), folder)
            limit = ["--shard-limit", str(a.shard_limit)] if a.shard_limit and mode == "allreduce" else []
            for i in range(n * w):
                tasks.Start(f"w{i}", lab.ns(i // w), [a.tfd, *flags, "--job", job, *limit], self.Env(cluster, "worker", i), folder)

        row = {"peer": "tfd", "mode": mode, "compression": compression, "link": preset, "hosts": n,
               "workers_per_host": w, "addresses": [lab.address(i) for i in range(lab.hosts)]}
        if hierarchical is not None:
            row["hierarchical"] = hierarchical
        if mode == "sync":
            row["placement"], row["ps_hosts"] = placement, a.ps_hosts
        if mode == "sync" and compression.startswith("powersgd"):
            row["error"] = "skipped: powersgd is allreduce only"
            return row
        tasks = self.RunTasks(f"tfd-{mode}-{hierarchical or ''}-{compression.replace(':', '')}-{placement}-{preset}", start, row,
                              stop_at_target=a.stop_at_target)
        if "error" not in row:
            row.update(peers_seen(tasks, n * w))
            topo = next((e["topology"] for e in tasks.Events("w0") if e["event"] == "topology"), None)
            if topo is not None:
                row["topology"] = topo
            expected = [expected_bytes_per_step(mode, n, i, w, topo == "hierarchical", compression, a.ps_hosts, placement)
                        for i in range(lab.hosts)]
            if None not in expected:
                row["expected_bytes_per_step"] = expected
        return row

    def Env(self, cluster, kind, index):
        tf_config = {"cluster": cluster, "task": {"type": kind, "index": index}}
        if not self.a.insecure:
            tf_config["tfd"] = {"token_file": self.token}
        return {**os.environ, "TF_CONFIG": json.dumps(tf_config), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}

    def RunTasks(self, name, start, row, stop_at_target=False):
        """Starts one configuration's tasks (start(tasks, folder)), waits for them (with stop_at_target,
        only until the chief's test accuracy reaches --target), and fills `row` with what every peer's
        row has (or its "error"); the tasks, for more."""
        folder = os.path.join(self.work, name)
        for again in range(2, 1000):  # --rounds: the same configuration's later runs
            if not os.path.exists(folder):
                break
            folder = os.path.join(self.work, f"{name}-{again}")
        os.makedirs(folder)
        n, every = self.a.hosts, self.lab.hosts  # the workers' hosts; with the ps-only hosts
        before = [self.lab.TxBytes(i) for i in range(every)]
        tasks = self.running = Tasks()
        start_wall = time.time()
        start(tasks, folder)
        chief_name = next(name for name, _, _, _ in tasks.procs if name[0] in "wr")

        def reached():
            return seconds_to(tasks.Events(chief_name), self.a.target, start_wall) is not None
        codes = tasks.Wait(time.monotonic() + self.a.timeout, reached if stop_at_target else None)
        self.running = None
        sent = [self.lab.TxBytes(i) - before[i] for i in range(every)]
        row.update({"exit_codes": codes, "tx_bytes": sent})
        if "stopped" in codes.values():
            row["stopped_at_target"] = True
        failed = [k for k, c in codes.items() if c not in (0, "stopped")]
        if failed:
            how = "timed out" if codes[failed[0]] is None else f"exit {codes[failed[0]]}"
            row["error"] = f"{failed[0]} {how}: {last_error(tasks, failed[0])}"
            return tasks
        trainers = [name for name, _, _, _ in tasks.procs if name[0] in "wr"]  # workers or ranks, host order
        means = [worker_means(tasks.Events(t)) for t in trainers]
        if any(m is None for m in means):
            row["error"] = "a worker wrote no epoch events"
            return tasks
        chief = tasks.Events(trainers[0])
        row.update({
            "samples_per_sec": sum(m[0] for m in means),
            "input_ms": means[0][1], "compute_ms": means[0][2], "update_ms": means[0][3],
            "steps": [m[4] for m in means],
            "seconds_to_target": seconds_to(chief, self.a.target, start_wall),
            # From the start of the tasks to the chief's ready event: process start, data load, the
            # ring or the process group formed (included in seconds_to_target).
            "startup_s": next((e["ts"] - start_wall for e in chief if e["event"] == "ready"), None),
            "epochs_to_target": next((e["epoch"] for e in chief if e["event"] == "epoch"
                                      and e.get("test_accuracy", 0) >= self.a.target), None),
            "epochs": sum(1 for e in chief if e["event"] == "epoch"),
            "best_test_accuracy": max((e.get("test_accuracy", 0) for e in chief if e["event"] == "epoch"), default=0),
            # Per step of the host's first worker (every worker takes the same steps; a ps-only host:
            # per step of the first worker).
            "bytes_per_step": [sent[i] / max(means[i * len(means) // n if i < n else 0][4], 1) for i in range(every)],
        })
        return tasks

    def DdpSkipped(self, preset):
        """A row saying why the DDP peer cannot run here, or None."""
        row = {"peer": "ddp", "mode": "allreduce", "link": preset, "hosts": self.a.hosts}
        if self.a.workers_per_host > 1:
            row["error"] = "skipped: the DDP peer runs one rank per host"
            return row
        if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode != 0:
            row["error"] = "skipped: no torch"
            return row
        return None

    def RunDdpHook(self, preset, hook):
        a, lab, n = self.a, self.lab, self.a.hosts

        def start(tasks, folder):
            for i in range(n):
                tasks.Start(f"r{i}", lab.ns(i), [
                    "/usr/bin/python3", os.path.join(HERE, "torch_lab_peer.py"), "--rank", str(i), "--world", str(n),
                    "--master", f"{lab.address(0)}:{PORT}", "--iface", lab.inside(i), "--hook", hook,
                    "--data", a.data, "--epochs", str(a.epochs), "--target", str(a.target),
                    "--powersgd-rank", str(a.ddp_powersgd_rank)], dict(os.environ), folder)

        row = {"peer": "ddp", "hook": hook if hook != "powersgd" else f"powersgd:{a.ddp_powersgd_rank}",
               "mode": "allreduce", "link": preset, "hosts": n}
        self.RunTasks(f"ddp-{hook}-{preset}", start, row)
        return row


def better(r, best):
    """Sooner to the target wins; a run that reaches it beats one that does not; else more samples/s."""
    t, b = r.get("seconds_to_target"), best.get("seconds_to_target")
    if t is not None or b is not None:
        return b is None or (t is not None and t < b)
    return r["samples_per_sec"] > best["samples_per_sec"]


def mark_best(rows, link, peer):
    """Marks the best of `peer`'s rows on `link` ("best": true) and returns it (None if every one failed)."""
    best = None
    for r in rows:
        if r["link"] == link and r["peer"] == peer and "error" not in r and (best is None or better(r, best)):
            best = r
    if best is not None:
        best["best"] = True
    return best


def summary(rows, link, target):
    """Per link: each side's best, DDP's time to target over tfd's, and each best's samples/s against
    the same configuration unshaped."""
    tfd, ddp = mark_best(rows, link, "tfd"), mark_best(rows, link, "ddp")
    out = {"link": link, "tfd_best": tfd and row_name(tfd), "ddp_best": ddp and row_name(ddp)}
    if tfd and ddp and tfd.get("seconds_to_target") and ddp.get("seconds_to_target"):
        out["ddp_over_tfd_time_to_target"] = ddp["seconds_to_target"] / tfd["seconds_to_target"]
    for side, r in (("tfd", tfd), ("ddp", ddp)):
        unshaped = r and unshaped_rate(rows, r)
        if unshaped and link != "none":
            out[f"{side}_vs_unshaped"] = r["samples_per_sec"] / unshaped
    words = [f"@ {link}: best tfd: {out['tfd_best'] or '-'}; best ddp: {out['ddp_best'] or '-'}"]
    if "ddp_over_tfd_time_to_target" in out:
        words.append(f"ddp / tfd time to {target:.1%}: {out['ddp_over_tfd_time_to_target']:.2f}x")
    for side in ("tfd", "ddp"):
        if f"{side}_vs_unshaped" in out:
            words.append(f"{side} best's samples/s vs the same unshaped: {out[side + '_vs_unshaped']:.2f}x")
    print("summary " + "; ".join(words))
    sys.stdout.flush()
    return out


def print_header(a):
    print(f"dnn (784-160x5-10, elu), batch 50 per worker, momentum 0.01/0.95, {a.epochs} epochs, {a.hosts} hosts x "
          f"{a.workers_per_host} worker{'s' if a.workers_per_host > 1 else ''} "
          f"(sync: ps tasks on hosts {','.join(map(str, a.ps_hosts))}); samples/s: the workers' sum after the first epoch; to {a.target:.1%}: s from start;\n"
          "sent/step: KB each host's veth sent per step of its worker, mean and busiest host, beside the payload the mode must "
          "send (busiest host);\nper step, worker 0's clock (ms): input, compute, update (exchange + wait); wire: the busiest "
          "host's bytes at the link's rate")
    print(f"{'configuration':<44} {'samples/s':>9} {'vs none':>7} {'to ' + format(a.target, '.0%'):>7} "
          f"{'sent/step KB':>17} {'payload':>8}   {'input':>5} {'compute':>7} {'update':>6} {'wire':>5}")


def row_name(row):
    kind = f"gloo, hook {row['hook']}" if "hook" in row else row["mode"]
    if row.get("compression", "none") != "none":
        kind += f" {row['compression']}"
    if "hierarchical" in row:
        kind += f" hier={row['hierarchical']}" + (f" ({row['topology']})" if "topology" in row else "")
    if "placement" in row and (len(row["ps_hosts"]) > 1 or row["placement"] != "balanced"):
        kind += f" {row['placement']}"
    return f"{row['peer']} {kind} @ {row['link']}"


def print_row(row, unshaped):
    name = row_name(row)
    if "error" in row:
        print(f"{name:<44} {row['error']}")
        sys.stdout.flush()
        return
    ratio = f"{row['samples_per_sec'] / unshaped:.2f}x" if unshaped else "-"
    t = f"{row['seconds_to_target']:.1f}" if row.get("seconds_to_target") is not None else f"({row['best_test_accuracy']:.3f})"
    per = row["bytes_per_step"]
    sent = f"{sum(per) / len(per) / 1e3:8.0f} {max(per) / 1e3:8.0f}"
    payload = f"{max(row['expected_bytes_per_step']) / 1e3:8.0f}" if "expected_bytes_per_step" in row else f"{'-':>8}"
    rate = PRESETS[row["link"]][0]
    wire = f"{max(per) * 8 / rate * 1e3:5.2f}" if rate else f"{'-':>5}"
    print(f"{name:<44} {row['samples_per_sec']:9.0f} {ratio:>7} {t:>7} {sent} {payload}   {row['input_ms']:5.2f} "
          f"{row['compute_ms']:7.2f} {row['update_ms']:6.2f} {wire}")
    sys.stdout.flush()


def parse_args():
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--tfd", default=os.path.join(ROOT, "build", "daemon", "tfd"))
    p.add_argument("--data", default=os.environ.get("TFD_MNIST_DIR", os.path.join(ROOT, "data", "mnist")))
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--workers-per-host", type=int, default=1, help="allreduce and sync workers on each host")
    p.add_argument("--hierarchical", default=None,
                   help="allreduce: update.hierarchical settings to run, one row each (auto, true, false); default: the job's default")
    p.add_argument("--links", default="1g,10g,none", help="presets, in order: 1g, 10g, none")
    p.add_argument("--modes", default="allreduce,sync")
    p.add_argument("--ps-hosts", default="0", help="sync: the host of each ps task (indices, one per ps)")
    p.add_argument("--ps-only-hosts", type=int, default=0, help="hosts with ps tasks and no worker, after the workers' hosts")
    p.add_argument("--placements", default="balanced", help="sync: the job's placement settings to run, one row each")
    p.add_argument("--compression", default="none",
                   help="update.compression methods to run, one row each: none, fp16, bf16, topk[:RATIO], powersgd[:RANK]")
    p.add_argument("--bucket-kb", type=int, default=None, help="allreduce: the job's update.bucket_kb (default: the job's default)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--target", type=float, default=0.98)
    p.add_argument("--stop-at-target", action="store_true",
                   help="end a tfd configuration once its chief's test accuracy reaches --target")
    p.add_argument("--loss", type=float, default=0.0, help="percent of the packets arriving at each host dropped")
    p.add_argument("--shard-limit", type=int, default=0, help="allreduce: examples per worker and epoch (a short run)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds one configuration may take")
    p.add_argument("--rounds", type=int, default=1,
                   help="run each link's configurations this many times, in turn, and print each one's median (and, with "
                        "--hierarchical false,true, each round's ratio of the two)")
    p.add_argument("--insecure", action="store_true", help="tfd without a cluster token (no MAC on frames)")
    p.add_argument("--prefix", default="tfl")
    p.add_argument("--subnet", default="10.77.0", help="the hosts' /24, as A.B.C")
    p.add_argument("--report", help="write every row as JSON here")
    p.add_argument("--no-peer", action="store_true", help="leave PyTorch DDP out")
    p.add_argument("--hooks", default="none,fp16,powersgd", help="the DDP peer's communication hooks to run")
    p.add_argument("--ddp-powersgd-rank", type=int, default=2, help="the DDP peer's PowerSGD rank")
    p.add_argument("--clean", action="store_true", help="only remove what a run with --prefix left")
    a = p.parse_args()
    links, modes = a.links.split(","), a.modes.split(",")
    for link in links:
        if link not in PRESETS:
            p.error(f"--links: {link!r} is not a preset (1g, 10g, none)")
    for mode in modes:
        if mode not in ("allreduce", "sync"):
            p.error(f"--modes: {mode!r} is not allreduce or sync")
    if not 2 <= a.hosts <= 200:
        p.error(f"--hosts: {a.hosts} is not in [2, 200]")
    if not 1 <= a.workers_per_host <= 16:
        p.error(f"--workers-per-host: {a.workers_per_host} is not in [1, 16]")
    a.compression = a.compression.split(",")
    for c in a.compression:
        try:
            parse_compression(c)
        except ValueError as e:
            p.error(f"--compression: {e}")
    a.hooks = a.hooks.split(",")
    for hook in a.hooks:
        if hook not in ("none", "fp16", "powersgd"):
            p.error(f"--hooks: {hook!r} is not none, fp16 or powersgd")
    if not 1 <= a.ddp_powersgd_rank <= 1024:
        p.error(f"--ddp-powersgd-rank: {a.ddp_powersgd_rank} is not in [1, 1024]")
    a.hierarchical = a.hierarchical.split(",") if a.hierarchical else [None]
    for h in a.hierarchical:
        if h not in (None, "auto", "true", "false"):
            p.error(f"--hierarchical: {h!r} is not auto, true or false")
    if not 0 <= a.ps_only_hosts <= 16:
        p.error(f"--ps-only-hosts: {a.ps_only_hosts} is not in [0, 16]")
    try:
        a.ps_hosts = [int(h) for h in a.ps_hosts.split(",")]
    except ValueError:
        p.error(f"--ps-hosts: {a.ps_hosts!r} is not a list of host indices")
    for h in a.ps_hosts:
        if not 0 <= h < a.hosts + a.ps_only_hosts:
            p.error(f"--ps-hosts: host {h} is not in [0, {a.hosts + a.ps_only_hosts - 1}]")
    a.placements = a.placements.split(",")
    for placement in a.placements:
        if placement not in ("balanced", "round_robin", "greedy", "by_host"):
            p.error(f"--placements: {placement!r} is not balanced, round_robin, greedy or by_host")
    if not 0 <= a.loss < 100:
        p.error(f"--loss: {a.loss} is not a percentage in [0, 100)")
    if not 1 <= a.rounds <= 100:
        p.error(f"--rounds: {a.rounds} is not in [1, 100]")
    a.links, a.modes, a.data, a.tfd = links, modes, os.path.abspath(a.data), os.path.abspath(a.tfd)
    return a


def preflight(a):
    """Exit 77 where the lab cannot be built here, 2 for missing inputs."""
    if os.geteuid() != 0:
        print(f"skipped: {PROG} needs root for network namespaces (uid {os.geteuid()})")
        sys.exit(SKIP)
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            print(f"skipped: {tool} (iproute2) is not installed")
            sys.exit(SKIP)
    if a.clean:
        return
    if not os.access(a.tfd, os.X_OK):
        print(f"{PROG}: --tfd {a.tfd}: not an executable (cmake --build build --target tfd)", file=sys.stderr)
        sys.exit(2)
    if not os.path.exists(os.path.join(a.data, "train-images-idx3-ubyte")):
        print(f"{PROG}: --data {a.data}: no MNIST there (scripts/fetch_mnist.sh)", file=sys.stderr)
        sys.exit(2)


def run_all(a, lab, work):
    """Every configuration's row, and a summary per link."""
    bench = Bench(a, lab, work)
    rows, summaries, rounds = [], [], []
    try:
        lab.Up()
        if not lab.netem and any(PRESETS[link][1] > 0 for link in a.links):
            lab.notes.append("this kernel has no tc netem: delays not applied, rates only")
            print(f"{PROG}: {lab.notes[-1]}")
        print_header(a)
        # Unshaped first: every later row is compared with it.
        for link in sorted(a.links, key=lambda link: link != "none"):
            lab.Shape(link, a.loss)
            first = len(rows)
            for r in range(a.rounds):  # each round runs every configuration once, so a slow spell hits all alike
                for mode in a.modes:
                    for h in (a.hierarchical if mode == "allreduce" else [None]):
                        for c in a.compression:
                            for placement in (a.placements if mode == "sync" else ["balanced"]):
                                rows.append({**bench.RunTfd(link, mode, h, c, placement), "round": r})
                                print_row(rows[-1], unshaped_rate(rows, rows[-1]))
                if not a.no_peer:
                    skipped = bench.DdpSkipped(link)
                    for hook in ([] if skipped else a.hooks):
                        rows.append({**bench.RunDdpHook(link, hook), "round": r})
                        print_row(rows[-1], unshaped_rate(rows, rows[-1]))
                    if skipped and r == 0:
                        rows.append({**skipped, "round": r})
                        print_row(skipped, None)
            if a.rounds > 1:
                rounds.append(rounds_summary(rows[first:], link))
            summaries.append(summary(rows, link, a.target))
    finally:
        if bench.running is not None:
            bench.running.Kill()
    return rows, summaries, rounds


def rounds_summary(rows, link):
    """--rounds: each configuration's median samples/s over the rounds, and with hierarchical true and false
    (the same compression) each round's ratio of the two and their median."""
    out = {"link": link, "configurations": {}, "hierarchical_over_flat": {}}
    by_name = {}
    for r in rows:
        if "error" not in r:
            by_name.setdefault(row_name(r), []).append(r["samples_per_sec"])
    for name, rates in by_name.items():
        out["configurations"][name] = {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "rounds": len(rates)}
        print(f"rounds {name}: median {statistics.median(rates):.0f} samples/s, {min(rates):.0f} to {max(rates):.0f} over {len(rates)}")
    for c in sorted({r.get("compression", "none") for r in rows if r.get("hierarchical") == "true"}):
        pick = lambda h, rnd: next((x for x in rows if x.get("hierarchical") == h and x.get("compression", "none") == c
                                    and x["round"] == rnd and "error" not in x), None)
        ratios = [t["samples_per_sec"] / f["samples_per_sec"] for rnd in sorted({x["round"] for x in rows})
                  for t, f in [(pick("true", rnd), pick("false", rnd))] if t and f]
        if ratios:
            out["hierarchical_over_flat"][c] = ratios
            print(f"rounds @ {link}, {c}: hierarchical / flat samples/s per round: {' '.join(f'{x:.3f}' for x in ratios)}; "
                  f"median {statistics.median(ratios):.3f}x")
    sys.stdout.flush()
    return out


def unshaped_rate(rows, row):
    same = ("peer", "mode", "hierarchical", "compression", "hook", "placement", "round")
    for r in rows:
        if r["link"] == "none" and "error" not in r and all(r.get(k) == row.get(k) for k in same):
            return r["samples_per_sec"]
    return None


def main():
    a = parse_args()
    preflight(a)
    lab = Lab(a.prefix, a.hosts + a.ps_only_hosts, a.subnet)
    if a.clean:
        lab.Down()
        return 0

    def stop(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, stop)
    work = tempfile.mkdtemp(prefix="tfd-netlab-")
    code = 0
    try:
        rows, summaries, rounds = run_all(a, lab, work)
        if a.report:
            with open(a.report, "w") as f:
                json.dump({"rows": rows, "summaries": summaries, "rounds": rounds, "notes": lab.notes, "netem": lab.netem,
                           "loss_pct": a.loss}, f, indent=1)
        code = 1 if any("error" in r and not r["error"].startswith("skipped") for r in rows) else 0
    except LabError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; removing the lab", file=sys.stderr)
        code = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not stop the teardown
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        lab.Down()
        if not os.environ.get("NETLAB_KEEP"): shutil.rmtree(work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
