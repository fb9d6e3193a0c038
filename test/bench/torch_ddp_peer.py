#!/usr/bin/python3
"""PyTorch DistributedDataParallel peer for the tfd benchmark harness.

Measures steady-state data-parallel training throughput on MNIST with N
processes (gloo backend, CPU) for the same model, per-rank batch and optimizer
as our trainer, plus the latency of a bare all-reduce the size of the mlp
gradient, and prints one JSON line. Reuses torch_peer.py's data loading, model
and optimizer definitions. Run with Debian's /usr/bin/python3 (python3-torch,
numpy).
"""
import argparse
import ctypes
import datetime
import json
import math
import os
import queue
import signal
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_env  # noqa: E402,F401  (before numpy and torch: sets the BLAS and OpenMP thread counts)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import torch_peer  # noqa: E402

PROG = "torch_ddp_peer"
ALLREDUCE_FLOATS = 79510  # mlp parameter count: 318,040 bytes of float32
ALLREDUCE_CALLS = 20
MIN_STEPS = 50
GRACE_SECONDS = 30  # hard limit is --seconds + this


class PeerError(Exception):
    pass


def _raise(msg):
    raise PeerError(msg)


# torch_peer's helpers report problems through torch_peer.fail, which prints
# and exits; raise instead so the parent and the ranks can report them their
# own way.
torch_peer.fail = _raise


def fail(msg, code=2):
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(code)


def one_line(s):
    return " ".join(str(s).split())


def load_data(path):
    images = torch_peer.read_idx(os.path.join(path, "train-images-idx3-ubyte"), 0x00000803)
    labels = torch_peer.read_idx(os.path.join(path, "train-labels-idx1-ubyte"), 0x00000801)
    if len(labels) != len(images):
        raise PeerError(f"{len(images)} images but {len(labels)} labels")
    return images, labels


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    """Ask the kernel to SIGKILL this process if the parent goes away."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if os.getppid() == 1:
        os._exit(1)


def finish(q, msg, code):
    """Hands msg to the parent and exits at once.

    Skips interpreter teardown on purpose: destroying the gloo process group
    (explicitly or through DDP's reducer when train()'s locals go away)
    sometimes hangs in torch 1.13, and there is nothing left to clean up.
    """
    q.put(msg)
    q.close()
    q.join_thread()
    sys.stdout.flush()
    os._exit(code)


def train(rank, a, port, q):
    """One rank's whole run; ends the process with a "done" message."""
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    if a.flush_denormal:
        torch.set_flush_denormal(True)

    images, labels = load_data(a.data)
    n = len(images)
    # Same fixed-seed shuffle as torch_peer; each rank takes a disjoint slice.
    idx = np.random.default_rng(0).permutation(n)[rank::a.ranks]
    m = len(idx)
    x_all = torch.from_numpy(images.reshape(n, -1)[idx].astype(np.float32) / 255.0)
    y_all = torch.from_numpy(labels[idx].astype(np.int64))
    del images, labels

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
        world_size=a.ranks, timeout=datetime.timedelta(seconds=30))

    torch.manual_seed(0)
    model = DDP(torch_peer.build_model(a.model))
    opt = torch_peer.build_optimizer(a.optimizer, model.parameters(), a.lr, a.momentum)
    step = torch_peer.make_step(model, opt, x_all, y_all, a.batch)

    t0 = time.perf_counter()
    for _ in range(a.warmup):
        step()
    warm = time.perf_counter() - t0

    # Rank 0 decides how many steps everyone runs, in chunks: the first from
    # the warmup rate, then more (from the measured rate, slightly short so as
    # not to overshoot) until both at least MIN_STEPS steps and --seconds have
    # passed. DDP's per-step all-reduce keeps the ranks in lock step, so rank
    # 0's clock stands for all of them; one tiny broadcast per chunk is
    # negligible.
    decision = torch.zeros(1, dtype=torch.int64)
    if rank == 0:
        if a.warmup > 0 and warm > 0:
            # Aim at half of --seconds: the warmup rate is only a rough guess.
            chunk = math.ceil(0.5 * a.seconds / (warm / a.warmup))
        else:
            chunk = MIN_STEPS
        decision[0] = max(MIN_STEPS, min(chunk, 10_000_000))
    dist.broadcast(decision, src=0)
    dist.barrier()

    steps = 0
    start = time.perf_counter()
    while True:
        for _ in range(int(decision[0])):
            step()
        steps += int(decision[0])
        if rank == 0:
            elapsed = time.perf_counter() - start
            if steps >= MIN_STEPS and elapsed >= a.seconds:
                decision[0] = 0
            else:
                per = elapsed / steps
                more = math.ceil(0.9 * (a.seconds - elapsed) / per) if per > 0 else 1
                decision[0] = max(1, MIN_STEPS - steps, min(more, 10_000_000))
        dist.broadcast(decision, src=0)
        if int(decision[0]) == 0:
            break
    dist.barrier()
    elapsed = time.perf_counter() - start

    # Bare all-reduce latency on an mlp-gradient-sized tensor.
    buf = torch.ones(ALLREDUCE_FLOATS, dtype=torch.float32)
    for _ in range(3):
        dist.all_reduce(buf)
    times = []
    for _ in range(ALLREDUCE_CALLS):
        t = time.perf_counter()
        dist.all_reduce(buf)
        times.append(time.perf_counter() - t)
    dist.barrier()

    if rank != 0:
        finish(q, ("done", rank, None), 0)
    finish(q, ("done", rank, {
        "model": a.model, "optimizer": a.optimizer, "batch": a.batch,
        "ranks": a.ranks, "threads": a.threads, "flush_denormal": a.flush_denormal, "steps": steps,
        "seconds": round(elapsed, 6),
        "samples_per_sec": round(steps * a.batch * a.ranks / elapsed, 1),
        "allreduce_ms_318kb": round(statistics.median(times) * 1e3, 3),
    }), 0)


