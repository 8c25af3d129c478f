#!/usr/bin/python3
"""PyTorch twin of `kiln train --model lenet` on the real Fashion-MNIST.

The chapter's setting (d2l 12.5: batch 256, lr 0.2, plain SGD, 10 epochs,
pixels scaled to [0, 1], no normalization) and the zoo's LeNet (conv 20@3x3
relu, avg-pool 2, conv 50@5x5 relu, avg-pool 2, dense 128 relu, dense 10).
It answers one question: what test accuracy does this recipe reach in a
reference framework, so Kiln's figure can be judged against the recipe rather
than against the chapter's single run. Prints one `name value unit` line per
epoch and seed.

    /usr/bin/python3 bench/pytorch_lenet_fashion.py --seeds 0 1 2 --init xavier
"""
import argparse
import gzip
import struct
import time

import numpy as np
import torch
from torch import nn


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(root):
    def images(name):
        return torch.from_numpy(read_idx(f"{root}/{name}").astype(np.float32) / 255.0).unsqueeze(1)

    def labels(name):
        return torch.from_numpy(read_idx(f"{root}/{name}").astype(np.int64))

    return (images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
            images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz"))


def lenet():
    return nn.Sequential(
        nn.Conv2d(1, 20, 3), nn.ReLU(), nn.AvgPool2d(2, 2),
        nn.Conv2d(20, 50, 5), nn.ReLU(), nn.AvgPool2d(2, 2),
        nn.Flatten(), nn.Linear(800, 128), nn.ReLU(), nn.Linear(128, 10))


def init_weights(net, init):
    for m in net.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            if init == "xavier":
                nn.init.xavier_uniform_(m.weight)
            elif init.startswith("normal:"):
                nn.init.normal_(m.weight, std=float(init.split(":")[1]))
            # init == "torch": keep PyTorch's default (kaiming-uniform)
            if init != "torch":
                nn.init.zeros_(m.bias)


def accuracy(net, x, y):
    with torch.no_grad():
        correct = 0
        for i in range(0, len(x), 1000):
            correct += (net(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
    return correct / len(x)


def recipe_args(epochs, lr, threads):
    """The recipe's command line (shared with pytorch_resnet18_fashion.py)."""
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--init", default="xavier", help="xavier, normal:SIGMA or torch")
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--threads", type=int, default=threads)
    p.add_argument("--device", default="cpu", help="cpu or cuda (the recipe's spread over many seeds is quick on a GPU)")
    p.add_argument("--compile", action="store_true", help="ResNet-18 twin only: train torch.compile(net)")
    p.add_argument("--amp", default="", help="ResNet-18 twin only: bf16 or fp16 autocast (fp16 with GradScaler)")
    return p.parse_args()


def main():
    args = recipe_args(epochs=10, lr=0.2, threads=1)
    torch.set_num_threads(args.threads)
    xtr, ytr, xte, yte = load(args.data)
    loss_fn = nn.CrossEntropyLoss()
    for seed in args.seeds:
        torch.manual_seed(seed)
        net = lenet()
        init_weights(net, args.init)
        opt = torch.optim.SGD(net.parameters(), lr=args.lr)
        for epoch in range(1, args.epochs + 1):
            start = time.time()
            order = torch.randperm(len(xtr))
            for i in range(0, len(xtr), args.batch_size):
                idx = order[i:i + args.batch_size]
                opt.zero_grad()
                loss_fn(net(xtr[idx]), ytr[idx]).backward()
                opt.step()
            acc = accuracy(net, xte, yte)
            print(f"torch_lenet_test_acc_seed{seed}_epoch{epoch} {acc:.4f} fraction  # {time.time() - start:.1f} s",
                  flush=True)


if __name__ == "__main__":
    main()
