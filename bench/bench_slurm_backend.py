#!/usr/bin/python3
"""bench_slurm_backend.py - dtctl with `backend: slurm` against Slurm's own tools (issue 29).

On 4 fake nodes with a real Slurm 22.05 (tests/cluster/fakeslurm: slurmctld on the host,
one slurmd per node), dtsched as the cluster user with `backend: slurm`
(docs/slurm-backend.md), in one run, alternating round by round:
  1. launch of a 4-node no-op: `dtctl run -N 4 -p 1 -- true` (sbatch, the agents' step
     joining dtsched, one rank per node, the allocation ended) against `srun -N 4 true`,
     whole commands, each started with every node idle in Slurm, medians and ratio;
  2. submit rate: --submits jobs one after another, `dtctl run -d -N 1 -p 1 -- true`
     against `sbatch --wrap true` (time to have each queued, not run), jobs/s and ratio;
  3. --trials one-second trials of one GPU each on the 8 GPUs (4 nodes x 2): as separate
     Slurm jobs through dtctl (`dtctl run -d -g 1 -- sleep 1` each, one sbatch per trial)
     against a bare sbatch loop (`sbatch --gres=gpu:1 --wrap 'sleep 1'`), makespan from
     the first submit to the last trial's end, over ideal (ceil(trials / 8) s), and
     the same trials as one sweep packed into one allocation (`pack: allocation`,
     parallel 8: one Slurm job of 4 nodes x 2 GPUs that dtsched fills), from `dtctl
     sweep` to the last trial's end (the allocation's start included), and as one Slurm
     job array (`pack: array`, parallel 8: --array=0-K%8, one task per trial; each task
     holds its node whole, --exclusive, so at most 4 run at once here).
The fake nodes share this machine's cores, and Slurm's scheduler runs every
sched_interval (2 s here) or on events: ratios, not absolute times, are what carries over.

    make bench-slurm-backend, or bench/bench_slurm_backend.py [--bin bin] [--rounds 5] [--submits 20]
        [--trials 16] [--only-trials | --only-packed] [--no-array]   (root)
"""
import argparse
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from conftest import (FAKECLUSTER, FAKESLURM, FakeCluster, SlurmCluster,  # noqa: E402
                      free_ports, slurm_unavailable, stop_home_daemons)
from test_slurm_backend import SlurmHead  # noqa: E402


def idle(sc, timeout=60):
    """Every node idle in Slurm: the job before has released its nodes (an allocation
    ends a moment after its command returns), so each launch starts from the same place."""
    deadline = time.monotonic() + timeout
    while set(sc.run(["sinfo", "-h", "-N", "-o", "%t"]).stdout.split()) != {"idle"}:
        if time.monotonic() > deadline:
            sys.exit("bench_slurm_backend: nodes not idle after %ss" % timeout)
        time.sleep(0.05)


def timed(fn, *args):
    t0 = time.monotonic()
    p = fn(*args)
    took = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit("bench_slurm_backend: %s failed:\n%s%s" % (args, p.stdout, p.stderr))
    return took


def trials_dtctl(h, sc, n):
    """Makespan of n one-second 1-GPU trials as separate Slurm jobs through dtctl."""
    idle(sc)
    t0 = time.monotonic()
    jobs = []
    for _ in range(n):
        p = h.dtctl("run", "-d", "-N", "1", "-g", "1", "--", "sleep", "1")
        if p.returncode != 0:
            sys.exit("bench_slurm_backend: dtctl run -d: %s%s" % (p.stdout, p.stderr))
        jobs.append(p.stdout.strip().split()[-1])
    for job in jobs:       # in submit order: the last to end is about the last one
        while True:
            j = h.show(job)
            if j["state"] not in ("PENDING", "RUNNING"):
                break
            time.sleep(0.05)
        if j["state"] != "COMPLETED":
            sys.exit("bench_slurm_backend: trial %s %s: %s" % (job, j["state"], j["reason"]))
    return time.monotonic() - t0


