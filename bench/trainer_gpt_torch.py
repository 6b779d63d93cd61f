"""dttrain --model gpt against the same transformer in PyTorch, tokens/s in the same run.

The workload is identical on both sides: a byte-level GPT (token + learned position
embeddings, pre-LayerNorm blocks with causal multi-head self-attention and a 4x GELU (tanh)
MLP, final LayerNorm, head tied to the token embedding), the same layers / heads / dim /
context / global batch, AdamW (betas 0.9, 0.95, weight decay 0.1 on matrices and
embeddings) with warmup + cosine, on random windows of the same text file.  The PyTorch
model is written out here layer by layer (torch 1.13 has no fused attention), so both run
the same arithmetic: GEMMs through OpenBLAS, attention as two batched GEMMs around a masked
softmax.  Tokens/s over steps [10, STEPS) (start-up excluded), best of ROUNDS rounds, the
contenders interleaved within each round so machine load hits all alike:

    dttrain                 --threads T (OpenBLAS T threads)
    torch, T threads        torch.set_num_threads(T)
    torch, 1 + OpenBLAS T   torch.set_num_threads(1), OPENBLAS_NUM_THREADS=T

Prints a table and the ratio dttrain / best torch.

On a machine shared with other work, wall-clock rates swing with the load (a round can
lose half its speed to another process).  --cpu adds a load-robust second measure: every
contender on ONE thread (dttrain --threads 1; torch.set_num_threads(1) with
OPENBLAS_NUM_THREADS=1), tokens per CPU-second of the process (getrusage of the child),
from two runs of 10 and STEPS steps so start-up (imports, data, allocation) cancels out.

    /usr/bin/python3 bench/trainer_gpt_torch.py --dttrain build/dev-gpt/bin/dttrain
    /usr/bin/python3 bench/trainer_gpt_torch.py --torch-only --threads 2     # one torch run
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

DEFAULT_TEXT = "/usr/share/common-licenses/GPL-3"   # Debian base-files: on every system


def torch_run(args):
    """One PyTorch measurement; returns tokens/s over steps [warmup, steps)."""
    import torch
    import torch.nn.functional as F

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data = torch.tensor(list(open(args.text, "rb").read()), dtype=torch.long)
    n_train = len(data) - int(len(data) * 0.1)
    data = data[:n_train]
    V, C, T, H, L = 256, args.dim, args.context, args.heads, args.layers
    hs = C // H

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(C)
            self.qkv = torch.nn.Linear(C, 3 * C)
            self.proj = torch.nn.Linear(C, C)
            self.ln2 = torch.nn.LayerNorm(C)
            self.fc = torch.nn.Linear(C, 4 * C)
            self.fcproj = torch.nn.Linear(4 * C, C)

        def forward(self, x, mask):
            B = x.shape[0]
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q = q.view(B, T, H, hs).transpose(1, 2)
            k = k.view(B, T, H, hs).transpose(1, 2)
            v = v.view(B, T, H, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + self.proj(y)
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(V, C)
            self.wpe = torch.nn.Embedding(T, C)
            self.blocks = torch.nn.ModuleList([Block() for _ in range(L)])
            self.lnf = torch.nn.LayerNorm(C)
            self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))
            self.register_buffer("pos", torch.arange(T))

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(self.pos)
            for b in self.blocks:
                x = b(x, self.mask)
            logits = self.lnf(x) @ self.wte.weight.t()   # tied head
            return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    model = GPT()
    # GPT-2's initialisation, as dttrain's: N(0, 0.02), residual projections / sqrt(2 L)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            torch.nn.init.zeros_(p)
        elif p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
            torch.nn.init.normal_(p, 0.0, std)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    warm = 10

    def lr_at(s):
        if s < warm:
            return (s + 1) / warm
        t = (s - warm) / max(1, args.steps - warm - 1)
        return 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    g = torch.Generator().manual_seed(args.seed)
    offs = torch.arange(T + 1)
    t0 = None
    for step in range(args.steps):
        if step == args.warmup:
            t0 = time.perf_counter()
        starts = torch.randint(0, n_train - T, (args.batch,), generator=g)
        win = data[starts[:, None] + offs]
        opt.zero_grad(set_to_none=True)
        loss = model(win[:, :-1], win[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    dt = time.perf_counter() - t0
    return (args.steps - args.warmup) * args.batch * T / dt, loss.item()


def child_cpu(cmd, env=None):
    """Run cmd; the CPU seconds (user + sys) it used."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cpu_rates(args, tmp):
    """Tokens per CPU-second, one thread each: (runs of STEPS - runs of 10) / CPU difference."""
    one = argparse.Namespace(**vars(args))
    one.threads = 1
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = {}
    for name in ("dttrain", "torch"):
        cpu = {}
        for steps in (10, args.steps):
            one.steps = steps
            if name == "dttrain":
                cmd = dttrain_cmd(one, os.path.join(tmp, "c.jsonl"))
            else:
                cmd = torch_cmd(one, 1)
                cmd[cmd.index("--warmup") + 1] = "0"
            cpu[steps] = child_cpu(cmd, env)
        out[name] = (args.steps - 10) * args.batch * args.context / (cpu[args.steps] - cpu[10])
    return out


