#!/usr/bin/python3
"""PyTorch's time to accuracy on the residual convnet of configs/jobs/mnist-resnet.json.

One process, or DistributedDataParallel over --ranks processes (gloo, this host), training the
same network (torch_peer.py's ResNet: its batch norms with tfd's momentum and epsilon) with the
same global batch, Adam and learning-rate schedule (linear warm-up, then cosine decay, as tfd's
optim::LearningRate) as a tfd job given with --job (its "train" section when it is a cluster file).
Holds out the job's validation_split (the last training examples, as tfd does), evaluates it and the
test set after every epoch, and stops when the validation accuracy reaches the job's
stop_at_accuracy (the test set is reported, never used to stop). Prints one JSON line per epoch
and a last one with the seconds from start (torch's import and the data's loading included).

    /usr/bin/python3 test/bench/torch_resnet_time.py --job JOB.json --data data/mnist --workers 2 \
        [--ranks 1|2] [--threads 1]

--workers: the tfd workers the job's batch_size is per (the global batch is their product).
"""
import argparse
import datetime
import json
import math
import os
import socket
import sys
import time

START = time.monotonic()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_env  # noqa: E402  (before numpy and torch: sets the BLAS and OpenMP thread counts)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_peer  # noqa: E402
from torch_peer import fail, read_idx  # noqa: E402


def learning_rate(opt, step):
    """tfd's optim::LearningRate for a constant or cosine_decay rate with warmup_steps."""
    lr = opt["learning_rate"]
    if not isinstance(lr, dict):
        return lr
    if lr.get("schedule") != "cosine_decay":
        fail(f"learning_rate schedule {lr.get('schedule')!r}: only cosine_decay is mirrored here")
    warm = lr.get("warmup_steps", 0)
    if warm > 0 and step < warm:
        return lr["initial"] * (step + 1) / warm
    done = min(step - warm, lr["decay_steps"]) / lr["decay_steps"]
    alpha = lr.get("alpha", 0.0)
    return lr["initial"] * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * done)) + alpha)


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        hits = sum(int((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum()) for i in range(0, len(x), 1000))
    model.train()
    return hits / len(x)


def run(rank, a, job, port):
    torch.set_num_threads(a.threads)
    if a.ranks > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks,
                                timeout=datetime.timedelta(seconds=120))
    x = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte"), 0x803).reshape(-1, 784).astype(np.float32) / 255)
    y = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte"), 0x801).astype(np.int64))
    held = job["validation_split"]
    x_val, y_val, x, y = x[-held:], y[-held:], x[:-held], y[:-held]
    x_test = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-images-idx3-ubyte"), 0x803).reshape(-1, 784).astype(np.float32) / 255)
    y_test = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte"), 0x801).astype(np.int64))
    torch.manual_seed(job.get("seed", 1))
    model = torch_peer.build_model("resnet")
    net = torch.nn.parallel.DistributedDataParallel(model) if a.ranks > 1 else model
    opt = job["optimizer"]
    adam = torch.optim.Adam(model.parameters(), lr=learning_rate(opt, 0), betas=(opt.get("beta1", 0.9), opt.get("beta2", 0.999)),
                            eps=opt.get("epsilon", 1e-7))
    global_batch = job["batch_size"] * a.workers
    batch = global_batch // a.ranks
    steps = len(x) // global_batch
    step, target = 0, job.get("stop_at_accuracy", 1.0)
    for epoch in range(1, job["epochs"] + 1):
        order = torch.from_numpy(np.random.default_rng(epoch).permutation(len(x)))
        began = time.monotonic()
        for s in range(steps):
            rows = order[s * global_batch + rank * batch:s * global_batch + (rank + 1) * batch]
            for g in adam.param_groups:
                g["lr"] = learning_rate(opt, step)
            adam.zero_grad()
            F.cross_entropy(net(x[rows]), y[rows]).backward()
            adam.step()
            step += 1
        stop = torch.zeros(1)
        if rank == 0:
            val, test = accuracy(model, x_val, y_val), accuracy(model, x_test, y_test)
            print(json.dumps({"epoch": epoch, "val_accuracy": val, "test_accuracy": test, "epoch_s": time.monotonic() - began,
                              "seconds": time.monotonic() - START}), flush=True)
            stop[0] = 1.0 if val >= target else 0.0
        if a.ranks > 1:
            dist.broadcast(stop, src=0)
        if stop[0] > 0:
            break
    if rank == 0:
        print(json.dumps({"done": True, "ranks": a.ranks, "threads": a.threads, "epochs": epoch, "seconds": time.monotonic() - START}),
              flush=True)
    if a.ranks > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(prog="torch_resnet_time", description=__doc__.split("\n")[0])
    p.add_argument("--job", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--workers", type=int, default=2, help="the tfd workers the job's batch_size is per")
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="per rank")
    a = p.parse_args()
    with open(a.job) as f:
        job = json.load(f)
    job = job.get("train", job)
    if (job["batch_size"] * a.workers) % a.ranks != 0:
        fail(f"a global batch of {job['batch_size'] * a.workers} does not split over {a.ranks} ranks")
    if a.ranks == 1:
        run(0, a, job, 0)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(a, job, port), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()
