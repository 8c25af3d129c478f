#!/usr/bin/env python3
"""The PyTorch twin of Kiln's byte-level GPT (models/gpt.h), for benchmarks.

    /usr/bin/python3 bench/pytorch_gpt.py --threads 2 bench      # name value unit lines
    /usr/bin/python3 bench/pytorch_gpt.py --threads 2 recipe --steps 300 --test-windows 512 --warmup 100

`bench` prints train_gpt_tokens_per_s (float32), train_gpt_bf16_tokens_per_s
(torch.autocast bf16) and generate_gpt_tokens_per_s (a sampling loop without
a KV cache: every step runs the whole sequence, as a PyTorch user writes it
without one) for 4 layers, 4 heads, width 256, context 128, batch 32, AdamW,
the figures `kiln bench gpt` prints. bench/pytorch_compare.py imports it.

`recipe` trains on Debian's fortunes with `kiln train --model gpt`'s recipe
(AdamW lr 1e-3, wd 0.1, 100 warmup steps then cosine to 0, clipping at 1,
batch 32, init normal(0.02)) for --steps steps and prints the held-out bits
per byte over the first --test-windows held-out windows. The training
windows are the same as Kiln's (the same tiling and seeded jitter); only the
shuffle order differs.

The model: token embedding + learned positions, pre-norm blocks (LayerNorm,
one qkv Linear, causal softmax attention, output Linear; LayerNorm, Linear
to 4x width, GELU (erf), Linear back), final LayerNorm, bias-free head.
"""
import argparse
import math
import os
import sys
import time

torch = None  # imported after the thread environment is set
F = None

LAYERS, HEADS, WIDTH, CONTEXT, BATCH, VOCAB = 4, 4, 256, 128, 32, 256


def build_model(layers=LAYERS, heads=HEADS, width=WIDTH, context=CONTEXT):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
            self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)))

        def attention(self, x):
            n, t, _ = x.shape
            q, k, v = self.qkv(x).view(n, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            s = s.masked_fill(~self.mask[:t, :t], float("-inf"))
            a = torch.softmax(s, dim=-1) @ v
            return self.out(a.transpose(1, 2).reshape(n, t, width))

        def forward(self, x):
            x = x + self.attention(self.ln1(x))
            return x + self.proj(F.gelu(self.fc(self.ln2(x))))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, width)
            self.pos = nn.Parameter(torch.zeros(context, width))
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(width)
            self.head = nn.Linear(width, VOCAB, bias=False)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0, 0.02)
                    if getattr(m, "bias", None) is not None:
                        nn.init.zeros_(m.bias)
            nn.init.normal_(self.pos, 0, 0.02)

        def forward(self, ids):
            h = self.embed(ids) + self.pos[: ids.shape[1]]
            return self.head(self.ln_f(self.blocks(h)))

    return Gpt()


def autocast(bf16):
    import contextlib
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def train_tokens_per_s(bf16, steps=5, repeats=3):
    torch.manual_seed(0)
    net = build_model().train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.1)
    x = torch.randint(0, VOCAB, (BATCH, CONTEXT))
    y = torch.randint(0, VOCAB, (BATCH, CONTEXT))

    def run(n):
        t0 = time.perf_counter()
        with torch.enable_grad():  # pytorch_compare.py measures under no_grad
            for _ in range(n):
                opt.zero_grad(set_to_none=True)
                with autocast(bf16):
                    loss = F.cross_entropy(net(x).reshape(-1, VOCAB).float(), y.reshape(-1))
                loss.backward()
                opt.step()
        return time.perf_counter() - t0

    run(2)
    best = min(run(steps) for _ in range(repeats))
    return steps * BATCH * CONTEXT / best


def generate_tokens_per_s(tokens=120, repeats=3):
    torch.manual_seed(0)
    net = build_model().eval()
    prompt = list(b"Q: Why i")

    def run():
        ids = list(prompt)
        g = torch.Generator().manual_seed(1)
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(tokens):
                logits = net(torch.tensor([ids[-CONTEXT:]]))[0, -1]
                ids.append(int(torch.multinomial(torch.softmax(logits, -1), 1, generator=g)))
        return time.perf_counter() - t0

    run()
    return tokens / min(run() for _ in range(repeats))