def dttrain_run(args, metrics):
    subprocess.run(dttrain_cmd(args, metrics), check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in open(metrics) if '"tokens_per_s"' in line]
    t = {r["step"]: r["time"] for r in rows}
    loss = [r["loss"] for r in rows if r["step"] == args.steps][0]
    return (args.steps - args.warmup) * args.batch * args.context / (t[args.steps] - t[args.warmup]), loss


def dttrain_cmd(args, metrics):
    return [args.dttrain, "--model", "gpt", "--data", "text:" + args.text, "--layers",
           str(args.layers), "--heads", str(args.heads), "--dim", str(args.dim), "--context",
           str(args.context), "--batch", str(args.batch), "--steps", str(args.steps),
           "--optimizer", "adamw", "--lr", str(args.lr), "--beta2", "0.95", "--weight-decay",
           "0.1", "--warmup", "10", "--clip", "1.0", "--log-every", str(args.warmup),
           "--eval-every", str(10 ** 9), "--val-fraction", "0.1", "--val-size", "1",
           "--threads", str(args.threads), "--device", "cpu", "--seed", str(args.seed),
           "--metrics", metrics, "-q"]


def torch_cmd(args, threads):
    cmd = [sys.executable, __file__, "--torch-only", "--threads", str(threads)]
    for k in ("text", "layers", "heads", "dim", "context", "batch", "steps", "warmup", "lr",
              "seed"):
        cmd += ["--" + k, str(getattr(args, k))]
    return cmd


def torch_subprocess(args, threads, openblas):
    env = dict(os.environ)
    if openblas:
        env["OPENBLAS_NUM_THREADS"] = str(openblas)
    out = subprocess.run(torch_cmd(args, threads), check=True, env=env, capture_output=True,
                         text=True).stdout.split()
    return float(out[1]), float(out[3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dttrain", default="bin/dttrain")
    ap.add_argument("--torch-only", action="store_true", help="one torch run, one line out")
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10, help="steps not timed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cpu", action="store_true",
                    help="also tokens per CPU-second on one thread (load-robust)")
    args = ap.parse_args()
    if args.torch_only:
        tps, loss = torch_run(args)
        print(f"torch {tps:.0f} loss {loss:.4f}")
        return
    load0 = open("/proc/loadavg").read().split()[:3]
    res = {"dttrain": [], "torch": [], "torch1": []}
    losses = {}
    cpu = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            if args.cpu:
                cpu.append(cpu_rates(args, tmp))
                print(f"round (cpu): dttrain {cpu[-1]['dttrain']:.0f} torch {cpu[-1]['torch']:.0f}",
                      file=sys.stderr, flush=True)
            tps, losses["dttrain"] = dttrain_run(args, os.path.join(tmp, "m.jsonl"))
            res["dttrain"].append(tps)
            tps, losses["torch"] = torch_subprocess(args, args.threads, 0)
            res["torch"].append(tps)
            tps, losses["torch1"] = torch_subprocess(args, 1, args.threads)
            res["torch1"].append(tps)
            print("round: " + " ".join(f"{k} {v[-1]:.0f}" for k, v in res.items()),
                  file=sys.stderr, flush=True)
    names = {"dttrain": f"dttrain, --threads {args.threads}",
             "torch": f"torch, {args.threads} threads",
             "torch1": f"torch, 1 thread + OpenBLAS {args.threads}"}
    print(f"gpt L{args.layers} H{args.heads} C{args.dim} T{args.context}, batch {args.batch}, "
          f"steps {args.warmup}-{args.steps} timed, best of {args.rounds}")
    print(f"load average before/after: {' '.join(load0)} / "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
    print(f"{'contender':36} {'tokens/s':>9}   each round (last loss)")
    for k, v in res.items():
        print(f"{names[k]:36} {max(v):9.0f}   {' '.join(f'{x:.0f}' for x in v)} "
              f"({losses[k]:.3f})")
    best_torch = max(max(res["torch"]), max(res["torch1"]))
    print(f"ratio dttrain / best torch: {max(res['dttrain']) / best_torch:.2f}x")
    if cpu:
        print(f"{'one thread, tokens per CPU-second':36} {'best':>9}   each round")
        for k in ("dttrain", "torch"):
            v = [c[k] for c in cpu]
            print(f"{k:36} {max(v):9.0f}   {' '.join(f'{x:.0f}' for x in v)}")
        per_round = " ".join(f"{c['dttrain'] / c['torch']:.2f}" for c in cpu)
        print("ratio dttrain / torch per CPU-second: "
              f"{max(c['dttrain'] for c in cpu) / max(c['torch'] for c in cpu):.2f}x "
              f"(each round: {per_round})")


if __name__ == "__main__":
    main()
