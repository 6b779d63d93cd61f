#!/usr/bin/env python3
"""bench/trainer_gpt_pipeline.py - dttrain --model gpt split into P pipeline stages.

The same byte-level GPT (4 blocks, dim 128, context 64, batch 32 = 2048 tokens a step,
AdamW) trained on /usr/share/common-licenses/GPL-3 by: one rank with 1 thread and with 2
threads (the baselines a user would otherwise pick), and P = 2 and 4 stages, one rank per
stage with 1 thread each, --micro-batches M (GPipe), all under mpirun on this machine.
Per round (contenders interleaved) it prints tokens/s (dttrain's own "done:" line:
training only) and, for the pipelines, the bubble dttrain measured (time blocked on the
neighbouring stages over the schedule's time) next to GPipe's ideal (P-1)/(M+P-1); then
the best round of each, the ratios to one rank, and the load average.  Also tokens per
CPU-second of the whole job (every rank and mpirun, start-up included, from getrusage of
the waited-for children): what the work cost, less disturbed by a loaded machine than
the wall clock.

    make bench-trainer-gpt-pipeline                # or:
    bench/trainer_gpt_pipeline.py --dttrain bin/dttrain --steps 20 --rounds 3
"""

import argparse
import os
import re
import resource
import subprocess
import sys

TEXT = "/usr/share/common-licenses/GPL-3"


def run(args, P, threads):
    model = ["--model", "gpt", "--data", f"text:{TEXT}", "--layers", "4", "--heads", "4",
             "--dim", "128", "--context", "64", "--batch", "32", "--optimizer", "adamw",
             "--lr", "1e-3", "--steps", str(args.steps), "--log-every", "0",
             "--eval-every", "0", "--val-fraction", "0.01", "--device", "cpu",
             "--threads", str(threads)]
    cmd = [args.dttrain, *model]
    if P > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(P), *cmd,
               "--pipeline", str(P), "--micro-batches", str(args.micro_batches)]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="self,vader", OMPI_MCA_mpi_yield_when_idle="1")
    if args.single_copy:
        env["OMPI_MCA_btl_vader_single_copy_mechanism"] = args.single_copy
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if r.returncode:
        sys.exit(f"trainer_gpt_pipeline: P={P} failed ({r.returncode}):\n{r.stderr}")
    tok = re.search(r"done: \d+ steps, \d+ samples/s, (\d+) tokens/s", r.stdout)
    bub = re.search(r"pipeline: bubble ([\d.]+)% .* = ([\d.]+)%\)", r.stdout)
    split = re.search(r"; layers (.*)", r.stdout)
    if not tok:
        sys.exit(f"trainer_gpt_pipeline: no tokens/s in:\n{r.stdout}")
    tokens = args.steps * 32 * 64
    return (int(tok.group(1)), float(bub.group(1)) if bub else None,
            float(bub.group(2)) if bub else None, split.group(1) if split else "",
            tokens / cpu)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dttrain", default="bin/dttrain")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--single-copy", default="",
                    help="Open MPI btl_vader_single_copy_mechanism (default: Open MPI's "
                         "choice, CMA where ptrace allows; 'none' as the e2e tests set it)")
    args = ap.parse_args()
    contenders = [("1 rank, 1 thread", 1, 1), ("1 rank, 2 threads", 1, 2),
                  ("P=2 (2 ranks x 1 thread)", 2, 1), ("P=4 (4 ranks x 1 thread)", 4, 1)]
    res = {c[0]: [] for c in contenders}
    loads = [os.getloadavg()[0]]
    for rnd in range(args.rounds):
        for name, P, threads in contenders:
            tok, bubble, ideal, split, per_cpu = run(args, P, threads)
            res[name].append((tok, bubble, ideal, split, per_cpu))
            extra = f", bubble {bubble:.1f}% (ideal {ideal:.1f}%), layers {split}" \
                if bubble is not None else ""
            print(f"round {rnd + 1}: {name}: {tok} tokens/s, {per_cpu:.0f} tokens per "
                  f"CPU-second{extra}", flush=True)
        loads.append(os.getloadavg()[0])
    base = max(t for t, *_ in res["1 rank, 1 thread"])
    base2 = max(t for t, *_ in res["1 rank, 2 threads"])
    print(f"\n| contender | tokens/s, best of {args.rounds} | each round | bubble (each round) "
          f"| vs 1 rank 1 thread | vs 1 rank 2 threads | tokens per CPU-second, best |")
    print("|---|---|---|---|---|---|---|")
    for name, *_ in contenders:
        toks = [t for t, *_ in res[name]]
        bubs = [b for _, b, *_ in res[name] if b is not None]
        ideal = res[name][0][2]
        btxt = " ".join(f"{b:.1f}%" for b in bubs) + f" (ideal {ideal:.1f}%)" if bubs else ""
        print(f"| {name} | {max(toks)} | {' '.join(map(str, toks))} | {btxt} | "
              f"{max(toks) / base:.2f}x | {max(toks) / base2:.2f}x | "
              f"{max(x[4] for x in res[name]):.0f} |")
    print(f"\nload average (1 min) over the run: {min(loads):.1f}-{max(loads):.1f}")


if __name__ == "__main__":
    main()