def trials_packed(h, sc, n, pack="allocation"):
    """Makespan of n one-second 1-GPU trials as one sweep packed into one allocation
    (pack: allocation, parallel 8), or as one job array (pack: array), from `dtctl
    sweep` to the last trial's end."""
    from datetime import datetime
    idle(sc)
    sweep = h.home / ("%s.yaml" % pack)
    sweep.write_text("method: grid\nparameters: {x: {values: [%s]}}\n"
                     "job: {name: b%s, gpus_per_node: 1, shell: true, command: ['sleep 1']}\n"
                     "parallel: 8\npack: %s\n" % (", ".join(str(i) for i in range(n)),
                                                   pack, pack))
    os.chown(sweep, h.uid, -1)
    t0 = time.time()
    p = h.dtctl("sweep", "--detach", sweep)
    if p.returncode != 0:
        sys.exit("bench_slurm_backend: dtctl sweep: %s%s" % (p.stdout, p.stderr))
    sw = p.stdout.strip()
    while True:
        ex = json.loads(h.dtctl("sweep", "export", "--json", sw).stdout)
        if ex["sweep"]["state"] not in ("RUNNING", "PENDING"):
            break
        time.sleep(0.5)
    bad = [t for t in ex["trials"] if t["state"] != "COMPLETED"]
    if ex["sweep"]["state"] != "COMPLETED" or bad or len(ex["trials"]) != n:
        sys.exit("bench_slurm_backend: packed sweep %s: %s" % (ex["sweep"]["state"], bad[:3]))
    sl = [h.show(t["job_id"])["slurm"] for t in (ex["trials"][0], ex["trials"][-1])]
    sids = {x["array_job"].split("_")[0] if pack == "array" else x["job_id"] for x in sl}
    if len(sids) != 1:
        sys.exit("bench_slurm_backend: %s sweep used Slurm jobs %s" % (pack, sids))
    def ts(v):
        return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
    end = max(ts(t["ended_at"]) for t in ex["trials"])
    first = min(ts(h.show(t["job_id"])["started_at"]) for t in ex["trials"][:8])
    return end - t0, first - t0


