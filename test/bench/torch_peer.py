#!/usr/bin/python3
"""PyTorch peer for the tfd benchmark harness.

Measures steady-state single-process training throughput on MNIST for the
same model, batch and optimizer as our trainer, and prints one JSON line.
Run with Debian's /usr/bin/python3 (python3-torch, numpy).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_env  # noqa: E402  (before numpy and torch: sets the BLAS and OpenMP thread counts)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def fail(msg):
    print(f"torch_peer: {msg}", file=sys.stderr)
    sys.exit(2)


def read_idx(path, magic):
    """Read a big-endian IDX file and return its payload as a uint8 array."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    ndim = magic & 0xFF
    hdr = 4 + 4 * ndim
    if len(raw) < hdr or int.from_bytes(raw[:4], "big") != magic:
        fail(f"{path}: not an IDX file with magic 0x{magic:08x}")
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    if len(raw) - hdr != int(np.prod(dims)):
        fail(f"{path}: size does not match header dims {dims}")
    return np.frombuffer(raw, np.uint8, offset=hdr).reshape(dims)


def batch_norm(channels):
    # Keras' BatchNormalization(momentum=0.9, epsilon=1e-3) as the job writes it: PyTorch's momentum
    # is the new batch's weight, 1 - Keras' momentum.
    return nn.BatchNorm2d(channels, eps=1e-3, momentum=0.1)


class Block(nn.Module):
    """tfd's `residual` block: conv (relu) -> batch_norm -> conv -> batch_norm, added to the input
    (through a 1x1 strided convolution with bias where the shape changes), then relu."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride=stride, padding=1), nn.ReLU(), batch_norm(cout),
            nn.Conv2d(cout, cout, 3, padding=1), batch_norm(cout))
        self.projection = nn.Conv2d(cin, cout, 1, stride=stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        shortcut = x if self.projection is None else self.projection(x)
        return torch.relu(self.body(x) + shortcut)


class ResNet(nn.Module):
    """configs/jobs/mnist-resnet.json (padding=1 for TensorFlow's "same": the same shapes and work)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Unflatten(1, (1, 28, 28)),
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), batch_norm(16),
            Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)


def build_model(name):
    if name == "softmax":
        return nn.Linear(784, 10)
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 100), nn.Sigmoid(), nn.Linear(100, 10))
    if name == "dnn":
        layers, width = [], 784
        for _ in range(5):
            layers += [nn.Linear(width, 160), nn.ELU()]
            width = 160
        return nn.Sequential(*layers, nn.Linear(160, 10))
    if name == "strided":
        # configs/jobs/mnist-convnet-strided.json. PyTorch has no padding="same" with a stride; padding=1
        # gives the same 14x14 and 7x7 shapes and work (TensorFlow pads the odd cell after instead).
        return nn.Sequential(
            nn.Unflatten(1, (1, 28, 28)),
            nn.Conv2d(1, 16, 3, padding="same"), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    if name == "resnet":
        return ResNet()
    # cnn
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(32 * 13 * 13, 64), nn.ReLU(), nn.Linear(64, 10))


def wrapping_batches(x_all, y_all, batch):
    """Consecutive batches for ever, wrapping around (a short tail dropped), as every peer steps."""
    n = len(x_all)
    if not 0 < batch <= n:
        raise ValueError(f"batch {batch} is not within the {n} examples")
    while True:
        for pos in range(0, n - batch + 1, batch):
            yield x_all[pos:pos + batch], y_all[pos:pos + batch]


