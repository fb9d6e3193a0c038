#!/usr/bin/python3
"""PyTorch all-reduce peer for tfd_bench_allreduce.

Two (or --ranks) processes on 127.0.0.1 with the gloo backend time
dist.all_reduce (sum) of float32 buffers of the given sizes and print one JSON
line: {"backend": "gloo", "ranks": N, "results": [{"bytes": B, "us": median}]}.
Run with Debian's /usr/bin/python3 (python3-torch).
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_env  # noqa: E402,F401  (before torch: one BLAS and OpenMP thread per rank)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, a, port, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks, timeout=datetime.timedelta(seconds=60))
    results = []
    for nbytes in a.bytes:
        buf = torch.ones(nbytes // 4, dtype=torch.float32)
        for _ in range(3):
            dist.all_reduce(buf)
        times = []
        deadline = time.perf_counter() + a.seconds
        while len(times) < 10 or time.perf_counter() < deadline:
            dist.barrier()
            t = time.perf_counter()
            dist.all_reduce(buf)
            times.append(time.perf_counter() - t)
            # every rank takes the same number of calls: rank 0 decides
            flag = torch.tensor([1 if time.perf_counter() < deadline or len(times) < 10 else 0])
            dist.broadcast(flag, 0)
            if flag.item() == 0:
                break
        results.append({"bytes": nbytes, "us": round(statistics.median(times) * 1e6, 1), "calls": len(times)})
    dist.destroy_process_group()
    if rank == 0:
        q.put(results)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--seconds", type=float, default=1.0, help="per size")
    p.add_argument("bytes", type=int, nargs="+")
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=run, args=(r, a, port, q)) for r in range(a.ranks)]
    for pr in procs:
        pr.start()
    results = q.get(timeout=60 + a.seconds * len(a.bytes) * 4)
    for pr in procs:
        pr.join(30)
    print(json.dumps({"backend": "gloo", "ranks": a.ranks, "results": results}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
