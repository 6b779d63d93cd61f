#!/usr/bin/python3
"""bench_sweep_quality.py - sweep search quality: dtctl's TPE + ASHA against
Optuna's TPESampler + SuccessiveHalvingPruner, on the same simulated
training runs, in the same run.

Each objective is a learning curve over epochs 1..E (see bench/sweep_sim.c,
whose formulas this file repeats and must match):

    loss(x, e) = f(x) + amp(x) * e**-rate(x) + noise * N(0, 1)

Both sides run trials on --workers simulated workers (4, as a sweep with
`parallel: 4`; 1 runs them one after another, the figures before parallel
arrivals), each trial's epochs taking a time drawn once per trial
(trial_epoch_time(), the same for both sides' k-th trial), so reports
reach the pruners interleaved, in the order of a clock.  Both report every
epoch to their pruner (rungs at min_iter * eta**k below E), count every
epoch against the same budget of trial-epochs, and score the lowest loss
reported.  Regret is that score minus the global minimum of f (a floor no
run reaches, since the curve's residual at epoch E is positive).

    make bench-deps && make BUILD=dev-sweep bench-sweep
    /usr/bin/python3 bench/bench_sweep_quality.py --sim build/dev-sweep/bench/sweep_sim
    # development seeds (never the reported 0-9), Optuna's results kept in a cache:
    /usr/bin/python3 bench/bench_sweep_quality.py --sim ... --seed-start 100 --seeds 100 \
        --cache build/dev-sweep/optuna-cache.json

Optuna's runs are deterministic for a seed (TPESampler(seed), noise from
random.Random(seed)), so --cache may keep them between runs: they are the
slow half (about 5 s each against dtctl's 0.01 s), and reusing them only
saves time.  The key includes every setting and Optuna's version.

Prints one line per seed and a markdown table for docs/BENCHMARKS.md.
Run it with Debian's /usr/bin/python3 (python3-optuna).
"""
import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time


# ---------------------------------------------------------------- objectives

def branin(x1, x2):
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    u = x2 - b * x1 * x1 + c * x1 - 6
    return u * u + 10 * (1 - t) * math.cos(x1) + 10