def trials_sbatch(sc, n):
    """Makespan of n one-second 1-GPU trials as a bare sbatch loop (until squeue is empty)."""
    idle(sc)
    t0 = time.monotonic()
    ids = []
    for _ in range(n):
        p = sc.run(["sbatch", "--parsable", "--gres=gpu:1", "-o", "/dev/null", "--wrap",
                    "sleep 1"], True)
        if p.returncode != 0:
            sys.exit("bench_slurm_backend: sbatch: %s" % p.stderr)
        ids.append(p.stdout.strip().split(";")[0])
    while sc.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i"]).stdout.strip():
        time.sleep(0.05)
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--submits", type=int, default=20)
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--only-trials", action="store_true", help="only the trials (3.)")
    ap.add_argument("--only-packed", action="store_true", help="only the packed trials")
    ap.add_argument("--no-array", action="store_true", help="not the job array's trials")
    ap.add_argument("--verbose", action="store_true", help="print dtsched's log at the end")
    a = ap.parse_args()
    why = slurm_unavailable()
    if why:
        sys.exit("bench_slurm_backend: " + why)
    env = dict(os.environ, FAKECLUSTER_MODE="netns")
    subprocess.run([str(FAKECLUSTER), "up", "4"], check=True, env=env, capture_output=True)
    home = None
    try:
        subprocess.run([str(FAKESLURM), "up", "--gpus", "2"], check=True, capture_output=True)
        inst = json.loads(subprocess.run([str(FAKESLURM), "env", "--json"], check=True,
                                         capture_output=True, text=True).stdout)
        fc = FakeCluster.from_env()
        sc = SlurmCluster(fc=fc, conf=Path(inst["conf"]), state=Path(inst["state"]),
                          partition=inst["partition"], gpus=2, bringup_s=0)
        pw = pwd.getpwnam(fc.user)
        home = Path(tempfile.mkdtemp(prefix="dtctl-sbbench-", dir="/var/tmp"))
        os.chown(home, pw.pw_uid, pw.pw_gid)
        os.chmod(home, 0o700)
        h = SlurmHead(sc, Path(a.bin).resolve(), home, free_ports(1)[0])
        assert h.dtctl("head", "start").returncode == 0
        dt, srun = [], []
        if a.only_trials or a.only_packed:
            a.only_trials = True
            a.rounds = a.submits = 0
        else:
            timed(h.dtctl, "run", "-N", "4", "-p", "1", "--", "true")      # warm up both
            timed(sc.run, ["srun", "-N", "4", "true"], True)
        for _ in range(a.rounds):
            idle(sc)
            dt.append(timed(h.dtctl, "run", "-N", "4", "-p", "1", "--", "true"))
            idle(sc)
            srun.append(timed(sc.run, ["srun", "-N", "4", "true"], True))
        sub_dt, sub_sb = [], []
        for _ in range(a.submits):
            sub_dt.append(timed(h.dtctl, "run", "-d", "-N", "1", "-p", "1", "--", "true"))
            sub_sb.append(timed(sc.run, ["sbatch", "--wrap", "true", "-o", "/dev/null"], True))
        if a.only_packed:
            trials_dt = trials_sb = float("nan")
        else:
            trials_dt, trials_sb = trials_dtctl(h, sc, a.trials), trials_sbatch(sc, a.trials)
        trials_pk, pk_start = trials_packed(h, sc, a.trials)
        trials_ar, ar_start = (float("nan"), float("nan")) if a.no_array else \
            trials_packed(h, sc, a.trials, "array")
        for j in json.loads(h.dtctl("ps", "--json").stdout)["jobs"]:
            if j["state"] in ("PENDING", "RUNNING"):
                h.dtctl("cancel", j["id"])
        sc.run(["scancel", "-u", fc.user])
        h.dtctl("head", "stop")
        if a.verbose:
            print((home / "dtsched.log").read_text()[-12000:])
            print(sc.log("slurmctld.log", 80))
    finally:
        if home:
            stop_home_daemons(home)
            shutil.rmtree(home, ignore_errors=True)
        subprocess.run([str(FAKESLURM), "down"], capture_output=True)
        subprocess.run([str(FAKECLUSTER), "down"], capture_output=True)
    print("bench_slurm_backend: 4 fake nodes, real Slurm 22.05, %d rounds" % a.rounds)
    if not a.only_trials:
        md, ms = statistics.median(dt), statistics.median(srun)
        rd, rs = a.submits / sum(sub_dt), a.submits / sum(sub_sb)
        print("  4-node no-op   dtctl run (backend: slurm) %6.2f s   srun -N 4 true %6.2f s   "
              "ratio %.2f" % (md, ms, md / ms))
        print("    all dtctl: %s" % " ".join("%.2f" % x for x in dt))
        print("    all srun:  %s" % " ".join("%.2f" % x for x in srun))
        print("  submit rate    dtctl run -d %6.1f jobs/s   sbatch --wrap %6.1f jobs/s   "
              "ratio %.2f (%d each, one after another)" % (rd, rs, rd / rs, a.submits))
    ideal = float(-(-a.trials // 8))
    if not a.only_packed:
        print("  %d 1-s trials on 8 GPUs (ideal %.0f s)   separate Slurm jobs via dtctl %6.2f s "
              "(%.2f x ideal)   bare sbatch loop %6.2f s (%.2f x ideal)   ratio %.2f" % (
                  a.trials, ideal, trials_dt, trials_dt / ideal, trials_sb, trials_sb / ideal,
                  trials_dt / trials_sb))
    print("    packed into one allocation (pack: allocation) %6.2f s (%.2f x ideal)%s" % (
        trials_pk, trials_pk / ideal, "" if a.only_packed else ": %.1fx faster than one Slurm "
        "job per trial, %.1fx than the sbatch loop" % (trials_dt / trials_pk,
                                                       trials_sb / trials_pk)))
    print("      of which %.2f s before its first trial started (sbatch, Slurm's scheduling, "
          "the agents joining); from there %.2f x ideal" % (
              pk_start, (trials_pk - pk_start) / ideal))
    if not a.no_array:
        print("    one job array (pack: array, --array=0-%d%%8; a task holds its node whole: "
              "at most 4 at once here) %6.2f s (%.2f x ideal)%s; first trial after %.2f s" % (
                  a.trials - 1, trials_ar, trials_ar / ideal, "" if a.only_packed else
                  ": %.1fx faster than one Slurm job per trial" % (trials_dt / trials_ar),
                  ar_start))


if __name__ == "__main__":
    main()
