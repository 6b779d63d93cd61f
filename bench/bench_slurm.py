#!/usr/bin/python3
"""bench_slurm.py - launch of a 4-node no-op through dtctl inside a Slurm allocation
against `srun -N 4 true` in the same allocation, interleaved, ratios (docs/slurm.md).

On the fake cluster (root: tests/cluster/fakecluster up 4, tests/cluster/fakeslurm up),
one `salloc -N 4` as the cluster's test user runs this script again (--inner), which
times, round after round, in the same allocation:
  * srun      `srun -N 4 -n 4 true` (a plain step: Slurm's own launch)
  * cold      `dtctl run -N 4 -p 1 -- true` typed in the allocation: the whole command,
              head and agents' step started and torn down around the job
  * warm      the same job once a head and `dtctl slurm-agents` are up (what each job of
              a sweep or a script of many jobs pays): submit, place, start, end, logs
Prints medians, the ratios to srun, and one JSON line.

    flock /tmp/dtctl-fakecluster.lock bench/bench_slurm.py [--bin bin] [--rounds 10]
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
FAKECLUSTER = REPO / "tests" / "cluster" / "fakecluster"
FAKESLURM = REPO / "tests" / "cluster" / "fakeslurm"
NODES = 4


def timed(argv, env, what):
    t = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit("bench_slurm: %s failed (%d): %s%s" % (what, p.returncode, p.stdout, p.stderr))
    return dt


def free_port():
    import socket
    s = socket.socket()
    s.bind(("", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def inner(args):
    """Inside the allocation, as the test user."""
    dtctl = str(Path(args.bin) / "dtctl")
    env = dict(os.environ, NO_COLOR="1", DTCTL_QUIET_ALLOCATION="1")
    srun = ["srun", "--overlap", "-N", str(NODES), "-n", str(NODES), "true"]
    run = [dtctl, "run", "-N", str(NODES), "-p", "1", "--", "true"]
    # warm: a head here and the agents' step, as the Slurm backend's sbatch script has them
    home = Path(tempfile.mkdtemp(prefix="bench-slurm-head-"))
    port = free_port()
    (home / "cluster.yaml").write_text(
        "cluster: bench\nshared_dir: %s\nnodes:\n%s\nagent: {heartbeat: 500ms, dead_after: 5s}\n"
        "head: {address: %s, port: %d}\n" % (env["DTCTL_SHARED_DIR"], "\n".join(
            "  - {host: dtnode%d}" % i for i in range(1, NODES + 1)), args.head_addr, port))
    wenv = dict(env, DTCTL_HOME=str(home), DTCTL_CLUSTER=str(home / "cluster.yaml"))
    timed([dtctl, "head", "start"], wenv, "head start")
    secret = (home / "secret").read_text().strip()
    agents = subprocess.Popen([dtctl, "slurm-agents", "--head", "%s:%d" % (args.head_addr, port)],
                              env=dict(wenv, DTCTL_AGENT_SECRET=secret),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            p = subprocess.run([dtctl, "nodes", "--json"], env=wenv, capture_output=True,
                               text=True)
            if p.returncode == 0 and sum(n["state"] == "UP" for n in
                                         json.loads(p.stdout)["nodes"]) == NODES:
                break
            if time.monotonic() > deadline:
                sys.exit("bench_slurm: agents not UP: %s" % p.stdout)
            time.sleep(0.1)
        times = {"srun": [], "cold": [], "warm": []}
        timed(srun, env, "srun (warm-up)")
        timed(run, wenv, "dtctl run (warm-up)")
        for r in range(args.rounds):
            order = ["srun", "cold", "warm"] if r % 2 == 0 else ["warm", "cold", "srun"]
            for k in order:
                times[k].append(timed(srun if k == "srun" else run,
                                      wenv if k == "warm" else env, k))
    finally:
        agents.terminate()
        agents.wait(timeout=30)
        subprocess.run([dtctl, "head", "stop"], env=wenv, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k in ("srun", "cold", "warm"):
        print("%-5s median %7.1f ms  min %7.1f ms  ratio to srun %.2f" % (
            k, med[k] * 1000, min(times[k]) * 1000, med[k] / med["srun"]))
    print(json.dumps({"rounds": args.rounds, "nodes": NODES,
                      "median_ms": {k: round(v * 1000, 1) for k, v in med.items()},
                      "ratio_cold": round(med["cold"] / med["srun"], 2),
                      "ratio_warm": round(med["warm"] / med["srun"], 2)}))


def outer(args):
    if os.geteuid() != 0:
        sys.exit("bench_slurm: needs root (fake cluster and Slurm)")
    t = time.perf_counter()
    subprocess.run([str(FAKECLUSTER), "up", str(NODES)], check=True, capture_output=True)
    t_fc = time.perf_counter() - t
    try:
        t = time.perf_counter()
        subprocess.run([str(FAKESLURM), "up"], check=True, capture_output=True)
        print("fake cluster up in %.1f s, Slurm up in %.1f s" % (t_fc, time.perf_counter() - t))
        c = json.loads(subprocess.run([str(FAKECLUSTER), "env", "--json"], check=True,
                                      capture_output=True, text=True).stdout)
        pw = pwd.getpwnam(c["user"])
        bin_dir = Path(args.bin).resolve()
        env = dict(os.environ, SLURM_CONF=json.loads(subprocess.run(
            [str(FAKESLURM), "env", "--json"], check=True, capture_output=True,
            text=True).stdout)["conf"], HOME="/tmp", USER=c["user"], LOGNAME=c["user"],
            DTCTL_SHARED_DIR=c["shared"])
        p = subprocess.run(["setpriv", "--reuid", str(pw.pw_uid), "--regid", str(pw.pw_gid),
                            "--init-groups", "--", "salloc", "-N", str(NODES), sys.executable,
                            str(Path(__file__).resolve()), "--inner", "--bin", str(bin_dir),
                            "--rounds", str(args.rounds), "--head-addr", c["host_addr"]],
                           env=env, cwd="/", stdin=subprocess.DEVNULL)
        return p.returncode
    finally:
        subprocess.run([str(FAKECLUSTER), "down"], capture_output=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--head-addr", default="10.88.0.1", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        return inner(args)
    return outer(args)


if __name__ == "__main__":
    sys.exit(main())
