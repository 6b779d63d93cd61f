#!/usr/bin/env python3
"""dttrain on a GPU against PyTorch eager and torch.compile, in one run (issue #18).

The same MLP on both sides (ReLU, SGD momentum 0.9, cosine lr, cross-entropy, random
data resident on the GPU), two shapes: the CPU benchmark's 784-1024-1024-10 at batch
256 and a GPU-sized 4096-4096-4096-4096-1000 at batch 4096; bf16 (fp32 master weights
on both sides: torch.autocast) and fp32.  Samples/s after warm-up, best of --rounds
with the contenders interleaved in each round, and each as a fraction of the ceiling
that cuBLAS alone gives at those shapes: the forward and backward GEMMs of one step
(3 per layer: Y = XW, dX = dY Wt, dW = Xt dY) timed back to back with CUDA events.

    python3 bench/trainer_gpu.py --dttrain bin/dttrain [--rounds 3] [--steps 200]
    python3 bench/trainer_gpu.py --dttrain bin/dttrain --device cpu --steps 20   # dry run

Prints a table and writes --json FILE (figures + device) for docs/BENCHMARKS.md.
"""

import argparse
import json
import math
import re
import subprocess
import sys
import time

import torch

SHAPES = {"small": ([784, 1024, 1024, 10], 256),
          "large": ([4096, 4096, 4096, 4096, 1000], 4096)}


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def torch_rate(widths, batch, steps, warmup, dev, precision, compiled):
    torch.manual_seed(1)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(dev)
    rows = batch * 8
    x = torch.randn(rows, widths[0], device=dev)
    y = torch.randint(0, widths[-1], (rows,), device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, steps - 1) / max(steps - 1, 1))))
    loss_fn = torch.nn.CrossEntropyLoss()
    fwd = torch.compile(model) if compiled else model
    dtype = torch.bfloat16 if precision == "bf16" else None
    t0 = None
    for step in range(steps):
        if step == warmup:
            sync(dev)
            t0 = time.perf_counter()
        b = step % 8
        xb, yb = x[b * batch:(b + 1) * batch], y[b * batch:(b + 1) * batch]
        opt.zero_grad(set_to_none=True)
        if dtype is not None:
            with torch.autocast(device_type=dev, dtype=dtype):
                loss = loss_fn(fwd(xb), yb)
        else:
            loss = loss_fn(fwd(xb), yb)
        loss.backward()
        opt.step()
        sched.step()
    sync(dev)
    return (steps - warmup) * batch / (time.perf_counter() - t0)


def gemm_ceiling(widths, batch, dev, precision, reps=20):
    """Samples/s if a step were only its GEMMs, run by cuBLAS (torch.matmul) alone."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    mats = []
    for i in range(len(widths) - 1):
        a, b = widths[i], widths[i + 1]
        X = torch.randn(batch, a, device=dev, dtype=dtype)
        W = torch.randn(a, b, device=dev, dtype=dtype)
        dY = torch.randn(batch, b, device=dev, dtype=dtype)
        mats.append((X, W, dY))

    def step():
        for X, W, dY in mats:
            X @ W
            dY @ W.t()
            X.t() @ dY

    for _ in range(3):
        step()
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(reps):
        step()
    sync(dev)
    dt = (time.perf_counter() - t0) / reps
    flops = sum(6 * batch * widths[i] * widths[i + 1] for i in range(len(widths) - 1))
    return batch / dt, flops / dt / 1e12


def dttrain_rate(exe, widths, batch, steps, dev, precision):
    hidden = ",".join(str(w) for w in widths[1:-1])
    argv = [exe, "--device", dev, "--hidden", hidden, "--input-dim", str(widths[0]),
            "--classes", str(widths[-1]), "--batch", str(batch), "--steps", str(steps),
            "--train-size", str(batch * 8), "--val-size", str(batch), "--quiet",
            "--eval-every", "0"]
    if dev == "cuda":
        argv += ["--precision", precision]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    m = re.search(r"done: \d+ steps, ([0-9.]+) samples/s", p.stdout)
    if p.returncode != 0 or not m:
        raise RuntimeError("dttrain failed (%d): %s%s" % (p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dttrain", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--shapes", default="small,large")
    ap.add_argument("--precisions", default="bf16,fp32")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    dev = a.device
    if dev == "cuda" and not torch.cuda.is_available():
        sys.exit("trainer_gpu: no CUDA device visible to PyTorch")
    can_compile = hasattr(torch, "compile")
    info = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
            "torch": torch.__version__, "steps": a.steps, "warmup": a.warmup,
            "rounds": a.rounds, "results": []}
    print("device: %s, torch %s%s" % (info["device"], torch.__version__,
                                      "" if can_compile else " (no torch.compile)"))
    print("%-6s %-5s %-14s %12s %10s  %s" % ("shape", "prec", "contender", "samples/s",
                                             "of GEMM", "rounds"))
    for shape in a.shapes.split(","):
        widths, batch = SHAPES[shape]
        for prec in a.precisions.split(","):
            if dev == "cpu" and prec != "fp32":
                continue
            ceil, tflops = gemm_ceiling(widths, batch, dev, prec)
            runs = {"dttrain": [], "torch eager": []}
            if can_compile:
                runs["torch.compile"] = []
            for _ in range(a.rounds):
                runs["dttrain"].append(dttrain_rate(a.dttrain, widths, batch, a.steps, dev, prec))
                runs["torch eager"].append(torch_rate(widths, batch, a.steps, a.warmup, dev, prec, False))
                if can_compile:
                    runs["torch.compile"].append(torch_rate(widths, batch, a.steps, a.warmup, dev,
                                                            prec, True))
            best = {k: max(v) for k, v in runs.items()}
            for k, v in runs.items():
                print("%-6s %-5s %-14s %12.0f %9.0f%%  %s" % (shape, prec, k, best[k],
                      100 * best[k] / ceil, " ".join("%.0f" % x for x in v)))
            print("%-6s %-5s %-14s %12.0f %10s  (%.2f TFLOP/s)" % (shape, prec, "cuBLAS GEMMs",
                                                                  ceil, "100%", tflops))
            ratios = {"vs eager": best["dttrain"] / best["torch eager"]}
            if can_compile:
                ratios["vs compile"] = best["dttrain"] / best["torch.compile"]
            print("%-6s %-5s dttrain %s" % (shape, prec, ", ".join(
                "%s %.2fx" % kv for kv in ratios.items())))
            info["results"].append({"shape": shape, "widths": widths, "batch": batch,
                                    "precision": prec, "runs": runs, "best": best,
                                    "gemm_ceiling": ceil, "gemm_tflops": tflops,
                                    "ratios": ratios})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
