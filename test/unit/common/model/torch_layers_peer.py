#!/usr/bin/python3
"""PyTorch peer of torch_layers_test.cc: rebuilds each case's tfd model in PyTorch with tfd's weights.

Usage: torch_layers_peer.py CASES.json VERDICT.json

For each case (the model spec JSON, the input batch, every variable by its Keras name, and what tfd
computed) this runs the same network in float64 with Keras' semantics, written out here rather
than taken from torch.nn where the two differ:
  - activations are NHWC as in tfd; convolutions permute to NCHW and back, kernels HWIO -> OIHW
    (depthwise: [kh, kw, in, multiplier] -> [in * multiplier, 1, kh, kw], output channel c * m + k);
  - "same" padding pads total = max((ceil(in / s) - 1) * s + k - in, 0), the smaller half before
    (TensorFlow's rule; uneven for even kernels); an average pool over "same" padding divides by the
    window's values inside the image only; a max pool pads with -inf;
  - batch_norm normalises with the batch's biased variance and moves moving = moving * momentum +
    batch * (1 - momentum), the variance biased too (Keras; torch's running_var is unbiased and its
    momentum the other way round); evaluation uses the moving statistics;
  - layer_norm is over the last axis (a pixel's channels); gelu is the exact erf form;
  - dropout applies the mask tfd drew (written by the test), scaled by 1 / (1 - rate);
  - the loss is the mean softmax cross-entropy of the logits.
It compares the evaluation logits, the training logits, the loss, every trainable variable's gradient,
the input's gradient and the moving statistics after the step, each within |tfd - torch| <=
ATOL + RTOL * |torch|, prints each tensor's max abs difference on stderr, and writes per case
{"ok", "compared", "diffs", "error"} to VERDICT.json. Exit status 0 unless it could not run.
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

RTOL, ATOL = 1e-4, 1e-5


def tensor(t):
    return torch.tensor(t["data"], dtype=torch.float64).reshape(t["shape"])


class Net:
    """One case's network: its variables as float64 leaves, run in training or evaluation mode."""

    def __init__(self, case):
        self.case = case
        self.vars = {v["name"]: tensor(v["value"]).requires_grad_(v["trainable"]) for v in case["variables"]}
        self.used = set()
        self.moved = {}  # moving statistics after the training pass
        self.training = False
        self.masks = []

    def var(self, name):
        if name not in self.vars:
            raise KeyError(f"tfd has no variable {name} (has {sorted(self.vars)})")
        self.used.add(name)
        return self.vars[name]

    def run(self, x, training):
        self.training = training
        self.masks = [tensor(m) for m in self.case["dropout_masks"]]
        h, w, c = self.case["input_shape"]
        y = self.layers(self.case["model"]["layers"], x.reshape(-1, h, w, c), "", first=True)
        return y.reshape(y.shape[0], -1)

    def layers(self, specs, x, prefix, first=False):
        counts = {}
        for i, spec in enumerate(specs):
            kind = spec["type"]
            if kind == "flatten":
                x = x.reshape(x.shape[0], 1, 1, -1)
                continue
            n = counts.get(kind, 0)
            counts[kind] = n + 1
            name = prefix + (kind if n == 0 else f"{kind}_{n}")
            x = self.layer(spec, x, name, first and i == 0)
        return x

    def layer(self, spec, x, name, first):
        kind = spec["type"]
        if kind == "dense":
            y = x.reshape(x.shape[0], -1) @ self.var(name + "/kernel") + self.var(name + "/bias")
            return activation(spec, y.reshape(x.shape[0], 1, 1, -1))
        if kind == "conv2d":
            kernel = self.var(name + "/kernel").permute(3, 2, 0, 1)
            return activation(spec, conv(x, kernel, self.var(name + "/bias"), spec, groups=1))
        if kind == "depthwise_conv2d":
            k = self.var(name + "/depthwise_kernel")
            kernel = k.permute(2, 3, 0, 1).reshape(k.shape[2] * k.shape[3], 1, k.shape[0], k.shape[1])
            bias = self.var(name + "/bias") if spec.get("use_bias", True) else None
            return activation(spec, conv(x, kernel, bias, spec, groups=x.shape[3]))
        if kind in ("max_pool2d", "avg_pool2d"):
            return pool(x, spec)
        if kind == "global_avg_pool2d":
            return x.mean(dim=(1, 2), keepdim=True)
        if kind == "batch_norm":
            return self.batch_norm(x, spec, name)
        if kind == "layer_norm":
            gamma = self.var(name + "/gamma") if spec.get("scale", True) else None
            beta = self.var(name + "/beta") if spec.get("center", True) else None
            return F.layer_norm(x, x.shape[-1:], gamma, beta, spec.get("epsilon", 1e-3))
        if kind == "residual":
            return self.residual(x, spec, name)
        if kind in ("embedding", "one_hot"):
            return self.categorical(x, kind, name)
        if kind == "dropout":
            if not self.training:
                return x
            mask = self.masks.pop(0).reshape(x.shape)
            return x * mask / (1 - spec["rate"])
        raise ValueError(f"the peer has no layer \"{kind}\": add it to torch_layers_peer.py")

    def batch_norm(self, x, spec, name):
        eps, momentum = spec.get("epsilon", 1e-3), spec.get("momentum", 0.99)
        mean_var, var_var = self.var(name + "/moving_mean"), self.var(name + "/moving_variance")
        if self.training:
            mean = x.mean(dim=(0, 1, 2))
            var = ((x - mean) ** 2).mean(dim=(0, 1, 2))
            self.moved[name + "/moving_mean"] = mean_var * momentum + mean.detach() * (1 - momentum)
            self.moved[name + "/moving_variance"] = var_var * momentum + var.detach() * (1 - momentum)
        else:
            mean, var = mean_var, var_var
        y = (x - mean) / torch.sqrt(var + eps)
        if spec.get("scale", True):
            y = y * self.var(name + "/gamma")
        if spec.get("center", True):
            y = y + self.var(name + "/beta")
        return y

    def residual(self, x, spec, name):
        y = self.layers(spec["layers"], x, name + "/")
        shortcut = x
        if name + "/projection/kernel" in self.vars:
            stride = math.prod(window(l)[1] for l in spec["layers"] if l["type"] not in ("flatten",))
            kernel = self.var(name + "/projection/kernel").permute(3, 2, 0, 1)
            shortcut = nchw_out(F.conv2d(nchw(x), kernel, self.var(name + "/projection/bias"), stride=stride))
        return activation(spec, y + shortcut)

    def categorical(self, x, kind, name):
        rows = x.reshape(x.shape[0], -1)
        features = {f for f, _ in self.case["categorical"]}
        parts = [rows[:, [f for f in range(rows.shape[1]) if f not in features]]]
        for j, (feature, ids) in enumerate(self.case["categorical"]):
            id_ = rows[:, feature].detach().long()
            if kind == "embedding":
                parts.append(self.var(name + ("/embeddings" if j == 0 else f"/embeddings_{j}"))[id_])
            else:
                parts.append(F.one_hot(id_, ids).to(torch.float64))
        return torch.cat(parts, dim=1).reshape(x.shape[0], 1, 1, -1)


