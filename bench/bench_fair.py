#!/usr/bin/python3
"""bench_fair.py - dtsched's submit rate with a deep queue: 10,000 pending jobs of 50
users, fair-share dtsched (this build) against the FIFO dtsched before it (--base-bin,
e.g. a build of the commit before), one after the other in the same run.

For each build: a one-node `host: local` cluster with 4 fake GPUs (its own DTCTL_HOME,
shared dir and ports, as tests/e2e/conftest.py's LocalCluster), a blocker job holding
the 4 GPUs, then --pending jobs (1 GPU, `sleep 600`) submitted round-robin as --users
users through signed POST /v1/jobs (what `dtctl run --detach` sends, without the
client's process start), from 16 threads: the queue fills.  Then the measured window:
16 threads submitting for --seconds onto that queue.  Printed per build: jobs/s while
filling and in the window, dtsched's CPU per job in the window; then the ratio
fair/FIFO.  The scheduling pass alone is bench/sched_pass.c (make bench-fair).

    bench/bench_fair.py --base-bin /path/to/old/bin [--bin bin] [--pending 10000]
                        [--users 50] [--seconds 5] [--threads 16]
    bench/bench_fair.py --queues 0,1000,10000 [--queries 50]   # growth: jobs/s, `dtctl ps`
                        [--ps-base-bin OLD/bin]                # p50/p99, dtsched RSS
                        [--idle 20]                            # dtsched CPU, queue idle
"""
import argparse
import json
import os
import re
import resource
import subprocess
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from conftest import LocalCluster  # noqa: E402
from dtapi import DtApi, read_secret  # noqa: E402


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Cluster(LocalCluster):
    """conftest's one-node cluster (4 fake GPUs), of the build in bin_dir, and a client."""

    def __init__(self, bin_dir, tmp):
        super().__init__(Path(bin_dir).resolve() / "dtctl", tmp, name="fair", gpus="4")
        self.port = int(re.search(r"head: \{port: (\d+)",
                                  (self.home / "cluster.yaml").read_text()).group(1))

    def start(self):
        super().start()
        self.api = DtApi("127.0.0.1", self.port, read_secret(str(self.home)), timeout=60)
        self.pid = int((self.home / "dtsched.pid").read_text().split()[0])

    def submit(self, user, gpus=1):
        st, body = self.api.request("POST", "/v1/jobs", {
            "job": {"name": "bench", "nodes": 1, "gpus_per_node": gpus,
                    "command": ["sleep", "600"]},
            "shared_dir": str(self.shared), "user": user})
        return st == 201

    def stop(self):
        super().stop()
        # the ranks outlive their agent (tasks run on under their supervisors): the
        # blocker's, and those placed when it ends; SIGTERM stops a supervisor's tree
        for f in (self.home / "tasks").glob("*.json"):
            try:
                t = json.loads(f.read_text())
                pid = int(t.get("supervisor_pid") or 0)
                with open("/proc/%d/cmdline" % pid, "rb") as c:
                    mine = t["id"].encode() in c.read().split(b"\0")
            except (OSError, ValueError, KeyError):
                continue
            if mine and t.get("state") in ("starting", "running", "stopping"):
                os.kill(pid, signal.SIGTERM)