def worker(rank, a, port, q):
    die_with_parent()
    # Errors travel to the parent through the queue; keep library noise
    # (gloo warnings, tracebacks) off the harness's stderr.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        train(rank, a, port, q)
        raise RuntimeError("train() returned")
    except BaseException as e:  # noqa: B902 - report everything, then exit 1
        msg = str(e) if isinstance(e, PeerError) else f"{type(e).__name__}: {e}"
        finish(q, ("error", rank, one_line(msg)), 1)


def stop_all(procs):
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + 2
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(1)


def root_cause(procs, done, error):
    """A rank killed by a signal makes its peers fail; blame it, not them."""
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        for r, p in enumerate(procs):
            if r not in done and p.exitcode is not None and p.exitcode < 0:
                return f"rank {r} killed by signal {-p.exitcode} ({error})"
        time.sleep(0.05)
    return error


def run(a, port):
    """Spawns the ranks; returns (result, None) or (None, error message)."""
    deadline = time.monotonic() + a.seconds + GRACE_SECONDS
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, port, q), daemon=True)
             for r in range(a.ranks)]

    def get(timeout):
        try:
            return q.get(timeout=timeout)
        except queue.Empty:
            return None

    try:
        for p in procs:
            p.start()
        result, done = None, set()
        while len(done) < a.ranks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, f"timed out after {a.seconds + GRACE_SECONDS:g} s"
            msg = get(min(0.2, remaining))
            if msg is not None:
                kind, rank, payload = msg
                if kind == "error":
                    return None, root_cause(procs, done, f"rank {rank}: {payload}")
                done.add(rank)
                if rank == 0:
                    result = payload
                continue
            dead = [r for r, p in enumerate(procs)
                    if p.exitcode is not None and r not in done]
            if dead:
                # Prefer a rank's own message, which may still be in flight.
                msg = get(1.0)
                if msg is not None and msg[0] == "error":
                    return None, f"rank {msg[1]}: {msg[2]}"
                if msg is not None:
                    done.add(msg[1])
                    if msg[1] == 0:
                        result = msg[2]
                    continue
                r = dead[0]
                return None, f"rank {r} exited with code {procs[r].exitcode} without reporting"
        # Every rank is past its last collective; let them exit on their own.
        end = time.monotonic() + 2
        for p in procs:
            p.join(max(0.0, end - time.monotonic()))
        return result, None
    finally:
        stop_all(procs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, choices=["softmax", "mlp", "dnn", "cnn"])
    p.add_argument("--optimizer", required=True, choices=["sgd", "momentum", "adam"])
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--momentum", type=float, default=0.95)
    p.add_argument("--batch", type=int, required=True, help="per rank")
    p.add_argument("--threads", type=int, default=1, help="per rank")
    p.add_argument("--data", required=True)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--flush-denormal", action="store_true", help="torch.set_flush_denormal(True) in every rank")
    p.add_argument("--port", type=int, default=0,
                   help="rendezvous port on 127.0.0.1 (default: a free one)")
    a = p.parse_args()
    if a.batch < 1 or a.threads < 1 or a.warmup < 0 or a.seconds < 0 or a.ranks < 1:
        fail("--batch, --threads and --ranks must be >= 1, --warmup and --seconds >= 0")
    if not 0 <= a.port <= 65535:
        fail(f"--port {a.port} out of range")

    # Check the data here so that bad input fails fast, before spawning.
    try:
        images, _ = load_data(a.data)
    except PeerError as e:
        fail(e)
    per_rank = len(images) // a.ranks
    del images
    if a.batch > per_rank:
        fail(f"--batch {a.batch} exceeds the {per_rank} examples per rank")

    port = a.port or free_port()
    if os.path.isdir("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

    # Let the harness stop us cleanly (children are torn down in run()).
    signal.signal(signal.SIGTERM, lambda *_: fail("terminated", 1))

    result, error = run(a, port)
    if error is not None:
        fail(error, 1)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
