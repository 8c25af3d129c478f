#!/usr/bin/python3
"""PyTorch twin of `kiln train --model resnet18` on the real Fashion-MNIST.

The chapter's setting (d2l 12.6: batch 256, lr 0.1, plain SGD, pixels scaled
to [0, 1]) and its ResNet-18 (3x3 stride-1 stem with BatchNorm and ReLU, no
max-pool, four stages of two residual blocks, 1x1 stride-2 shortcuts at the
first block of stages 2-4, global average pool, dense). BatchNorm momentum
0.1 in PyTorch's convention is MXNet's 0.9. Test accuracy is measured in eval
mode (running statistics), as Kiln's predict mode. It tells what test
accuracy the recipe reaches after N epochs in a reference framework. Prints
one `name value unit` line per epoch and seed.

    /usr/bin/python3 bench/pytorch_resnet18_fashion.py --epochs 2 --threads 2 --seeds 0
    python3 bench/pytorch_resnet18_fashion.py --device cuda --seeds 0 1 2 3 4 5 6 7
    python3 bench/pytorch_resnet18_fashion.py --device cuda --compile --amp bf16 --epochs 10

--compile trains torch.compile(net) (its compile time falls in the first
epoch); --amp bf16|fp16 runs the forward under torch.autocast (fp16 with a
GradScaler). Lines then carry the mode in their names (torch_compile_bf16_...).
"""
import time

import torch
from torch import nn

from pytorch_lenet_fashion import init_weights, load, recipe_args


class Residual(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv3 = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (self.conv3(x) if self.conv3 is not None else x))


def resnet18(classes=10):
    layers = [nn.Conv2d(1, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for i, c in enumerate([64, 128, 256, 512]):
        stride = 1 if i == 0 else 2
        layers += [Residual(cin, c, stride), Residual(c, c)]
        cin = c
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def accuracy(net, x, y):
    net.eval()
    with torch.no_grad():
        correct = sum((net(x[i:i + 500]).argmax(1) == y[i:i + 500]).sum().item() for i in range(0, len(x), 500))
    net.train()
    return correct / len(x)


def main():
    args = recipe_args(epochs=2, lr=0.1, threads=2)
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    xtr, ytr, xte, yte = (t.to(dev) for t in load(args.data))
    loss_fn = nn.CrossEntropyLoss()
    for seed in args.seeds:
        torch.manual_seed(seed)
        net = resnet18()
        init_weights(net, args.init)
        net.to(dev)
        opt = torch.optim.SGD(net.parameters(), lr=args.lr)
        model = torch.compile(net) if args.compile else net
        amp_dtype = {"": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.amp]
        scaler = torch.amp.GradScaler(enabled=amp_dtype == torch.float16) if amp_dtype else None
        name = "torch" + ("_compile" if args.compile else "") + (f"_{args.amp}" if args.amp else "")
        for epoch in range(1, args.epochs + 1):
            start = time.time()
            order = torch.randperm(len(xtr)).to(dev)
            correct = torch.zeros((), dtype=torch.int64, device=dev)  # read once per epoch: no sync per step
            for i in range(0, len(xtr), args.batch_size):
                idx = order[i:i + args.batch_size]
                opt.zero_grad()
                with torch.autocast(args.device, dtype=amp_dtype, enabled=amp_dtype is not None):
                    out = model(xtr[idx])
                    loss = loss_fn(out, ytr[idx])
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
                else:
                    loss.backward()
                    opt.step()
                correct += (out.argmax(1) == ytr[idx]).sum()
            correct = correct.item()
            seconds = time.time() - start
            acc = accuracy(net, xte, yte)
            print(f"{name}_resnet18_train_acc_seed{seed}_epoch{epoch} {correct / len(xtr):.4f} fraction", flush=True)
            print(f"{name}_resnet18_test_acc_seed{seed}_epoch{epoch} {acc:.4f} fraction  # {seconds:.1f} s, "
                  f"{len(xtr) / seconds:.1f} img/s", flush=True)
            print(f"{name}_resnet18_epoch_s_seed{seed}_epoch{epoch} {seconds:.2f} s", flush=True)


if __name__ == "__main__":
    main()
