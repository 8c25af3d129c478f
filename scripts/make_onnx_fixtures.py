#!/usr/bin/python3
"""Writes tests/data/onnx/: small PyTorch models exported to ONNX, with inputs
and PyTorch's outputs, for tests/formats/onnx_import_test.cc (which never
calls PyTorch).

    /usr/bin/python3 scripts/make_onnx_fixtures.py [OUT_DIR]
    /usr/bin/python3 scripts/make_onnx_fixtures.py --torchvision resnet18 mobilenet_v2 OUT_DIR   # large: not committed

Needs Debian's python3-torch, python3-onnx (and python3-torchvision for
--torchvision); run it with /usr/bin/python3, whose site-packages hold them.

Per model NAME: NAME.onnx (a dynamic batch axis "N"), NAME.in.npy and
NAME.out.npy (batch 2), NAME.in3.npy and NAME.out3.npy (batch 3: the same
file at another batch size). Models:
  mlp_op13     Linear-ReLU-Linear-LogSoftmax (Gemm, Relu, LogSoftmax)
  cnn_op{9,13,17}  Conv-BatchNorm-ReLU-MaxPool, a grouped dilated Conv,
               Sigmoid x Tanh, AvgPool, x.view(x.size(0), -1) (PyTorch's
               Shape-Gather-Unsqueeze-Concat-Reshape subgraph), Linear,
               Softmax; BatchNorm kept (TrainingMode.PRESERVE)
  attn_op{13,17}  single-head self-attention over [N, 4, 8] with a residual
               and LayerNorm (decomposed at 13, LayerNormalization at 17),
               heads split by x.view(n, t, 2, 4): batched MatMul, Transpose,
               Softmax, shape subgraphs
  ffn_op13     LayerNorm, Linear, GELU (exported as Div-Erf-Add-Mul-Mul), Linear,
               residual, over [N, 4, 8]
  mlp_external the MLP with its weights in mlp_external.bin (external data)
  --torchvision [--opset N] NAME... OUT_DIR  torchvision classification
               models (random weights, opset 13 or N, batch 2/3 at 224x224):
               large, not committed; with --opset the files are NAME_opN
  --compare KILN DIR  runs `KILN run` on every DIR/NAME.onnx with NAME.in3.npy
               and prints one line per model: NAME, max |kiln - torch| over
               max |torch| (or Kiln's error message)
Seeded; rerun only to change the models, and commit what it writes.
"""
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn

torch.manual_seed(0)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return torch.log_softmax(self.fc2(torch.relu(self.fc1(x))), dim=1)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2)
        self.fc = nn.Linear(8 * 2 * 2, 5)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2)
        x = torch.sigmoid(self.conv2(x)) * torch.tanh(x)
        x = nn.functional.avg_pool2d(x, 2)
        x = x.view(x.size(0), -1)
        return torch.softmax(self.fc(x), dim=1)


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 8)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(x).split(8, dim=-1)
        q, k, v = (z.view(n, t, 2, 4).transpose(1, 2) for z in (q, k, v))  # [n, heads, t, 4]
        a = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)
        y = (a @ v).transpose(1, 2).reshape(n, t, d)
        return self.norm(x + self.proj(y))


def export(model, name, x_shape, opset, out, external=False):
    model.eval()
    if hasattr(model, "bn"):  # non-trivial running statistics
        with torch.no_grad():
            model.bn.running_mean.uniform_(-0.5, 0.5)
            model.bn.running_var.uniform_(0.5, 1.5)
            model.bn.weight.uniform_(0.5, 1.5)
            model.bn.bias.uniform_(-0.5, 0.5)
    x2 = torch.randn(2, *x_shape[1:])
    x3 = torch.randn(3, *x_shape[1:])
    path = os.path.join(out, name + ".onnx")
    torch.onnx.export(model, x2, path, opset_version=opset, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=True)
    if external:
        m = onnx.load(path)
        onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=name + ".bin", size_threshold=0)
    onnx.checker.check_model(onnx.load(path))
    with torch.no_grad():
        for suffix, x in (("", x2), ("3", x3)):
            np.save(os.path.join(out, f"{name}.in{suffix}.npy"), x.numpy())
            np.save(os.path.join(out, f"{name}.out{suffix}.npy"), model(x).numpy())


def compare(kiln, folder):
    import subprocess
    import tempfile
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".onnx"):
            continue
        name = f[:-5]
        with tempfile.TemporaryDirectory() as tmp:
            y = os.path.join(tmp, "y.npy")
            r = subprocess.run([kiln, "run", os.path.join(folder, f), "--input",
                                "x=" + os.path.join(folder, name + ".in3.npy"), "--output", y],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name} error: {(r.stderr or r.stdout).strip().splitlines()[-1]}")
                continue
            want = np.load(os.path.join(folder, name + ".out3.npy"))
            got = np.load(y)
            print(f"{name} rel_err {np.abs(got - want).max() / np.abs(want).max():.3g}")


def main():
    args = sys.argv[1:]
    if args and args[0] == "--compare":
        compare(args[1], args[2])
        return
    if args and args[0] == "--torchvision":
        import torchvision
        opset, suffix = 13, ""
        if len(args) > 2 and args[1] == "--opset":
            opset, suffix, args = int(args[2]), f"_op{args[2]}", args[2:]
        names, out = args[1:-1], args[-1]
        os.makedirs(out, exist_ok=True)
        for name in names:
            torch.manual_seed(0)
            kwargs = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
            export(getattr(torchvision.models, name)(weights=None, **kwargs), name + suffix, (1, 3, 224, 224), opset,
                   out)
        return
    out = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "onnx")
    os.makedirs(out, exist_ok=True)
    export(Mlp(), "mlp_op13", (1, 8), 13, out)
    for opset in (9, 13, 17):
        torch.manual_seed(opset)
        export(Cnn(), f"cnn_op{opset}", (1, 3, 8, 8), opset, out)
    for opset in (13, 17):
        torch.manual_seed(opset)
        export(Attention(), f"attn_op{opset}", (1, 4, 8), opset, out)
    torch.manual_seed(5)
    export(FeedForward(), "ffn_op13", (1, 4, 8), 13, out)
    torch.manual_seed(1)
    export(Mlp(), "mlp_external", (1, 8), 13, out, external=True)


if __name__ == "__main__":
    main()
