#!/usr/bin/env python3
"""Compare Kiln's `kiln bench` figures with the same figures measured in PyTorch.

Usage:
    python3 bench/pytorch_compare.py [--kiln build/kiln] [--threads N]
                                     [--only PREFIX ...] [--skip-kiln] [--out FILE]
                                     [--rounds N]

    e.g. --only train infer: train_lenet_ips, train_resnet18_ips,
    train_resnet18_peak_mb, infer_resnet18_ips.

Debian's python3-torch is only importable by /usr/bin/python3 (a pyenv `python3`
earlier on PATH will not see it), so run it as `/usr/bin/python3 bench/...`.

The script runs `KILN bench [PREFIX...]`, which prints one `name value unit`
line per figure (lines that do not parse are ignored), then measures the
figures it knows in PyTorch on this machine, in the same run and with the same
thread count (OMP/OpenBLAS/MKL thread variables are set before torch is
imported, and torch.set_num_threads(N) is called). Kiln runs first so that idle
OpenMP worker threads of torch cannot steal CPU from it.

It prints one markdown table (to stdout, and to FILE with --out):

    | figure | unit | Kiln | PyTorch | Kiln/PyTorch | better |

`better` follows the unit (or the name's suffix): lower wins for times and
memory (us, ms, s, MiB/mb), higher wins for rates and speedups (GFLOP/s/gflops,
ips, x); ratios within 2% count as a tie. Figures without a PyTorch
equivalent show `n/a`. The raw PyTorch figures also go to stderr as
`name value unit` lines.

To add a PyTorch benchmark, write a function returning its value and register
it in BENCHES as name -> (unit, function).
"""
import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time

import pytorch_gpt  # the GPT twin, beside this file

# Unit spellings (lower-cased) as Kiln prints them ("us", "s", "GFLOP/s",
# "MiB", "x") plus the name-suffix forms ("_gflops", "_mb", "_ips").
LOWER_BETTER = {"ns", "us", "ms", "s", "kb", "kib", "mb", "mib", "gb", "gib"}
HIGHER_BETTER = {"gflops", "gflop/s", "ips", "x", "speedup", "tokens/s"}
TIE_BAND = 0.02

torch = None  # imported in main() after the thread environment is set