def hammer(c, users, threads, count=None, seconds=None):
    """threads submitting round-robin as users, until count jobs or seconds: (ok, bad, wall)."""
    lock = threading.Lock()
    state = {"next": 0, "ok": 0, "bad": 0}
    deadline = time.monotonic() + seconds if seconds else None

    def worker():
        while True:
            with lock:
                i = state["next"]
                if (count is not None and i >= count) or (deadline and time.monotonic() > deadline):
                    return
                state["next"] += 1
            ok = c.submit(users[i % len(users)])
            with lock:
                state["ok" if ok else "bad"] += 1

    t0 = time.monotonic()
    ths = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return state["ok"], state["bad"], time.monotonic() - t0


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def ps_latency(c, queries, exe=None):
    """`dtctl ps` (the whole command, its output read) with the queue as it is, of this
    build or of exe (another build's dtctl, same cluster): (p50, p99, client CPU) ms."""
    lat = []
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(queries):
        t0 = time.monotonic()
        p = subprocess.run([str(exe or c.exe), "ps"], capture_output=True, text=True,
                           env=c.env, stdin=subprocess.DEVNULL)
        lat.append((time.monotonic() - t0) * 1000)
        if p.returncode:
            sys.exit("bench_fair: dtctl ps: %s" % p.stderr)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) * 1000 / queries
    return pct(lat, 0.5), pct(lat, 0.99), cpu


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def run_one(label, bin_dir, a):
    tmp = Path(tempfile.mkdtemp(prefix="bench-fair-"))
    c = Cluster(bin_dir, tmp)
    users = ["user%02d" % i for i in range(a.users)]
    try:
        c.start()
        if not c.submit("blocker", 4):
            sys.exit("bench_fair: the blocker job was refused")
        ok, bad, wall = hammer(c, users, a.threads, count=a.pending)
        fill = ok / wall if a.pending else 0.0
        if bad:
            sys.exit("bench_fair: %s: %d of %d submissions refused while filling" % (label, bad, a.pending))
        ps = ps_latency(c, a.queries)
        # the other build's client against this dtsched, alternated (--ps-base-bin)
        base_ps = None
        if getattr(a, "ps_base_bin", None):
            base_ps = ps_latency(c, a.queries, Path(a.ps_base_bin).resolve() / "dtctl")
            ps2 = ps_latency(c, a.queries)
            ps = (max(ps[0], ps2[0]), max(ps[1], ps2[1]), (ps[2] + ps2[2]) / 2)
        idle = None
        if a.idle:   # nothing submitted, the queue as it is: what dtsched's steps cost
            t0, w0 = cpu_ticks(c.pid), time.monotonic()
            time.sleep(a.idle)
            idle = 100.0 * (cpu_ticks(c.pid) - t0) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - w0)
        t0 = cpu_ticks(c.pid)
        ok, bad, wall = hammer(c, users, a.threads, seconds=a.seconds)
        cpu = (cpu_ticks(c.pid) - t0) / os.sysconf("SC_CLK_TCK")
        return {"label": label, "fill_jobs_per_s": fill, "jobs_per_s": ok / wall,
                "dtsched_cpu_ms_per_job": 1000 * cpu / max(ok, 1), "refused": bad,
                "queue": a.pending + ok, "ps_p50_ms": ps[0], "ps_p99_ms": ps[1],
                "ps_cpu_ms": ps[2], "base_ps": base_ps, "dtsched_rss_mib": rss_mib(c.pid),
                "idle_cpu_pct": idle}
    finally:
        c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--base-bin", help="the FIFO build's bin/ to compare with")
    ap.add_argument("--queues", help="instead: this build alone at each queue depth, e.g. "
                    "0,1000,10000 (the growth curve: submit rate, ps p50/p99, dtsched RSS)")
    ap.add_argument("--queries", type=int, default=50, help="`dtctl ps` runs per queue")
    ap.add_argument("--ps-base-bin", help="with --queues: also time this build's `dtctl ps` "
                    "on the same cluster, before and after this build's (side by side)")
    ap.add_argument("--idle", type=float, default=0, help="also dtsched's CPU (%% of a core) "
                    "over this many seconds with the queue full and nothing submitted")
    ap.add_argument("--pending", type=int, default=10000)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--threads", type=int, default=16)
    a = ap.parse_args()
    if a.queues:
        print("bench_fair: growth with the queue, %d users, %d threads, %.0f s window"
              % (a.users, a.threads, a.seconds))
        print("%8s %12s %10s %10s %14s %12s %6s" % ("queue", "jobs/s", "ps p50", "ps p99",
                                                   "dtsched ms/job", "dtsched RSS", "load"))
        first = None
        for q in [int(x) for x in a.queues.split(",")]:
            a.pending = q
            r = run_one("queue %d" % q, a.bin, a)
            first = first or r["jobs_per_s"]
            print("%8d %12.1f %8.1f ms %7.1f ms %14.2f %8.1f MiB %6.2f  (rate %.2fx the first)"
                  % (q, r["jobs_per_s"], r["ps_p50_ms"], r["ps_p99_ms"],
                     r["dtsched_cpu_ms_per_job"], r["dtsched_rss_mib"], os.getloadavg()[0],
                     r["jobs_per_s"] / first), flush=True)
            print("%8s `dtctl ps` client CPU %.1f ms" % ("", r["ps_cpu_ms"]), flush=True)
            if r["idle_cpu_pct"] is not None:
                print("%8s dtsched idle (nothing submitted, %.0f s): %.2f %% of a core"
                      % ("", a.idle, r["idle_cpu_pct"]), flush=True)
            if r["base_ps"]:
                print("%8s --ps-base-bin's dtctl ps on the same queue (its dtsched answers "
                      "it as before: no rows asked): p50 %.1f ms, p99 %.1f ms, client CPU "
                      "%.1f ms" % ("", *r["base_ps"]), flush=True)
        return
    if not a.base_bin:
        ap.error("--base-bin or --queues")
    res = [run_one("FIFO (base)", a.base_bin, a), run_one("fair share", a.bin, a)]
    print("bench_fair: %d pending jobs of %d users, %d threads, %.0f s window, load %.1f"
          % (a.pending, a.users, a.threads, a.seconds, os.getloadavg()[0]))
    print("%-12s %14s %12s %18s" % ("", "fill jobs/s", "jobs/s", "dtsched ms/job"))
    for r in res:
        print("%-12s %14.1f %12.1f %18.2f" % (r["label"], r["fill_jobs_per_s"], r["jobs_per_s"],
                                            r["dtsched_cpu_ms_per_job"]))
    print("fair/FIFO submit rate: %.2f (goal >= 0.8)" % (res[1]["jobs_per_s"] / res[0]["jobs_per_s"]))


if __name__ == "__main__":
    main()