def window(spec):
    """(kernel, stride) of a convolution or pool; (1, 1) for the layers that keep the image's size."""
    kind = spec["type"]
    if kind in ("conv2d", "depthwise_conv2d"):
        return spec["kernel_size"], spec.get("strides", 1)
    if kind in ("max_pool2d", "avg_pool2d"):
        return spec["pool_size"], spec.get("strides", spec["pool_size"])
    return 1, 1


def same_pads(size, k, s):
    total = max((math.ceil(size / s) - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def nchw(x):
    return x.permute(0, 3, 1, 2)


def nchw_out(y):
    return y.permute(0, 2, 3, 1)


def padded(x, spec, value=0.0):
    """NCHW x padded as the spec's padding asks (nothing for "valid")."""
    if spec.get("padding", "valid") != "same":
        return x
    k, s = window(spec)
    top, bottom = same_pads(x.shape[2], k, s)
    left, right = same_pads(x.shape[3], k, s)
    return F.pad(x, (left, right, top, bottom), value=value)


def conv(x, kernel, bias, spec, groups):
    _, s = window(spec)
    return nchw_out(F.conv2d(padded(nchw(x), spec), kernel, bias, stride=s, groups=groups))


def pool(x, spec):
    k, s = window(spec)
    if spec["type"] == "max_pool2d":
        return nchw_out(F.max_pool2d(padded(nchw(x), spec, value=-math.inf), k, s))
    sums = F.avg_pool2d(padded(nchw(x), spec), k, s) * (k * k)
    counts = F.avg_pool2d(padded(torch.ones_like(nchw(x)), spec), k, s) * (k * k)
    return nchw_out(sums / counts)


def activation(spec, y):
    a = spec.get("activation", "none")
    funcs = {"none": lambda v: v, "linear": lambda v: v, "relu": F.relu, "relu6": lambda v: torch.clamp(v, 0, 6),
             "gelu": F.gelu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "elu": F.elu}
    if a not in funcs:
        raise ValueError(f"the peer has no activation \"{a}\": add it to torch_layers_peer.py")
    return funcs[a](y)


def compare(case):
    """[(tensor name, tfd value, torch value)] of one case."""
    net = Net(case)
    x = tensor(case["x"]).requires_grad_(True)
    with torch.no_grad():
        eval_logits = net.run(x, training=False)
    train_logits = net.run(x, training=True)
    loss = F.cross_entropy(train_logits, torch.tensor(case["labels"]))
    loss.backward()
    pairs = [("eval_logits", tensor(case["eval_logits"]), eval_logits), ("train_logits", tensor(case["train_logits"]), train_logits),
             ("loss", torch.tensor(case["loss"], dtype=torch.float64), loss), ("dx", tensor(case["dx"]), x.grad)]
    for name, g in case["grads"].items():
        ours = net.vars[name].grad
        pairs.append(("grad " + name, tensor(g), ours if ours is not None else torch.zeros(g["shape"], dtype=torch.float64)))
    after = {v["name"]: tensor(v["value"]) for v in case["after"]}
    for name, value in net.moved.items():
        pairs.append(("after " + name, after[name], value))
    unused = set(net.vars) - net.used
    if unused:
        raise ValueError(f"tfd variables the peer's network does not use: {sorted(unused)}")
    return pairs


def main():
    cases = json.load(open(sys.argv[1]))["cases"]
    verdict = {}
    for case in cases:
        result = {"ok": True, "compared": 0, "diffs": {}}
        try:
            for name, ours, torchs in compare(case):
                torchs = torchs.detach().reshape(ours.shape)
                diff = (ours - torchs).abs()
                ok = bool((diff <= ATOL + RTOL * torchs.abs()).all())
                result["diffs"][name] = float(diff.max()) if diff.numel() else 0.0
                result["compared"] += 1
                result["ok"] = result["ok"] and ok
                print(f"{case['name']:28} {name:48} max |diff| {result['diffs'][name]:.3e}{'' if ok else '  MISMATCH'}", file=sys.stderr)
        except Exception as e:  # a case the peer cannot build fails that case, named, not the run
            result["ok"], result["error"] = False, f"{type(e).__name__}: {e}"
            print(f"{case['name']:28} error: {result['error']}", file=sys.stderr)
        verdict[case["name"]] = result
    print(f"tolerance: |tfd - torch| <= {ATOL} + {RTOL} |torch| (tfd float32, torch float64)", file=sys.stderr)
    json.dump(verdict, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