def timed(fn, warmup, reps):
    """Run fn warmup times untimed, then return the list of reps wall times (s)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


# --- PyTorch benchmarks: each returns the figure in its unit ---------------
# Every figure is the best (fastest) of several timed repetitions after a
# warm-up, as Kiln's benchmarks report theirs (bench/bench.h): noise from other
# processes or frequency ramps only ever slows a run down, so the least
# disturbed run is the fairest to compare.

def bench_dispatch():
    # 1,000 x `y = x + 1` on a 1x2 float32 tensor; per-op wall time in us.
    # PyTorch on CPU is synchronous, so the same loop serves as both the async
    # and the sync figure.
    x = torch.ones(1, 2, dtype=torch.float32)

    def loop():
        for _ in range(1000):
            y = x + 1  # noqa: F841
    return min(timed(loop, warmup=5, reps=20)) / 1000 * 1e6


def bench_matmul(n):
    # fp32 n x n @ n x n; GFLOP/s = 2n^3 / t.
    a = torch.randn(n, n, dtype=torch.float32)
    b = torch.randn(n, n, dtype=torch.float32)
    c = torch.empty(n, n, dtype=torch.float32)
    reps = 10 if n <= 1024 else 5
    t = min(timed(lambda: torch.mm(a, b, out=c), warmup=2, reps=reps))
    return 2 * n ** 3 / t / 1e9


def bench_normal_dot():
    # d2l 12.2: 10 x (x = 1000x1000 standard normal sample; y = x @ x), total
    # seconds.
    def run():
        for _ in range(10):
            x = torch.normal(0.0, 1.0, size=(1000, 1000))
            y = torch.mm(x, x)  # noqa: F841
    return min(timed(run, warmup=1, reps=5))


# --- Training benchmarks: the models of models/zoo.cc -----------------------
# Synthetic batch of Fashion-MNIST's shape (256 x 1 x 28 x 28, labels 0..9),
# as bench/train_bench.cc. A training step is forward, cross-entropy, backward
# and an SGD step. Timings mirror Kiln's: LeNet best of 3 runs of 10 steps
# after 3 warm-up steps; ResNet-18 best of 3 single steps after one warm-up.

BATCH = 256


def lenet():
    # models::lenet: conv 20 3x3 relu, avg-pool 2, conv 50 5x5 relu, avg-pool 2,
    # dense 128 relu, dense 10.
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 20, 3), nn.ReLU(), nn.AvgPool2d(2, 2),
        nn.Conv2d(20, 50, 5), nn.ReLU(), nn.AvgPool2d(2, 2),
        nn.Flatten(), nn.Linear(800, 128), nn.ReLU(), nn.Linear(128, 10))


def resnet18():
    # models::resnet18 (d2l 12.6): 3x3 stride-1 stem with bias + BatchNorm +
    # relu, no max-pool, four stages of two residual blocks (1x1 stride-2
    # shortcut opening stages 2-4), global average pool, dense.
    nn = torch.nn

    class Residual(nn.Module):
        def __init__(self, cin, cout, stride, use_1x1):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
            self.conv3 = nn.Conv2d(cin, cout, 1, stride) if use_1x1 else None
            self.bn1 = nn.BatchNorm2d(cout)
            self.bn2 = nn.BatchNorm2d(cout)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (self.conv3(x) if self.conv3 is not None else x))

    layers = [nn.Conv2d(1, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for stage, cout in enumerate([64, 128, 256, 512]):
        for i in range(2):
            down = i == 0 and stage > 0
            layers.append(Residual(cin, cout, 2 if down else 1, down))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10)]
    return nn.Sequential(*layers)


def synthetic_batch():
    x = torch.rand(BATCH, 1, 28, 28)
    y = torch.arange(BATCH) % 10
    return x, y


def autocast(bf16):
    """torch.autocast('cpu', dtype=torch.bfloat16) when bf16, else nothing."""
    import contextlib
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def train_seconds(net, opt, x, y, steps, bf16=False):
    loss_fn = torch.nn.CrossEntropyLoss()
    with torch.enable_grad():
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            with autocast(bf16):
                loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
        return time.perf_counter() - t0


def bench_train(make, warmup, steps, bf16=False):
    torch.manual_seed(0)
    net = make().train()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    x, y = synthetic_batch()
    train_seconds(net, opt, x, y, warmup, bf16)
    best = min(train_seconds(net, opt, x, y, steps, bf16) for _ in range(3))
    return steps * BATCH / best, net, x


def bench_matmul_bf16(n):
    # bf16 n x n @ n x n (float32 accumulation inside oneDNN/MKL).
    a = torch.randn(n, n).to(torch.bfloat16)
    b = torch.randn(n, n).to(torch.bfloat16)
    t = min(timed(lambda: torch.mm(a, b), warmup=2, reps=5))
    return 2 * n ** 3 / t / 1e9


def bench_infer_resnet18_bf16():
    torch.manual_seed(0)
    net, x = resnet18().eval(), synthetic_batch()[0]

    def run():
        with torch.no_grad(), autocast(True):
            net(x)
    return BATCH / min(timed(run, warmup=1, reps=3))


_resnet18_cache = {}


def bench_train_resnet18():
    ips, net, x = bench_train(resnet18, warmup=1, steps=1)
    import resource  # ru_maxrss: KiB on Linux
    _resnet18_cache["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    _resnet18_cache["net"], _resnet18_cache["x"] = net, x
    return ips


def bench_train_resnet18_peak_mb():
    if "peak_mb" not in _resnet18_cache:
        bench_train_resnet18()
    return _resnet18_cache["peak_mb"]


def bench_infer_resnet18():
    net, x = _resnet18_cache.get("net"), _resnet18_cache.get("x")
    if net is None:
        torch.manual_seed(0)
        net, x = resnet18(), synthetic_batch()[0]
    net.eval()

    # Under no_grad, as an inference user runs it: Kiln's predict mode records
    # no autograd history either (without it PyTorch ran 30% slower here).
    def run():
        with torch.no_grad():
            net(x)
    return BATCH / min(timed(run, warmup=1, reps=3))


def mlp_chapter():
    return torch.nn.Sequential(torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                               torch.nn.ReLU(), torch.nn.Linear(128, 2))


def bench_mlp(frozen):
    """d2l 12.1: 1,000 calls of the MLP on a 1x512 input; us per call, best of 5.
    Kiln's imperative figure compares with eager, hybridized with
    torch.jit.trace + torch.jit.freeze."""
    torch.manual_seed(0)
    net = mlp_chapter().eval()
    x = torch.randn(1, 512)
    with torch.no_grad():
        f = torch.jit.freeze(torch.jit.trace(net, x)) if frozen else net
        for _ in range(100):
            f(x)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(1000):
                f(x)
            best = min(best, time.perf_counter() - t0)
    return best / 1000 * 1e6


def bench_infer_resnet18_frozen():
    """Kiln's hybridized inference against frozen TorchScript."""
    torch.manual_seed(0)
    net, x = resnet18().eval(), synthetic_batch()[0]
    with torch.no_grad():
        f = torch.jit.freeze(torch.jit.trace(net, x))

        def run():
            f(x)
        return BATCH / min(timed(run, warmup=2, reps=3))


