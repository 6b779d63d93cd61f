"""PyTorch twin of dttrain's benchmark workload (bench/trainer_cpu.sh runs it).

The same MLP (784-1024-1024-10, ReLU), the same global batch, SGD with momentum 0.9 and
a cosine learning rate, on random data of the same shape, with a per-epoch shuffle and
batch gathering like dttrain's.  Prints one line: "torch <threads> <samples/s>", the
rate over steps [warmup, steps) so start-up and the first allocations are not counted.

    OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/trainer_torch.py --threads 1 --steps 60
"""

import argparse
import math
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", default="1024,1024")
    ap.add_argument("--rows", type=int, default=16384)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    widths = [784] + [int(w) for w in args.hidden.split(",")] + [10]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    x = torch.randn(args.rows, 784)
    y = torch.randint(0, 10, (args.rows,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, args.steps - 1) / (args.steps - 1))))
    loss_fn = torch.nn.CrossEntropyLoss()
    per_epoch = (args.rows + args.batch - 1) // args.batch
    perm = None
    t0 = None
    for step in range(args.steps):
        if step == args.warmup:
            t0 = time.perf_counter()
        b = step % per_epoch
        if b == 0:
            perm = torch.randperm(args.rows)
        idx = perm[b * args.batch:(b + 1) * args.batch]
        xb, yb = x[idx], y[idx]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        sched.step()
    dt = time.perf_counter() - t0
    print(f"torch {args.threads or torch.get_num_threads()} "
          f"{(args.steps - args.warmup) * args.batch / dt:.0f} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