H_ALPHA = [1.0, 1.2, 3.0, 3.2]
H_A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
       [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
H_P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
       [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
       [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
       [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]


def hartmann6(x):
    s = 0.0
    for i in range(4):
        inner = sum(H_A[i][j] * (x[j] - H_P[i][j]) ** 2 for j in range(6))
        s += H_ALPHA[i] * math.exp(-inner)
    return -s


def branin_trial(t):
    x1 = t.suggest_float("x1", -5, 10)
    x2 = t.suggest_float("x2", 0, 15)
    return branin(x1, x2), 3 + 2 * math.sin(x1 + x2), 0.7


def hartmann_trial(t):
    x = [t.suggest_float("x%d" % (i + 1), 0, 1) for i in range(6)]
    return hartmann6(x), 1 + x[0], 0.7


def mlp_trial(t):
    lr = t.suggest_float("lr", 1e-5, 1, log=True)
    batch = t.suggest_categorical("batch", [16, 32, 64, 128, 256, 512])
    layers = t.suggest_int("layers", 1, 6)
    drop = t.suggest_float("dropout", 0, 0.7)
    opt = t.suggest_categorical("optimizer", ["sgd", "adam", "adamw"])
    llr, lb = math.log10(lr), math.log2(batch / 128)
    best = {"sgd": -1.0, "adam": -3.0, "adamw": -2.7}[opt] + 0.15 * lb
    bonus = {"sgd": 0.04, "adam": 0.01, "adamw": 0.0}[opt]
    f = (0.10 + 0.2 * (llr - best) ** 2 + 0.02 * (layers - 4) ** 2 +
         0.4 * (drop - 0.25) ** 2 + bonus)
    rate = min(max(0.5 + 0.25 * (llr + 3), 0.2), 1.2)
    return f, 1.0, rate


# name: (global minimum of f, noise sigma, trial -> (f, amp, rate))
OBJECTIVES = {
    "branin": (0.397887357729739, 0.02, branin_trial),
    "hartmann6": (-3.32236801141551, 0.01, hartmann_trial),
    "mlp": (0.10, 0.01, mlp_trial),
}


# ------------------------------------------------------------------- runners

MASK64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def trial_epoch_time(seed, trial, sigma):
    """sweep_sim.c's trial_epoch_time(): the time one epoch of the trial-th trial takes."""
    base = (seed * 1000003 + 2 * trial) & MASK64
    u1 = ((splitmix64(base) >> 11) + 1) * 2.0 ** -53
    u2 = (splitmix64((base + 1) & MASK64) >> 11) * 2.0 ** -53
    return math.exp(sigma * math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2))


def run_optuna(name, seed, budget, epochs, eta, min_iter, workers=1, sigma=0.5):
    """Optuna on `workers` simulated workers, the event loop of sweep_sim.c: a free
    worker asks for a trial, reports arrive in the order their epochs end on the
    clock, and the pruner sees the running trials' values at its rungs."""
    import optuna
    f_star, noise, make = OBJECTIVES[name]
    study = optuna.create_study(
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.SuccessiveHalvingPruner(
            min_resource=min_iter, reduction_factor=eta, min_early_stopping_rate=0))
    rnd = random.Random(seed * 1000003 + 17)
    st = {"used": 0, "trials": 0}
    slots = [None] * workers   # per worker: [end time, trial, f, amp, rate, epoch time, epoch]

    def start(i, now):
        if st["used"] >= budget:
            slots[i] = None
            return
        t = study.ask()
        st["trials"] += 1
        et = trial_epoch_time(seed, st["trials"], sigma)
        slots[i] = [now + et, t, *make(t), et, 0]
        st["used"] += 1

    for i in range(workers):
        start(i, 0.0)
    best = math.inf
    while any(slots):
        i = min((i for i in range(workers) if slots[i]), key=lambda i: (slots[i][0], i))
        w = slots[i]
        now, t, f, amp, rate = w[0], w[1], w[2], w[3], w[4]
        w[6] += 1
        e = w[6]
        v = f + amp * e ** -rate + noise * rnd.gauss(0, 1)
        best = min(best, v)
        t.report(v, e)
        if e == epochs:
            study.tell(t, v)
        elif t.should_prune():
            study.tell(t, state=optuna.trial.TrialState.PRUNED)
        elif st["used"] < budget:
            st["used"] += 1
            w[0] += w[5]
            continue
        start(i, now)
    return best, best - f_star, st["trials"]


def run_dtctl(sim, name, seed, budget, epochs, eta, min_iter, method="bayes", extra=()):
    out = subprocess.run(
        [sim, name, "--seed", str(seed), "--budget", str(budget), "--epochs", str(epochs),
         "--eta", str(eta), "--min-iter", str(min_iter), "--method", method, *extra],
        check=True, capture_output=True, text=True).stdout
    kv = dict(item.split("=") for item in out.split())
    return float(kv["best"]), float(kv["regret"]), int(kv["trials"])


def ratio_ci(pairs, n=4000, level=0.95):
    """Paired bootstrap over seeds of median(dtctl regret) / median(Optuna regret): how much
    the ratio of a table row could move with other seeds of the same size."""
    import random
    rng = random.Random(12345)
    ratios = []
    for _ in range(n):
        s = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        den = statistics.median(o for _, o in s)
        if den > 0:
            ratios.append(statistics.median(d for d, _ in s) / den)
    ratios.sort()
    if not ratios:
        return float("nan"), float("nan")
    lo = ratios[int((1 - level) / 2 * len(ratios))]
    hi = ratios[min(len(ratios) - 1, int((1 + level) / 2 * len(ratios)))]
    return lo, hi


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sim", required=True, help="path of the sweep_sim program")
    ap.add_argument("--seeds", type=int, default=10, help="number of seeds (10)")
    ap.add_argument("--seed-start", type=int, default=0,
                    help="first seed (0); develop on other seeds than the reported 0-9")
    ap.add_argument("--cache", help="JSON file keeping Optuna's results between runs")
    ap.add_argument("--sim-args", default="",
                    help="extra sweep_sim options for dtctl's TPE run (experiments)")
    ap.add_argument("--budget", type=int, default=810, help="trial-epochs per run (810)")
    ap.add_argument("--epochs", type=int, default=27)
    ap.add_argument("--eta", type=int, default=3)
    ap.add_argument("--min-iter", type=int, default=1)
    ap.add_argument("--workers", type=int, default=4,
                    help="trials running at once, both sides (4; 1: one after another, as in "
                         "the figures before parallel arrivals)")
    ap.add_argument("--duration-sigma", type=float, default=0.5,
                    help="lognormal sigma of a trial's epoch time (0.5)")
    ap.add_argument("--objectives", default="branin,hartmann6,mlp")
    args = ap.parse_args()
    try:
        import optuna
    except ImportError:
        sys.exit("bench_sweep_quality: python3-optuna is missing; run 'make bench-deps' "
                 "and use /usr/bin/python3")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cache = {}
    if args.cache and os.path.exists(args.cache):
        with open(args.cache) as f:
            cache = json.load(f)
    seeds = range(args.seed_start, args.seed_start + args.seeds)

    rows = []
    for name in args.objectives.split(","):
        res = {"dtctl": [], "optuna": [], "random": []}
        secs = {"dtctl": 0.0, "optuna": 0.0, "random": 0.0}
        for seed in seeds:
            common = (name, seed, args.budget, args.epochs, args.eta, args.min_iter)
            key = "%s %s" % (optuna.__version__, " ".join(map(str, common)))
            if args.workers > 1:   # one worker: the key of the sequential runs, still valid
                key += " workers %d sigma %r" % (args.workers, args.duration_sigma)
            par = ["--workers", str(args.workers), "--duration-sigma", str(args.duration_sigma)]
            t0 = time.monotonic()
            d = run_dtctl(args.sim, *common, extra=par + args.sim_args.split())
            t1 = time.monotonic()
            r = run_dtctl(args.sim, *common, method="random", extra=par)
            t2 = time.monotonic()
            if key in cache:
                o, t3 = tuple(cache[key][:3]), t2 + cache[key][3]
            else:
                o = run_optuna(*common, workers=args.workers, sigma=args.duration_sigma)
                t3 = time.monotonic()
                cache[key] = list(o) + [t3 - t2]
                if args.cache:
                    with open(args.cache + ".tmp", "w") as f:
                        json.dump(cache, f, indent=0, sort_keys=True)
                    os.replace(args.cache + ".tmp", args.cache)
            secs["dtctl"] += t1 - t0
            secs["random"] += t2 - t1
            secs["optuna"] += t3 - t2
            res["dtctl"].append(d)
            res["random"].append(r)
            res["optuna"].append(o)
            print("%-10s seed %2d  dtctl %.5g (%d trials)  optuna %.5g (%d trials)  "
                  "dtctl-random %.5g" % (name, seed, d[0], d[2], o[0], o[2], r[0]), flush=True)
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
               for k, v in res.items()}
        wins = sum(d[0] <= o[0] for d, o in zip(res["dtctl"], res["optuna"]))
        ci = ratio_ci([(d[1], o[1]) for d, o in zip(res["dtctl"], res["optuna"])])
        rows.append((name, med, med["dtctl"][1] / med["optuna"][1], wins, secs, ci))

    print()
    print("budget %d trial-epochs, %d epochs per full trial, ASHA/SHA min_iter %d eta %d, "
          "%d worker(s), epoch time sigma %g, seeds %d-%d, medians" % (
              args.budget, args.epochs, args.min_iter, args.eta, args.workers,
              args.duration_sigma, seeds[0], seeds[-1]))
    print()
    print("| objective | dtctl TPE+ASHA best (regret) | Optuna TPE+SHA best (regret) | "
          "regret ratio dtctl/Optuna | 95 % bootstrap interval of the ratio | dtctl ≤ Optuna | "
          "dtctl random+ASHA best (regret) | time dtctl / Optuna |")
    print("|---|---|---|---|---|---|---|---|")
    for name, med, ratio, wins, secs, ci in rows:
        print("| %s | %.4g (%.4g) | %.4g (%.4g) | %.2f | %.2f–%.2f | %d/%d | %.4g (%.4g) | "
              "%.1fs / %.1fs |" % (
                  name, med["dtctl"][0], med["dtctl"][1], med["optuna"][0], med["optuna"][1],
                  ratio, ci[0], ci[1], wins, args.seeds, med["random"][0], med["random"][1],
                  secs["dtctl"], secs["optuna"]))
    ok = all(row[2] <= 1.0 for row in rows)
    print()
    print("sweep quality: %s (target: dtctl's median regret <= Optuna's on every objective)"
          % ("OK" if ok else "BELOW TARGET"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