# name -> (unit, function). Hybridized training figures compare with eager
# PyTorch (TorchScript has no standard compiled training step).
BENCHES = {
    "mlp_imperative_us": ("us", lambda: bench_mlp(False)),
    "mlp_hybridized_us": ("us", lambda: bench_mlp(True)),
    "infer_resnet18_hybridized_ips": ("img/s", bench_infer_resnet18_frozen),
    "train_lenet_hybridized_ips": ("img/s", lambda: bench_train(lenet, warmup=3, steps=10)[0]),
    "train_resnet18_hybridized_ips": ("img/s", bench_train_resnet18),
    "dispatch_async_us": ("us", bench_dispatch),
    "dispatch_sync_us": ("us", bench_dispatch),
    "matmul_1000_gflops": ("GFLOP/s", lambda: bench_matmul(1000)),
    "matmul_2048_gflops": ("GFLOP/s", lambda: bench_matmul(2048)),
    "normal_dot_10x_s": ("s", bench_normal_dot),
    "train_lenet_ips": ("img/s", lambda: bench_train(lenet, warmup=3, steps=10)[0]),
    "train_resnet18_ips": ("img/s", bench_train_resnet18),
    "train_resnet18_peak_mb": ("MiB", bench_train_resnet18_peak_mb),
    "infer_resnet18_ips": ("img/s", bench_infer_resnet18),
    # Mixed precision: torch.autocast('cpu', dtype=torch.bfloat16), eager.
    "matmul_2048_bf16_gflops": ("GFLOP/s", lambda: bench_matmul_bf16(2048)),
    "train_lenet_bf16_ips": ("img/s", lambda: bench_train(lenet, warmup=3, steps=10, bf16=True)[0]),
    "train_resnet18_bf16_ips": ("img/s", lambda: bench_train(resnet18, warmup=1, steps=1, bf16=True)[0]),
    "infer_resnet18_bf16_ips": ("img/s", bench_infer_resnet18_bf16),
}
BENCHES.update(pytorch_gpt.BENCHES)  # train_gpt_*, generate_gpt_tokens_per_s


# --- Kiln side -------------------------------------------------------------

def parse_figures(text):
    """Parse `name value unit` lines into an ordered dict name -> (value, unit)."""
    figures = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        try:
            figures[parts[0]] = (float(parts[1]), parts[2])
        except ValueError:
            continue
    return figures


def run_kiln(path, prefixes):
    try:
        proc = subprocess.run([path, "bench", *prefixes], capture_output=True,
                              text=True)
    except OSError as e:
        sys.exit(f"cannot run {path}: {e} (build it, or use --skip-kiln)")
    if proc.returncode != 0:
        print(f"warning: {path} bench exited with {proc.returncode}:\n"
              f"{proc.stderr.strip()}", file=sys.stderr)
    return parse_figures(proc.stdout)


# --- Report ----------------------------------------------------------------

