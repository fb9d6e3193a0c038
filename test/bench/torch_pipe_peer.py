"""PyTorch's own pipeline (torch.distributed.pipeline.sync.Pipe) on the dnn, the peer of tfd_bench_pipeline.

Pipe (PyTorch 1.13, Debian's python3-torch) runs every partition in one process and moves the
micro-batches ("chunks") between them; each partition sits on a device, and on a CPU-only machine
every partition is on "cpu". The dnn (5 x 160 ELU, momentum 0.01/0.95, batch 200, as
tfd_bench_pipeline) is cut into two partitions before Linear layer --boundary; the same model
unsplit (plain nn.Sequential) is measured beside it in the same process, so the printed ratio is
Pipe's cost or gain over one process. One JSON line per configuration.

Usage: torch_pipe_peer.py --data DIR [--threads N] [--boundary K] [--chunks 1,4,8] [--seconds S]
"""
import peer_env  # noqa: F401  (first: sets the BLAS/OpenMP thread counts before torch loads)

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed.rpc as rpc
from torch.distributed.pipeline.sync import Pipe

from torch_peer import read_idx, wrapping_batches


def fail(msg):
    print(f"torch_pipe_peer: {msg}", file=sys.stderr)
    sys.exit(2)


def dnn_layers():
    layers, width = [], 784
    for _ in range(5):
        layers += [nn.Linear(width, 160), nn.ELU()]
        width = 160
    return layers + [nn.Linear(160, 10)]


def measure(model, forward, x_all, y_all, batch, seconds, warmup=10):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.95)
    batches, steps = wrapping_batches(x_all, y_all, batch), 0

    def step():
        x, y = next(batches)
        opt.zero_grad()
        F.cross_entropy(forward(x), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    while True:
        step()
        steps += 1
        elapsed = time.perf_counter() - start
        if steps >= 30 and elapsed >= seconds:
            return steps * batch / elapsed


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--boundary", type=int, default=1, help="index of the first Linear layer of partition 1 (1..5)")
    p.add_argument("--chunks", default="1,4,8")
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--seconds", type=float, default=3.0)
    a = p.parse_args()
    if not 1 <= a.boundary <= 5:
        fail(f"--boundary must be in 1..5, got {a.boundary}")
    try:
        chunks = [int(c) for c in a.chunks.split(",")]
    except ValueError:
        fail(f"--chunks: expected numbers separated by commas, got {a.chunks!r}")
    if any(c < 1 or a.batch % c for c in chunks):
        fail(f"--chunks: each must be >= 1 and divide --batch {a.batch}")
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)

    images = read_idx(os.path.join(a.data, "train-images-idx3-ubyte"), 0x00000803)
    labels = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte"), 0x00000801)
    n = len(images)
    perm = np.random.default_rng(0).permutation(n)
    x_all = torch.from_numpy(images.reshape(n, -1)[perm].astype(np.float32) / 255.0)
    y_all = torch.from_numpy(labels[perm].astype(np.int64))

    # Pipe needs the RPC framework, even in one process: a world of one, over a file rendezvous.
    with tempfile.TemporaryDirectory() as tmp:
        opts = rpc.TensorPipeRpcBackendOptions(init_method=f"file://{tmp}/rendezvous")
        rpc.init_rpc("peer", rank=0, world_size=1, rpc_backend_options=opts)
        try:
            torch.manual_seed(0)
            plain = nn.Sequential(*dnn_layers())
            base = measure(plain, plain, x_all, y_all, a.batch, a.seconds)
            common = {"model": "dnn", "batch": a.batch, "threads": a.threads, **peer_env.settings()}
            print(json.dumps({**common, "config": "one process (nn.Sequential)", "samples_per_sec": round(base, 1)}))
            cut = 2 * a.boundary  # each hidden Linear is followed by its ELU
            for m in chunks:
                torch.manual_seed(0)
                layers = dnn_layers()
                model = Pipe(nn.Sequential(nn.Sequential(*layers[:cut]), nn.Sequential(*layers[cut:])), chunks=m)
                sps = measure(model, lambda x, model=model: model(x).local_value(), x_all, y_all, a.batch, a.seconds)
                print(json.dumps({**common, "config": f"Pipe, 2 partitions on cpu, boundary {a.boundary}, chunks {m}",
                                  "samples_per_sec": round(sps, 1), "ratio": round(sps / base, 3)}))
        finally:
            rpc.shutdown()


if __name__ == "__main__":
    main()
