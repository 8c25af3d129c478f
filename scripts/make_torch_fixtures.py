#!/usr/bin/python3
"""Writes tests/data/torch/: layer fixtures computed by PyTorch, for
tests/frontend/torch_fixture_test.cc (which never calls PyTorch).

    /usr/bin/python3 scripts/make_torch_fixtures.py [OUT_DIR]

Needs Debian's python3-torch and python3-numpy (`bash scripts/install-deps.sh
--bench`); run it with /usr/bin/python3, whose site-packages hold them.

Each case names a Kiln op by its MXNet name with MXNet's string attributes
(or a Gluon loss, "loss:NAME"), its inputs, the outputs PyTorch computes for
them, a random head gradient per compared output, and the gradient of
sum(output * head) with respect to every float input. Inputs a train-mode op
updates in place (BatchNorm's moving statistics) have their expected values
after the call. Files: NAME.in{i}.npy, NAME.out{j}.npy, NAME.head{j}.npy,
NAME.grad{i}.npy, NAME.after{i}.npy; manifest.json lists the cases.

The fixtures are deterministic (seeded) and small (a few KB each); rerun the
script only to add cases, and commit what it writes.
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_default_dtype(torch.float32)

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "torch")
cases = []


def rand(*shape):
    return torch.randn(*shape, dtype=torch.float32)


def tup(*xs):
    return "(" + ", ".join(str(x) for x in xs) + ")"


def add(name, op, attrs, inputs, fn, *, grad=None, train=False, outputs=1, after=None, rtol=1e-4, atol=1e-5):
    """`fn(*inputs)` returns the compared outputs (a tensor or a tuple);
    `grad` lists the input indices to differentiate (all float inputs by
    default); `after` maps an input index to its expected value after the call."""
    grad = list(range(len(inputs))) if grad is None else grad
    leaves = [x.detach().clone().requires_grad_(i in grad) for i, x in enumerate(inputs)]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    assert len(outs) == outputs
    heads = [rand(*o.shape) for o in outs]
    if grad:
        total = sum((o * h).sum() for o, h in zip(outs, heads))
        total.backward()
    files = {}

    def save(tag, t):
        path = f"{name}.{tag}.npy"
        np.save(os.path.join(OUT, path), t.detach().numpy().astype(np.float32))
        return path

    for i, x in enumerate(inputs):
        save(f"in{i}", x)
    for j, (o, h) in enumerate(zip(outs, heads)):
        save(f"out{j}", o)
        save(f"head{j}", h)
    for i in grad:
        g = leaves[i].grad
        save(f"grad{i}", g if g is not None else torch.zeros_like(inputs[i]))
    for i, value in (after or {}).items():
        save(f"after{i}", value)
    cases.append({"name": name, "op": op, "attrs": attrs, "inputs": len(inputs), "outputs": outputs,
                  "grad": grad, "after": sorted((after or {}).keys()), "train": train, "rtol": rtol, "atol": atol})


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".npy") or f == "manifest.json":
            os.remove(os.path.join(OUT, f))

    # ---- FullyConnected: y = flatten(x) W^T + b
    x, w, b = rand(4, 3, 2, 2), rand(5, 12), rand(5)
    add("fc_flatten", "FullyConnected", {"num_hidden": "5"}, [x, w, b],
        lambda x, w, b: F.linear(x.reshape(4, -1), w, b))
    x, w = rand(2, 3, 6), rand(4, 6)
    add("fc_no_flatten_no_bias", "FullyConnected", {"num_hidden": "4", "flatten": "False", "no_bias": "True"}, [x, w],
        lambda x, w: F.linear(x, w))

    # ---- Convolution (2-D): stride, pad, dilation, groups, no_bias
    x, w, b = rand(2, 4, 9, 8), rand(6, 4, 3, 3), rand(6)
    add("conv_basic", "Convolution", {"kernel": tup(3, 3), "num_filter": "6"}, [x, w, b],
        lambda x, w, b: F.conv2d(x, w, b))
    add("conv_stride_pad", "Convolution",
        {"kernel": tup(3, 3), "num_filter": "6", "stride": tup(2, 2), "pad": tup(1, 1)}, [x, w, b],
        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1))
    add("conv_dilate", "Convolution",
        {"kernel": tup(3, 3), "num_filter": "6", "dilate": tup(2, 2), "pad": tup(2, 1)}, [x, w, b],
        lambda x, w, b: F.conv2d(x, w, b, dilation=2, padding=(2, 1)))
    wg = rand(6, 2, 3, 3)
    add("conv_groups_no_bias", "Convolution",
        {"kernel": tup(3, 3), "num_filter": "6", "num_group": "2", "no_bias": "True", "stride": tup(1, 2)}, [x, wg],
        lambda x, w: F.conv2d(x, w, None, stride=(1, 2), groups=2))
    x1, w1, b1 = rand(3, 1, 7, 7), rand(4, 1, 5, 5), rand(4)  # one input channel, as LeNet's first layer
    add("conv_one_channel", "Convolution", {"kernel": tup(5, 5), "num_filter": "4", "pad": tup(2, 2)}, [x1, w1, b1],
        lambda x, w, b: F.conv2d(x, w, b, padding=2))

    # ---- Pooling
    x = rand(2, 3, 7, 6)
    add("pool_max", "Pooling", {"kernel": tup(2, 2), "stride": tup(2, 2), "pool_type": "max"}, [x],
        lambda x: F.max_pool2d(x, 2, 2))
    add("pool_max_pad_stride1", "Pooling",
        {"kernel": tup(3, 3), "stride": tup(1, 1), "pad": tup(1, 1), "pool_type": "max"}, [x],
        lambda x: F.max_pool2d(x, 3, 1, 1))
    add("pool_avg_include_pad", "Pooling",
        {"kernel": tup(3, 3), "stride": tup(2, 2), "pad": tup(1, 1), "pool_type": "avg"}, [x],
        lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=True))
    add("pool_avg_exclude_pad", "Pooling",
        {"kernel": tup(3, 3), "stride": tup(2, 2), "pad": tup(1, 1), "pool_type": "avg", "count_include_pad": "False"},
        [x], lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False))
    # 'full' convention = ceil mode: 7x6 with 2x2/2 -> 4x3
    add("pool_max_full", "Pooling",
        {"kernel": tup(2, 2), "stride": tup(2, 2), "pool_type": "max", "pooling_convention": "full"}, [x],
        lambda x: F.max_pool2d(x, 2, 2, ceil_mode=True))
    add("pool_avg_global", "Pooling", {"kernel": tup(1, 1), "pool_type": "avg", "global_pool": "True"}, [x],
        lambda x: F.adaptive_avg_pool2d(x, 1))
    add("pool_max_global", "Pooling", {"kernel": tup(1, 1), "pool_type": "max", "global_pool": "True"}, [x],
        lambda x: F.adaptive_max_pool2d(x, 1))

    # ---- BatchNorm. MXNet semantics: train mode normalizes by the batch's
    # biased variance and updates moving = momentum * moving + (1 - momentum) * batch
    # with the biased variance too; fix_gamma uses gamma = 1 and gives it a zero gradient.
    x = rand(4, 3, 5, 5)
    gamma, beta = rand(3).abs() + 0.5, rand(3)
    mm, mv = rand(3) * 0.1, rand(3).abs() + 0.5
    eps, mom = 1e-3, 0.9
    mean = x.mean(dim=(0, 2, 3))
    var = x.var(dim=(0, 2, 3), unbiased=False)
    after = {3: mom * mm + (1 - mom) * mean, 4: mom * mv + (1 - mom) * var}

    def bn_train(x, g, b, m, v):
        return F.batch_norm(x, None, None, g, b, training=True, eps=eps)

    add("batch_norm_train", "BatchNorm", {"eps": str(eps), "momentum": str(mom), "fix_gamma": "False"},
        [x, gamma, beta, mm, mv], bn_train, grad=[0, 1, 2], train=True, after=after, rtol=1e-3, atol=1e-4)

    def bn_train_fixed(x, g, b, m, v):
        return F.batch_norm(x, None, None, torch.ones_like(g), b, training=True, eps=eps)

    add("batch_norm_train_fix_gamma", "BatchNorm", {"eps": str(eps), "momentum": str(mom)},
        [x, gamma, beta, mm, mv], bn_train_fixed, grad=[0, 1, 2], train=True, after=after, rtol=1e-3, atol=1e-4)

    def bn_predict(x, g, b, m, v):
        return F.batch_norm(x, m, v, g, b, training=False, eps=eps)

    add("batch_norm_predict", "BatchNorm", {"eps": str(eps), "fix_gamma": "False"},
        [x, gamma, beta, mm, mv], bn_predict, grad=[0, 1, 2])
    add("batch_norm_global_stats_train", "BatchNorm", {"eps": str(eps), "fix_gamma": "False", "use_global_stats": "True"},
        [x, gamma, beta, mm, mv], bn_predict, grad=[0, 1, 2], train=True, after={3: mm, 4: mv})
    x2 = rand(6, 4)
    g2, b2, m2, v2 = rand(4).abs() + 0.5, rand(4), torch.zeros(4), torch.ones(4)
    after2 = {3: mom * m2 + (1 - mom) * x2.mean(0), 4: mom * v2 + (1 - mom) * x2.var(0, unbiased=False)}
    add("batch_norm_2d_train", "BatchNorm", {"eps": str(eps), "momentum": str(mom), "fix_gamma": "False"},
        [x2, g2, b2, m2, v2], lambda x, g, b, m, v: F.batch_norm(x, None, None, g, b, training=True, eps=eps),
        grad=[0, 1, 2], train=True, after=after2, rtol=1e-3, atol=1e-4)

    # ---- activations (inputs kept away from the kinks at 0)
    x = rand(3, 7)
    x = x + 0.1 * torch.sign(x)
    for act, fn in [("relu", F.relu), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh),
                    ("softrelu", F.softplus), ("softsign", F.softsign)]:
        add(f"act_{act}", "Activation", {"act_type": act}, [x], fn)
    add("leaky_relu", "LeakyReLU", {"act_type": "leaky", "slope": "0.1"}, [x], lambda x: F.leaky_relu(x, 0.1))
    add("leaky_elu", "LeakyReLU", {"act_type": "elu", "slope": "0.7"}, [x], lambda x: F.elu(x, 0.7))
    add("leaky_gelu", "LeakyReLU", {"act_type": "gelu"}, [x], lambda x: F.gelu(x))

    # ---- softmax family
    x = rand(3, 4, 5)
    add("softmax_last", "softmax", {}, [x], lambda x: F.softmax(x, -1))
    add("softmax_axis1_temperature", "softmax", {"axis": "1", "temperature": "2.5"}, [x],
        lambda x: F.softmax(x / 2.5, 1))
    add("log_softmax_axis0", "log_softmax", {"axis": "0"}, [x], lambda x: F.log_softmax(x, 0))
    add("log_softmax_temperature", "log_softmax", {"temperature": "0.5"}, [x], lambda x: F.log_softmax(x / 0.5, -1))

    # ---- Gluon losses: one value per sample
    pred = rand(6, 5)
    label = torch.tensor([0, 4, 2, 2, 1, 3], dtype=torch.float32)
    add("loss_softmax_ce", "loss:SoftmaxCrossEntropy", {}, [pred, label],
        lambda p, l: F.cross_entropy(p, l.long(), reduction="none"), grad=[0])
    target = rand(6, 5)
    add("loss_l2", "loss:L2Loss", {}, [pred, target], lambda p, t: 0.5 * ((p - t) ** 2).mean(1), grad=[0])
    add("loss_l1", "loss:L1Loss", {}, [pred, target], lambda p, t: (p - t).abs().mean(1), grad=[0])
    bits = (torch.rand(6, 5) > 0.5).float()
    add("loss_sigmoid_bce", "loss:SigmoidBinaryCrossEntropy", {}, [pred, bits],
        lambda p, t: F.binary_cross_entropy_with_logits(p, t, reduction="none").mean(1), grad=[0])

    manifest = {"generator": "scripts/make_torch_fixtures.py", "torch": torch.__version__, "cases": cases}
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
