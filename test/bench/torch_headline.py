#!/usr/bin/python3
"""PyTorch's single process on the headline job (configs/jobs/mnist-dnn-headline.json).

The same network (5 x 160 ELU, He-normal init, dropout after each hidden layer), global batch (the
job's batch_size times the workers the allreduce averages), optimizer (SGD, Nesterov momentum) and
schedule (linear warm-up, then cosine decay, in the same steps), read from the job file;
holds out the job's validation_split (the last examples of the training set, as tfd does),
evaluates it and the test set after every epoch and stops when the validation accuracy reaches the
job's stop_at_accuracy, as tfd does (the test set is reported, never used to stop).
Prints one JSON line: epochs, validation and test accuracy, seconds from start (data loading
included) to stop.

    /usr/bin/python3 test/bench/torch_headline.py --job configs/jobs/mnist-dnn-headline.json \
        --data data/mnist [--threads 1]
"""
import argparse
import json
import math
import os
import sys
import time

START = time.monotonic()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_env  # noqa: E402  (before numpy and torch: sets the BLAS and OpenMP thread counts)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torch_peer import fail, read_idx  # noqa: E402


def build(layers):
    mods, width = [], 784
    for layer in layers:
        if layer["type"] == "dense":
            lin = nn.Linear(width, layer["units"])
            nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")  # He normal: std sqrt(2 / fan_in)
            nn.init.zeros_(lin.bias)
            mods.append(lin)
            if layer.get("activation") == "elu":
                mods.append(nn.ELU())
            width = layer["units"]
        elif layer["type"] == "dropout":
            mods.append(nn.Dropout(layer["rate"]))
        else:
            fail(f"layer type {layer['type']!r} is not in the headline job's vocabulary")
    return nn.Sequential(*mods)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--job", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workers", type=int, default=2,
                   help="tfd workers the job runs on: allreduce averages their batches, so one process steps on "
                        "batch_size x workers examples and the schedule's steps match (default 2, configs/headline.json)")
    a = p.parse_args()
    job = json.load(open(a.job))
    torch.set_num_threads(a.threads)
    torch.manual_seed(job.get("seed", 1))
    x = torch.from_numpy(read_idx(f"{a.data}/train-images-idx3-ubyte", 0x803).reshape(-1, 784).astype("float32") / 255)
    y = torch.from_numpy(read_idx(f"{a.data}/train-labels-idx1-ubyte", 0x801).astype("int64"))
    tx = torch.from_numpy(read_idx(f"{a.data}/t10k-images-idx3-ubyte", 0x803).reshape(-1, 784).astype("float32") / 255)
    ty = torch.from_numpy(read_idx(f"{a.data}/t10k-labels-idx1-ubyte", 0x801).astype("int64"))
    held = job.get("validation_split", 0)
    held = held if isinstance(held, int) else int(len(x) * held)
    if held < 1:
        fail("the job has no validation_split: stop_at_accuracy stops on the validation accuracy")
    vx, vy, x, y = x[-held:], y[-held:], x[:-held], y[:-held]
    model = build(job["model"]["layers"])
    o = job["optimizer"]
    lr = o["learning_rate"]
    opt = torch.optim.SGD(model.parameters(), lr=lr["initial"], momentum=o["momentum"], nesterov=o.get("use_nesterov", False))
    warm, decay = lr.get("warmup_steps", 0), lr["decay_steps"]

    def rate(step):
        if step < warm:
            return (step + 1) / warm
        s = min(step - warm, decay)
        return 0.5 * (1 + math.cos(math.pi * s / decay))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, rate)
    batch, target = job["batch_size"] * a.workers, job.get("stop_at_accuracy", 1.0)
    acc, test_acc, epoch = 0.0, 0.0, 0
    for epoch in range(1, job["epochs"] + 1):
        model.train()
        perm = torch.randperm(len(x))
        for i in range(0, len(x) - batch + 1, batch):
            idx = perm[i:i + batch]
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            sched.step()
        model.eval()
        with torch.no_grad():
            acc = (model(vx).argmax(1) == vy).float().mean().item()
            test_acc = (model(tx).argmax(1) == ty).float().mean().item()
        if acc >= target:
            break
    print(json.dumps({"peer": "pytorch", "threads": a.threads, "batch": batch, **peer_env.settings(), "epochs": epoch,
                      "val_accuracy": round(acc, 4), "test_accuracy": round(test_acc, 4),
                      "seconds": round(time.monotonic() - START, 2), "reached": acc >= target}))


if __name__ == "__main__":
    main()