def machine_header(threads):
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
            cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    cfg = torch.__config__.show()
    blas = ", ".join(f"{k}={v}" for k, v in
                     re.findall(r"(BLAS_INFO|LAPACK_INFO)=(\w+)", cfg)) or "unknown"
    try:  # which BLAS library is actually mapped into this process
        with open("/proc/self/maps") as f:
            libs = sorted({os.path.basename(l.split()[-1]) for l in f
                           if re.search(r"lib(open)?blas|libmkl", l)})
        blas += f" ({', '.join(libs)})" if libs else ""
    except OSError:
        pass
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{date} | {cpu}, {os.cpu_count()} cores | torch {torch.__version__}"
            f" | BLAS: {blas} | threads: {threads}")


def fmt(v):
    return "n/a" if v is None else f"{v:.4g}"


def lower_is_better(name, unit):
    """True/False from the unit, else from the name's suffix; None if unknown."""
    for key in (unit.lower(), name.rsplit("_", 1)[-1].lower()):
        if key in LOWER_BETTER or key in HIGHER_BETTER:
            return key in LOWER_BETTER
    return None


def verdict(name, kiln, pt, unit):
    if kiln is None or pt is None or pt == 0 or kiln == 0:
        return "n/a"
    ratio = kiln / pt
    if abs(ratio - 1) <= TIE_BAND:
        return "tie"
    lower = lower_is_better(name, unit)
    if lower is None:
        return "?"
    return "Kiln" if (ratio < 1) == lower else "PyTorch"


def table(kiln, pt):
    rows = ["| figure | unit | Kiln | PyTorch | Kiln/PyTorch | better |",
            "|---|---|---:|---:|---:|---|"]
    for name in list(kiln) + [n for n in pt if n not in kiln]:
        k, unit = kiln.get(name, (None, None))
        p, pt_unit = pt.get(name, (None, None))
        unit = unit or pt_unit
        ratio = fmt(k / p) if k is not None and p else "n/a"
        rows.append(f"| {name} | {unit} | {fmt(k)} | {fmt(p)} | {ratio} | "
                    f"{verdict(name, k, p, unit)} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default="build/kiln", help="kiln executable")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--only", nargs="+", default=[], metavar="PREFIX",
                    help="only figures whose name starts with a PREFIX")
    ap.add_argument("--skip-kiln", action="store_true", help="only run PyTorch")
    ap.add_argument("--out", help="also write the markdown to FILE")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate Kiln and PyTorch this many times and keep "
                         "each side's best figure (for busy machines)")
    args = ap.parse_args()

    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)  # inherited by kiln as well

    kiln, pt = {}, {}
    for _ in range(max(1, args.rounds)):
        if not args.skip_kiln:
            keep_best(kiln, run_kiln(args.kiln, args.only))
        keep_best(pt, run_torch(args))

    report = f"{machine_header(args.threads)}"
    if args.rounds > 1:
        report += f" | best of {args.rounds} alternating rounds"
    report += f"\n\n{table(kiln, pt)}\n"
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)


def keep_best(best, figures):
    """Merge `figures` into `best`, keeping the better value of each figure."""
    for name, (value, unit) in figures.items():
        lower = lower_is_better(name, unit)
        if name in best and lower is not None:
            old = best[name][0]
            if (value >= old) if lower else (value <= old):
                continue
        elif name in best:
            continue
        best[name] = (value, unit)


def run_torch(args):
    """PyTorch's figures (imports torch on the first call)."""
    global torch
    if torch is not None:
        return measure_torch(args)
    try:
        import torch as _torch
    except ImportError:
        sys.exit(f"torch is not importable by {sys.executable}; Debian's "
                 "python3-torch is for /usr/bin/python3")
    torch = _torch
    torch.set_num_threads(args.threads)
    pytorch_gpt.init_torch(args.threads)
    return measure_torch(args)


def measure_torch(args):
    torch.manual_seed(0)
    _resnet18_cache.clear()
    pt = {}
    for name, (unit, fn) in BENCHES.items():
        if args.only and not any(name.startswith(p) for p in args.only):
            continue
        with torch.no_grad():
            pt[name] = (fn(), unit)
        print(f"{name} {pt[name][0]:.6g} {unit}", file=sys.stderr, flush=True)
    return pt


if __name__ == "__main__":
    main()
