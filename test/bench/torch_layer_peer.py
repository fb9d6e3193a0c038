#!/usr/bin/python3
"""PyTorch peer of tfd_bench_layers: one layer's training forward + backward, timed per shape.

For each shape (NHWC as tfd writes it, N x H x W x C, or N x C for a dense layer's rows) it times
nn.BatchNorm2d (BatchNorm1d for rows) in train mode: forward, then backward of a fixed output
gradient, which computes the input's gradient and gamma's and beta's. Images are tried in both
memory formats (NCHW and channels_last); the faster is kept and named. Prints one JSON line per
shape. Run with Debian's /usr/bin/python3 (python3-torch).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_env  # noqa: E402  (before torch: sets the BLAS and OpenMP thread counts)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


def fail(msg):
    print(f"torch_layer_peer: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_shape(text):
    try:
        dims = [int(d) for d in text.split("x")]
    except ValueError:
        dims = []
    if len(dims) not in (2, 4) or min(dims) < 1:
        fail(f"--shapes: {text!r} is not NxHxWxC or NxC")
    return dims


def best_block_us(step, seconds, blocks=5):
    """The fastest of `blocks` blocks' mean time per step (µs), each block about seconds/blocks long,
    after a short warm-up: the same measurement tfd_bench_layers makes of tfd."""
    for _ in range(5):
        step()
    best = float("inf")
    for _ in range(blocks):
        n, start = 0, time.perf_counter()
        while True:
            step()
            n += 1
            elapsed = time.perf_counter() - start
            if n >= 3 and elapsed >= seconds / blocks:
                break
        best = min(best, elapsed / n * 1e6)
    return best


def time_batch_norm(dims, memory_format, seconds):
    gen = torch.Generator().manual_seed(1)
    if len(dims) == 4:
        n, h, w, c = dims
        bn = nn.BatchNorm2d(c, eps=1e-3, momentum=0.01)  # Keras' momentum 0.99, epsilon 1e-3
        x = torch.randn(n, c, h, w, generator=gen).contiguous(memory_format=memory_format)
        g = torch.randn(n, c, h, w, generator=gen).contiguous(memory_format=memory_format)
        bn = bn.to(memory_format=memory_format)
    else:
        n, c = dims
        bn = nn.BatchNorm1d(c, eps=1e-3, momentum=0.01)
        x = torch.randn(n, c, generator=gen)
        g = torch.randn(n, c, generator=gen)
    bn.train()
    x.requires_grad_(True)

    def step():
        x.grad = None
        bn.weight.grad = bn.bias.grad = None
        bn(x).backward(g)

    us = best_block_us(step, seconds)
    if len(dims) == 4 and not x.grad.is_contiguous(memory_format=memory_format):
        fail(f"the input's gradient came back in another memory format than {memory_format}")
    return us


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layer", required=True, choices=["batch_norm"])
    p.add_argument("--shapes", required=True, help="comma-separated NxHxWxC (NHWC) or NxC")
    p.add_argument("--seconds", type=float, default=1.0, help="per shape and memory format")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--flush-denormal", action="store_true", help="torch.set_flush_denormal(True): denormals as zero")
    a = p.parse_args()
    if a.threads < 1 or a.seconds <= 0:
        fail("--threads must be >= 1 and --seconds > 0")
    shapes = [parse_shape(s) for s in a.shapes.split(",")]

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    if a.flush_denormal:
        torch.set_flush_denormal(True)

    for dims in shapes:
        formats = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last} if len(dims) == 4 \
            else {"rows": torch.contiguous_format}
        per_format = {name: round(time_batch_norm(dims, f, a.seconds), 2) for name, f in formats.items()}
        kept = min(per_format, key=per_format.get)
        print(json.dumps({
            "layer": a.layer, "shape": "x".join(map(str, dims)), "threads": a.threads,
            "flush_denormal": a.flush_denormal, **peer_env.settings(), "torch": torch.__version__,
            "us": per_format[kept], "format": kept, "per_format": per_format,
        }), flush=True)


if __name__ == "__main__":
    main()
