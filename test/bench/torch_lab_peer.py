#!/usr/bin/python3
"""One rank of PyTorch DistributedDataParallel (gloo, CPU) for netlab.py, the lab harness: the seed's
dnn (784-160x5-10, ELU) on MNIST, batch 50 per rank, SGD momentum 0.01/0.95 (TensorFlow's momentum
update, as tfd's), each rank on every world-th example after a seeded shuffle, reshuffled each epoch.

  torch_lab_peer.py --rank R --world N --master ADDR:PORT --iface IF --hook none|fp16|powersgd
                    --data DIR [--epochs 20] [--target 0.98] [--threads 1] [--init he_normal|torch]

The weights start as tfd's dnn starts (--init he_normal, the default): every kernel Keras'
he_normal (a normal truncated at two standard deviations, stddev sqrt(2 / fan_in) / 0.8796), every
bias zero, drawn from torch.manual_seed(1) (DDP then broadcasts rank 0's). --init torch keeps
PyTorch's own nn.Linear initialisation (kaiming_uniform with a = sqrt(5), uniform biases).

netlab.py starts one rank per host (`ip netns exec`), rank 0's host being the master, and keeps the
hook that reaches --target soonest. Hooks: none (DDP's bucketed all-reduce in float32),
fp16 (default_hooks.fp16_compress_hook: halves the bytes), powersgd (powerSGD_hook, Vogels et al.
2019: rank --powersgd-rank, error feedback and warm start, plain all-reduce for the first
--powersgd-start steps as PyTorch advises). Stops after the epoch where rank 0's test accuracy
reaches --target (every rank learns it by a broadcast).

Prints tfd's event lines on stdout, so netlab.py reads both peers alike: `epoch` (epoch,
local_step, samples_per_sec, input_s: slicing batches, compute_s: forward and backward, which in
DDP includes the gradients' all-reduce it overlaps with backward, update_s: the optimizer;
test_accuracy on rank 0) and `done`. Thread counts (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS) come
from --threads through peer_env before torch loads. Run with Debian's /usr/bin/python3
(python3-torch: scripts/setup --bench).
"""
import argparse
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_env  # noqa: E402,F401  (before numpy and torch: sets the BLAS and OpenMP thread counts)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import torch_peer  # noqa: E402

BATCH = 50


def emit(rank, event, **fields):
    print(json.dumps({"ts": time.time(), "task": f"rank:{rank}", "event": event, **fields}), flush=True)


def load(data, train):
    prefix = "train" if train else "t10k"
    x = torch_peer.read_idx(os.path.join(data, f"{prefix}-images-idx3-ubyte"), 0x00000803)
    y = torch_peer.read_idx(os.path.join(data, f"{prefix}-labels-idx1-ubyte"), 0x00000801)
    return torch.from_numpy(x.reshape(len(x), -1).astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


def he_normal_(model):
    """Keras' he_normal on every nn.Linear's weight (fan_in = in_features), zero biases."""
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, torch.nn.Linear):
                std = (2.0 / layer.in_features) ** 0.5 / 0.87962566103423978
                torch.nn.init.trunc_normal_(layer.weight, mean=0.0, std=std, a=-2 * std, b=2 * std)
                torch.nn.init.zeros_(layer.bias)
    return model


def attach_hook(model, a):
    if a.hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif a.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=a.powersgd_rank,
                                            start_powerSGD_iter=a.powersgd_start, use_error_feedback=True,
                                            warm_start=True)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def accuracy(model, x, y):
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def train_epoch(model, opt, x, y, order):
    """One pass over `order` in batches of BATCH (the short tail dropped); seconds spent per part."""
    t = {"input_s": 0.0, "compute_s": 0.0, "update_s": 0.0}
    steps = 0
    for pos in range(0, len(order) - BATCH + 1, BATCH):
        t0 = time.perf_counter()
        idx = order[pos:pos + BATCH]
        xb, yb = x[idx], y[idx]
        t1 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()  # DDP all-reduces the buckets during backward
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        t["input_s"] += t1 - t0
        t["compute_s"] += t2 - t1
        t["update_s"] += t3 - t2
        steps += 1
    return steps, t


def run(a):
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    x, y = load(a.data, True)
    x_test, y_test = load(a.data, False) if a.rank == 0 else (None, None)
    os.environ["GLOO_SOCKET_IFNAME"] = a.iface
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}", rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(1)
    module = torch_peer.build_model("dnn")
    if a.init == "he_normal":
        he_normal_(module)
    model = DDP(module)
    attach_hook(model, a)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.95)
    emit(a.rank, "ready", hook=a.hook, init=a.init)
    local_step, stop = 0, torch.zeros(1)
    for epoch in range(1, a.epochs + 1):
        order = torch.from_numpy(np.random.default_rng(epoch).permutation(len(x))[a.rank::a.world])
        start = time.perf_counter()
        steps, parts = train_epoch(model, opt, x, y, order)
        elapsed = time.perf_counter() - start
        local_step += steps
        fields = {"epoch": epoch, "local_step": local_step, "samples_per_sec": steps * BATCH / elapsed, "epoch_s": elapsed, **parts}
        if a.rank == 0:
            fields["test_accuracy"] = accuracy(model.module, x_test, y_test)
            stop[0] = 1.0 if fields["test_accuracy"] >= a.target else 0.0
        emit(a.rank, "epoch", **fields)
        dist.broadcast(stop, src=0)
        if stop[0] > 0:
            break
    emit(a.rank, "done", local_step=local_step)


def main():
    p = argparse.ArgumentParser(prog="torch_lab_peer", description=__doc__.split("\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True, help="rank 0's ADDR:PORT")
    p.add_argument("--iface", required=True, help="the interface gloo uses (GLOO_SOCKET_IFNAME)")
    p.add_argument("--hook", choices=("none", "fp16", "powersgd"), default="none")
    p.add_argument("--powersgd-rank", type=int, default=2)
    p.add_argument("--powersgd-start", type=int, default=100, help="steps of plain all-reduce before PowerSGD")
    p.add_argument("--data", required=True)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--target", type=float, default=0.98)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--init", choices=("he_normal", "torch"), default="he_normal",
                   help="he_normal: tfd's dnn's initialisation (the default); torch: PyTorch's own")
    a = p.parse_args()
    if not 0 <= a.rank < a.world:
        p.error(f"--rank {a.rank} is not in [0, --world {a.world})")
    code = 0
    try:
        run(a)
    except Exception as e:  # noqa: B902 - one line for netlab.py's table, then exit 1
        emit(a.rank, "error", message=" ".join(f"{type(e).__name__}: {e}".split()))
        code = 1
    # Skips interpreter teardown, as torch_ddp_peer.py does: destroying gloo's process group at exit
    # aborts in torch 1.13 ("terminate called without an active exception") once a peer has gone.
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