BENCHES = {
    "train_gpt_tokens_per_s": ("tokens/s", lambda: train_tokens_per_s(False)),
    "train_gpt_bf16_tokens_per_s": ("tokens/s", lambda: train_tokens_per_s(True)),
    "generate_gpt_tokens_per_s": ("tokens/s", generate_tokens_per_s),
}


# ---- the training recipe on fortunes, with Kiln's windows


def fortunes(folder="/usr/share/games/fortunes"):
    names = sorted(n for n in os.listdir(folder) if "." not in n and os.path.isfile(os.path.join(folder, n)))
    return b"".join(open(os.path.join(folder, n), "rb").read() for n in names)


MASK64 = (1 << 64) - 1


def mix(x):  # frontend/data/byte_text.cc's window jitter
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def window_starts(n, context, seed, jitter):
    count = (n - 1) // context
    starts = []
    for i in range(count):
        slot = i * context
        room = min(context, n - context - slot)
        if not jitter or room <= 1:
            starts.append(slot)
        else:
            starts.append(slot + mix(((seed * 0x100000001B3) & MASK64) ^ i) % room)
    return starts


def recipe(steps, test_windows, seed, warmup=100):
    """Kiln's `kiln train --model gpt --epochs 1 --train-limit 32*steps --test-limit test_windows`:
    the first 32*steps training windows, one pass in a seeded order."""
    text = fortunes()
    held = int(len(text) * 0.1)
    train, test = text[: len(text) - held], text[len(text) - held :]
    starts = window_starts(len(train), CONTEXT, seed, True)[: steps * BATCH]
    tstarts = window_starts(len(test), CONTEXT, seed, False)[:test_windows]
    data = torch.frombuffer(bytearray(train), dtype=torch.uint8).long()
    tdata = torch.frombuffer(bytearray(test), dtype=torch.uint8).long()
    torch.manual_seed(seed)
    net = build_model().train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: s / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup))))
    order = torch.randperm(len(starts), generator=torch.Generator().manual_seed(seed)).tolist()
    t0 = time.perf_counter()
    for step in range(steps):
        idx = [starts[order[(step * BATCH + r) % len(order)]] for r in range(BATCH)]
        x = torch.stack([data[s : s + CONTEXT] for s in idx])
        y = torch.stack([data[s + 1 : s + CONTEXT + 1] for s in idx])
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x).reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
    seconds = time.perf_counter() - t0
    net.eval()
    total = 0.0
    with torch.no_grad():
        for b in range(0, len(tstarts), BATCH):
            idx = tstarts[b : b + BATCH]
            x = torch.stack([tdata[s : s + CONTEXT] for s in idx])
            y = torch.stack([tdata[s + 1 : s + CONTEXT + 1] for s in idx])
            total += float(F.cross_entropy(net(x).reshape(-1, VOCAB), y.reshape(-1), reduction="sum"))
    bpb = total / (len(tstarts) * CONTEXT) / math.log(2)
    print(f"pytorch_gpt_train_loss {float(loss):.4f} nats")
    print(f"pytorch_gpt_test_bits_per_byte {bpb:.4f} bits")
    print(f"pytorch_gpt_recipe_tokens_per_s {steps * BATCH * CONTEXT / seconds:.4g} tokens/s")


def init_torch(threads):
    global torch, F
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[v] = str(threads)
    import torch as t
    import torch.nn.functional as f
    torch, F = t, f
    torch.set_num_threads(threads)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("bench")
    r = sub.add_parser("recipe")
    r.add_argument("--steps", type=int, default=300)
    r.add_argument("--test-windows", type=int, default=512)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--warmup", type=int, default=100, help="linear warmup steps (kiln's --warmup-steps)")
    a = ap.parse_args()
    init_torch(a.threads)
    if a.cmd == "bench":
        for name, (unit, fn) in BENCHES.items():
            print(f"{name} {fn():.4g} {unit}", flush=True)
    else:
        recipe(a.steps, a.test_windows, a.seed, a.warmup)


if __name__ == "__main__":
    sys.exit(main())
