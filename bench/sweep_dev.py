#!/usr/bin/env python3
"""sweep_dev.py - compare sweep_sim variants on development seeds (dtctl only).

Runs bench/sweep_sim once per seed and objective for a baseline and for each
variant (extra sweep_sim options), and prints the median regret per objective
and, for mlp, the runs stuck in the adam family (regret > 0.1).  No Optuna,
so 800 seeds x 3 objectives take about a minute per variant.  Seeds 0-9 are
the reported ones: this script refuses them.

    python3 bench/sweep_dev.py --sim build/dev-x/bench/sweep_sim \\
        --seed-start 100 --seeds 800 --variant '--min-peers 2' --variant '--eta 4'
"""
import argparse
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

STUCK = 0.1   # mlp: the adam family's best regret is 0.107, sgd's 0.068


def run(sim, name, seed, extra):
    out = subprocess.run([sim, name, "--seed", str(seed), *extra],
                         check=True, capture_output=True, text=True).stdout
    kv = dict(item.split("=") for item in out.split())
    return float(kv["regret"]), int(kv["trials"])


def measure(sim, objectives, seeds, extra, jobs):
    res = {}
    with ThreadPoolExecutor(jobs) as ex:
        for name in objectives:
            rs = list(ex.map(lambda s: run(sim, name, s, extra), seeds))
            res[name] = ([r for r, _ in rs], [t for _, t in rs])
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sim", required=True)
    ap.add_argument("--seed-start", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=800)
    ap.add_argument("--objectives", default="mlp,branin,hartmann6")
    ap.add_argument("--baseline", default="", help="sweep_sim options of the baseline")
    ap.add_argument("--variant", action="append", default=[],
                    help="sweep_sim options of a variant (repeatable)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    if args.seed_start < 10:
        sys.exit("sweep_dev: seeds 0-9 are the reported evaluation seeds; start at 100")
    seeds = range(args.seed_start, args.seed_start + args.seeds)
    objectives = args.objectives.split(",")
    print("seeds %d-%d, median regret (mean trials); mlp stuck = regret > %g" %
          (seeds[0], seeds[-1], STUCK))
    print("| variant | " + " | ".join(objectives) + " | mlp stuck |")
    print("|---|" + "---|" * (len(objectives) + 1))
    for opts in [args.baseline] + args.variant:
        res = measure(args.sim, objectives, seeds, opts.split(), args.jobs)
        cells = ["%.4f (%.0f)" % (statistics.median(res[n][0]), statistics.mean(res[n][1]))
                 for n in objectives]
        stuck = sum(r > STUCK for r in res["mlp"][0]) if "mlp" in res else 0
        print("| %s | %s | %d |" % (opts or "(baseline)", " | ".join(cells), stuck),
              flush=True)


if __name__ == "__main__":
    main()
