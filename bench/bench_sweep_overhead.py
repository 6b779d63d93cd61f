#!/usr/bin/python3
"""bench_sweep_overhead.py - what the sweep controller costs per trial.

N trials of a D-second program (`sleep D`, exec'd directly, no shell; the parameter goes to
its environment) on S slots of the
local node (a one-node cluster, `host: local`, `slots: S`: dtsched + one dtagent on this
machine, as in `make demo`).  The sweep is submitted with `dtctl sweep --detach` and
followed through its export; makespan = the sweep's ended_at - created_at (from the
POST to the last trial seen ended), ideal = N x D / S.  Target: makespan / ideal <= 1.05
(Ray Tune publishes about 14 % overhead for 1 s trials).  Also reported: the gap
between a trial's job ending and the next job starting on a freed slot (median, p95).

    bench/bench_sweep_overhead.py [--bin build/dev-sweepc/bin] [--trials 200]
                                  [--duration 1] [--slots 8]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def ts(s):
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--port", type=int, default=27171)
    ap.add_argument("--work", default=None, help="scratch dir (default build/bench-sweep-overhead)")
    a = ap.parse_args()
    binp = Path(a.bin).resolve()
    work = Path(a.work or REPO / "build" / "bench-sweep-overhead").resolve()
    home, shared = work / "home", work / "shared"
    env = dict(os.environ, DTCTL_HOME=str(home), DTCTL_NO_SYSTEMD="1", NO_COLOR="1")
    env.pop("DTCTL_CLUSTER", None)
    env.pop("DTCTL_SHARED_DIR", None)

    def dtctl(*args, check=True, timeout=60):
        p = subprocess.run([str(binp / "dtctl")] + [str(x) for x in args], env=env,
                           capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        if check and p.returncode != 0:
            sys.exit("dtctl %s: rc %d\n%s%s" % (" ".join(map(str, args)), p.returncode,
                                               p.stdout, p.stderr))
        return p

    if home.exists():
        dtctl("agents", "stop", check=False)
        dtctl("head", "stop", check=False)
    shutil.rmtree(work, ignore_errors=True)
    shared.mkdir(parents=True)
    home.mkdir(mode=0o700)
    (home / "cluster.yaml").write_text(
        "cluster: bench\nshared_dir: %s\nnodes:\n  - {host: local, gpus: 0, slots: %d}\n"
        "agent: {port: %d, heartbeat: 500ms, dead_after: 5s}\nhead: {port: %d}\n"
        % (shared, a.slots, a.port - 1, a.port))
    sweep = work / "overhead.yaml"
    sweep.write_text(
        "name: overhead\nmethod: random\nmetric: {name: loss}\n"
        "parameters:\n  x: {distribution: uniform, min: 0, max: 1}\n"
        "job: {procs_per_node: 1, command: [sleep, '%g'], env: {X: '{x}'}}\n"
        "max_trials: %d\nparallel: %d\nseed: 1\n" % (a.duration, a.trials, a.slots))
    load_before = os.getloadavg()
    try:
        dtctl("head", "start")
        dtctl("agents", "start")
        for _ in range(100):
            if " UP " in dtctl("nodes").stdout:
                break
            time.sleep(0.1)
        sid = dtctl("sweep", "--detach", sweep).stdout.strip()
        deadline = time.time() + a.trials * a.duration * 3 + 60
        while True:
            ex = json.loads(dtctl("sweep", "export", "--json", sid).stdout)
            if ex["sweep"]["state"] not in ("RUNNING", "PAUSED"):
                break
            if time.time() > deadline:
                sys.exit("sweep %s still %s" % (sid, ex["sweep"]["state"]))
            time.sleep(0.5)
        jobs = {j["id"]: j for j in json.loads(dtctl("ps", "--all", "--json").stdout)["jobs"]}
        cpu = {}
        for name in ("dtsched", "agent"):   # CPU seconds the daemons used for the whole sweep
            try:
                pid = int((home / ("%s.pid" % name)).read_text().split()[0])
                f = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
                cpu[name] = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError, IndexError):
                pass
    finally:
        dtctl("agents", "stop", check=False)
        dtctl("head", "stop", check=False)

    sw = ex["sweep"]
    states = {}
    for t in ex["trials"]:
        states[t["state"]] = states.get(t["state"], 0) + 1
    makespan = ts(sw["ended_at"]) - ts(sw["created_at"])
    ideal = a.trials * a.duration / a.slots
    runs = sorted((ts(jobs[t["job_id"]]["started_at"]), ts(jobs[t["job_id"]]["ended_at"]))
                  for t in ex["trials"])
    # slot turnover: for each start after the first wave, the time since the latest end
    # before it (a freed slot waiting for the next trial)
    ends = sorted(e for _, e in runs)
    gaps = []
    for s, _ in runs[a.slots:]:
        before = [e for e in ends if e <= s]
        if before:
            gaps.append(s - before[-1])
    busy = sum(e - s for s, e in runs)
    # the makespan beyond the trials' own turnover: the first placement after the
    # POST, and the sweep's end after its last trial's job ended
    first_placed = runs[0][0] - ts(sw["created_at"])
    last_to_end = ts(sw["ended_at"]) - max(ends)
    res = {
        "trials": a.trials, "duration_s": a.duration, "slots": a.slots,
        "state": sw["state"], "trial_states": states,
        "makespan_s": round(makespan, 3), "ideal_s": round(ideal, 3),
        "ratio": round(makespan / ideal, 4),
        "mean_job_runtime_s": round(busy / len(runs), 4),
        "sweep_created_to_first_placed_ms": round(first_placed * 1000, 1),
        "last_job_ended_to_sweep_ended_ms": round(last_to_end * 1000, 1),
        "turnover_median_ms": round(statistics.median(gaps) * 1000, 1) if gaps else None,
        "turnover_p95_ms": round(sorted(gaps)[int(0.95 * (len(gaps) - 1))] * 1000, 1) if gaps else None,
        # the machine's load around the sweep: the ratio follows it more than anything
        # dtctl does (docs/BENCHMARKS.md, "sweep overhead")
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    # where each trial's job spends the time beyond its program (agent task records)
    phases = {"placed -> task created (dtsched -> agent)": [],
              "task created -> program started (supervisor)": [],
              "program ran": [],
              "program ended -> job ended (agent -> dtsched)": []}
    for t in ex["trials"]:
        j = jobs[t["job_id"]]
        tf = home / "tasks" / ("%s.0.r0.json" % t["job_id"])
        if not tf.exists():
            continue
        tk = json.loads(tf.read_text())
        if not (tk.get("created_at") and tk.get("started_at") and tk.get("ended_at")):
            continue
        c, st, en = ts(tk["created_at"]), ts(tk["started_at"]), ts(tk["ended_at"])
        vals = (c - ts(j["started_at"]), st - c, en - st, ts(j["ended_at"]) - en)
        for k, v in zip(phases, vals):
            phases[k].append(v * 1000)
    res["daemon_cpu_ms_per_trial"] = {k: round(v * 1000 / a.trials, 2) for k, v in cpu.items()}
    res["phases_median_ms"] = {k: round(statistics.median(v), 1) for k, v in phases.items() if v}
    res["phases_p95_max_ms"] = {k: [round(sorted(v)[int(0.95 * (len(v) - 1))], 1), round(max(v), 1)]
                                for k, v in phases.items() if v}
    # the same trials through the simplest pool there is, right after, on the same
    # machine: what it shows above ideal is the machine (a busy or stalled VM), not dtctl
    t0 = time.time()
    subprocess.run("seq %d | xargs -P %d -I{} sleep %g" % (a.trials, a.slots, a.duration),
                   shell=True, check=True)
    pool = time.time() - t0
    res["xargs_pool_makespan_s"] = round(pool, 3)
    res["xargs_pool_ratio"] = round(pool / ideal, 4)
    res["dtctl_vs_xargs_pool"] = round(makespan / pool, 4)
    print(json.dumps(res, indent=1))
    print("sweep overhead: %d x %gs trials on %d slots: makespan %.2f s, ideal %.2f s, "
          "ratio %.3f (target <= 1.05)%s" % (a.trials, a.duration, a.slots, makespan, ideal,
                                              makespan / ideal,
                                              "" if makespan / ideal <= 1.05 else "  ABOVE TARGET"))
    print("same trials through `xargs -P %d` right after: %.2f s (%.3f of ideal); dtctl / xargs %.3f"
          % (a.slots, pool, pool / ideal, makespan / pool))
    print("load average (1 min) before / after the sweep: %.2f / %.2f"
          % tuple(res["loadavg_1m_before_after"]))
    (work / "result.json").write_text(json.dumps(res, indent=1) + "\n")
    return 0 if sw["state"] == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(main())