def make_step(model, opt, x_all, y_all, batch, device="cpu"):
    """One training step per call over consecutive batches, wrapping around (short tail dropped).
    On a GPU each batch is copied in from pinned host memory, as tfd does."""
    batches = wrapping_batches(x_all, y_all, batch)

    def step():
        x, y = next(batches)
        if device != "cpu":
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def make_graph_step(model, opt, x_all, y_all, batch, device):
    """The whole step (forward, backward, optimizer) captured once as a CUDA graph and replayed, as
    torch.cuda.graphs' "whole network capture" shows; each batch copied into static inputs."""
    static_x = torch.zeros((batch,) + tuple(x_all.shape[1:]), device=device)
    static_y = torch.zeros(batch, dtype=torch.int64, device=device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream before capture
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(static_x), static_y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        F.cross_entropy(model(static_x), static_y).backward()
        opt.step()
    batches = wrapping_batches(x_all, y_all, batch)

    def step():
        x, y = next(batches)
        static_x.copy_(x, non_blocking=True)
        static_y.copy_(y, non_blocking=True)
        graph.replay()
    return step


def build_optimizer(name, params, lr, momentum, capturable=False):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=momentum)
    if capturable:
        return torch.optim.Adam(params, lr=lr, eps=1e-7, capturable=True)
    return torch.optim.Adam(params, lr=lr, eps=1e-7)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, choices=["softmax", "mlp", "dnn", "cnn", "strided", "resnet"])
    p.add_argument("--optimizer", required=True, choices=["sgd", "momentum", "adam"])
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--momentum", type=float, default=0.95)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data", required=True)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--flush-denormal", action="store_true", help="torch.set_flush_denormal(True): denormals as zero")
    p.add_argument("--device", default="cpu", help="cpu or cuda:N")
    p.add_argument("--cuda-graph", action="store_true", help="on a GPU: capture the whole step as a CUDA graph")
    a = p.parse_args()
    if a.device != "cpu" and not torch.cuda.is_available():
        fail(f"--device {a.device}: this torch sees no CUDA device")
    if a.cuda_graph and a.device == "cpu":
        fail("--cuda-graph needs --device cuda:N")
    if a.batch < 1 or a.threads < 1 or a.warmup < 0 or a.seconds < 0:
        fail("--batch and --threads must be >= 1, --warmup and --seconds >= 0")

    # Set thread counts before any parallel work happens.
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    if a.flush_denormal:
        torch.set_flush_denormal(True)

    images = read_idx(os.path.join(a.data, "train-images-idx3-ubyte"), 0x00000803)
    labels = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte"), 0x00000801)
    n = len(images)
    if len(labels) != n:
        fail(f"{n} images but {len(labels)} labels")
    if a.batch > n:
        fail(f"--batch {a.batch} exceeds {n} examples")

    # Convert once and shuffle once with a fixed seed.
    perm = np.random.default_rng(0).permutation(n)
    x_all = torch.from_numpy(images.reshape(n, -1)[perm].astype(np.float32) / 255.0)
    y_all = torch.from_numpy(labels[perm].astype(np.int64))

    torch.manual_seed(0)
    model = build_model(a.model).to(a.device)
    opt = build_optimizer(a.optimizer, model.parameters(), a.lr, a.momentum, capturable=a.cuda_graph)
    if a.device != "cpu":
        x_all, y_all = x_all.pin_memory(), y_all.pin_memory()
    if a.cuda_graph:
        step = make_graph_step(model, opt, x_all, y_all, a.batch, a.device)
    else:
        step = make_step(model, opt, x_all, y_all, a.batch, a.device)

    def sync():
        if a.device != "cpu":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    sync()

    steps = 0
    start = time.perf_counter()
    while True:
        step()
        steps += 1
        if steps % 50 == 0:
            sync()  # the clock counts finished steps, not queued ones
        elapsed = time.perf_counter() - start
        if steps >= 50 and elapsed >= a.seconds:
            break
    sync()
    elapsed = time.perf_counter() - start

    print(json.dumps({
        "model": a.model, "optimizer": a.optimizer, "batch": a.batch,
        "threads": a.threads, "flush_denormal": a.flush_denormal, "device": a.device, "cuda_graph": a.cuda_graph,
        **peer_env.settings(), "steps": steps, "seconds": round(elapsed, 6),
        "samples_per_sec": round(steps * a.batch / elapsed, 1),
    }))


if __name__ == "__main__":
    main()
