#!/usr/bin/env python3
"""bench/trainer_async.py - dttrain --sync async against --sync sync with one slow rank.

Two MPI ranks on this machine (mpirun), rank 1 slowed by --slow-rank 1:MS (it sleeps MS ms
after every step, as a straggler would).  Both modes run the same number of rank-0 steps
(or --async-steps for async, to give both about the same wall time) of the same MLP on the same synthetic task and validate every --every steps; the metrics
file gives validation loss against wall time.  Printed, per round and mode: run time,
final validation loss, validation loss at equal wall time (the time the faster run ended; the slower run's last
validation before it), time to a target loss (the worse of the two final losses, which
both reach) and the ratios sync / async.

    make bench-trainer-async                       # or:
    bench/trainer_async.py --dttrain build/dev-train/bin/dttrain --steps 240 --slow-ms 50
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def run(args, mode, metrics):
    steps = args.async_steps if mode == "async" and args.async_steps else args.steps
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", args.dttrain,
           "--input-dim", str(args.input_dim), "--train-size", str(args.train_size),
           "--hidden", args.hidden, "--batch", str(args.batch), "--lr", str(args.lr),
           "--steps", str(steps), "--eval-every", str(args.every), "--val-size", "2048",
           "--threads", "1", "--device", "cpu", "--log-every", "0", "--metrics", metrics,
           "--sync", mode, "--sync-every", str(args.every),
           "--slow-rank", f"1:{args.slow_ms}"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_btl_vader_single_copy_mechanism="none",
               OMPI_MCA_mpi_yield_when_idle="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode:
        sys.exit(f"trainer_async: {mode} run failed ({r.returncode}):\n{r.stderr}")
    steps = next((ln for ln in r.stdout.splitlines() if ln.startswith("async: local steps")),
                 "")
    curve = [(x["time"], x["val_loss"]) for x in map(json.loads, open(metrics))
             if "val_loss" in x]
    return curve, steps


def loss_at(curve, t):
    """Validation loss of the last validation at or before wall time t."""
    seen = [v for (ts, v) in curve if ts <= t]
    return seen[-1] if seen else float("nan")


def time_to(curve, target):
    return next((ts for (ts, v) in curve if v <= target), float("nan"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dttrain", default=os.environ.get("DTTRAIN", "bin/dttrain"))
    ap.add_argument("--steps", type=int, default=240, help="rank-0 steps per run (240)")
    ap.add_argument("--async-steps", type=int, default=0,
                    help="rank-0 steps of the async run (default --steps; more, for about "
                         "the same wall time as sync)")
    ap.add_argument("--every", type=int, default=8, help="--sync-every and --eval-every (8)")
    ap.add_argument("--slow-ms", type=int, default=50, help="rank 1 sleeps this per step (50)")
    ap.add_argument("--hidden", default="256,256")
    ap.add_argument("--input-dim", type=int, default=256)
    ap.add_argument("--train-size", type=int, default=65536,
                    help="synthetic rows (65536: no run sees them 3 times, so the "
                         "validation loss measures learning, not memorising)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if not shutil.which("mpirun"):
        sys.exit("trainer_async: mpirun not found (make deps installs Open MPI)")
    if not os.access(args.dttrain, os.X_OK):
        sys.exit(f"trainer_async: '{args.dttrain}' not built (make, or --dttrain)")
    print(f"2 ranks, rank 1 +{args.slow_ms} ms/step; MLP {args.input_dim}-"
          f"{args.hidden.replace(',', '-')}-10, {args.train_size} rows, "
          f"batch {args.batch}, {args.steps} steps (async {args.async_steps or args.steps}), "
          f"validation every {args.every}, "
          f"async averages every {args.every}")
    print(f"{'round':>5} {'mode':>5} {'time s':>7} {'final loss':>10} {'loss at T':>9} "
          f"{'T s':>6} {'target':>7} {'time to target s':>16}  local steps")
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(1, args.rounds + 1):
            got = {}
            for mode in ("sync", "async"):
                got[mode] = run(args, mode, os.path.join(tmp, f"{mode}-{rnd}.jsonl"))
            ends = {m: c[-1][0] for m, (c, _) in got.items()}
            t_eq = min(ends.values())
            target = max(c[-1][1] for (c, _) in got.values())
            res = {}
            for mode, (curve, steps) in got.items():
                res[mode] = (loss_at(curve, t_eq), time_to(curve, target))
                print(f"{rnd:>5} {mode:>5} {ends[mode]:>7.2f} {curve[-1][1]:>10.4f} "
                      f"{res[mode][0]:>9.4f} "
                      f"{t_eq:>6.2f} {target:>7.4f} {res[mode][1]:>16.2f}  "
                      f"{steps.replace('async: local steps per rank: ', '') or '-'}")
            print(f"{rnd:>5} ratio sync/async: run time {ends['sync'] / ends['async']:.2f}x, "
                  f"time to target {res['sync'][1] / res['async'][1]:.2f}x; loss at "
                  f"T={t_eq:.2f}s sync {res['sync'][0]:.4f} vs async {res['async'][0]:.4f}")


if __name__ == "__main__":
    main()
