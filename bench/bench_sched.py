#!/usr/bin/python3
"""bench_sched.py - dtsched with N simulated nodes heartbeating every second.

Starts dtsched in a scratch DTCTL_HOME, runs `dtagent --simulate-nodes N` (one
process playing N agents, each on its own keep-alive connection, heartbeats spread
over the period), then measures over a window:
  * CPU used by dtsched (utime+stime from /proc/<pid>/stat) as % of one core;
  * latency of `dtctl nodes --json` (whole command: process start, request, print),
    p50/p99 over --queries runs.
Targets (issue "Node agents and the head service"): < 5 % of one core, p99 < 50 ms.

    bench/bench_sched.py [--bin build/dev-agent/bin] [--nodes 1000] [--seconds 30]
                         [--idle-seconds 8] [--queries 100] [--perf FILE]

The heartbeat-only window comes first (8 s: at 100 ticks/s a shorter window is too
coarse for a few %), then the queries; run it several times and take medians.  With
60 queries the "p99" is the slowest one: on a shared machine it follows whatever else
runs.  The simulator's threads run SCHED_BATCH (agent/simulate.c): real agents do not
share dtsched's cores, so their wake-ups should not preempt it here either.
"""
import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        sys.exit("bench_sched: dtsched (pid %d) is gone: it crashed or something else "
                 "stopped it (another `pkill dtsched`?); this run does not count" % pid)
    return int(fields[11]) + int(fields[12])   # utime + stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--port", type=int, default=17771)
    ap.add_argument("--idle-seconds", type=float, default=8,
                    help="window for dtsched's CPU with heartbeats only (before the queries)")
    ap.add_argument("--perf", help="also run `perf record -g` on dtsched into this file")
    a = ap.parse_args()
    b = Path(a.bin)
    home = Path(tempfile.mkdtemp(prefix="bench-sched-"))
    home.chmod(0o700)
    (home / "secret").write_text(secrets.token_hex(32) + "\n")
    (home / "secret").chmod(0o600)
    (home / "cluster.yaml").write_text(
        "cluster: bench\nshared_dir: /tmp\nnodes:\n  - {host: local, name: me, gpus: 0}\n"
        "agent: {heartbeat: 1s, dead_after: 10s}\nhead: {port: %d}\n" % a.port)
    env = dict(os.environ, DTCTL_HOME=str(home))
    subprocess.run([str(b / "dtsched"), "--daemon", "--port", str(a.port)], env=env, check=True)
    pid = int((home / "dtsched.pid").read_text())
    sim = subprocess.Popen([str(b / "dtagent"), "--simulate-nodes", str(a.nodes), "--head",
                            "127.0.0.1:%d" % a.port, "--heartbeat-ms", "1000", "--duration",
                            str(a.seconds), "--gpus", "8"], env=env, stdout=subprocess.PIPE, text=True)
    perf = None
    try:
        time.sleep(3)                       # every node has joined
        if a.perf:
            perf = subprocess.Popen(["perf", "record", "-g", "-o", a.perf, "-p", str(pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # heartbeats alone, over a window long enough for a 100 Hz tick count
        t2, c2 = time.time(), cpu_ticks(pid)
        time.sleep(a.idle_seconds)
        t3, c3 = time.time(), cpu_ticks(pid)
        t0, c0 = time.time(), cpu_ticks(pid)
        lat = []
        window = a.seconds - 6 - a.idle_seconds
        per = window / a.queries
        for _ in range(a.queries):
            s = time.perf_counter()
            p = subprocess.run([str(b / "dtctl"), "nodes", "--json"], env=env,
                               capture_output=True, text=True)
            lat.append((time.perf_counter() - s) * 1000)
            assert p.returncode == 0, p.stderr
            nodes = json.loads(p.stdout)["nodes"]
            time.sleep(max(0, per - lat[-1] / 1000))
        t1, c1 = time.time(), cpu_ticks(pid)
        if perf:
            perf.send_signal(2)
            perf.wait(timeout=30)
        hz = os.sysconf("SC_CLK_TCK")
        up = sum(1 for n in nodes if n["state"] == "UP")
        lat.sort()
        res = {
            "nodes": a.nodes, "nodes_up": up,
            "dtsched_cpu_pct_with_queries": round(100.0 * (c1 - c0) / hz / (t1 - t0), 2),
            "dtsched_cpu_pct_heartbeats_only": round(100.0 * (c3 - c2) / hz / (t3 - t2), 2),
            "nodes_json_p50_ms": round(lat[len(lat) // 2], 1),
            "nodes_json_p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1),
            "nodes_json_bytes": len(p.stdout),
        }
        sim.wait(timeout=a.seconds + 30)
        res["simulator"] = json.loads(sim.stdout.read().strip().splitlines()[-1])
        print(json.dumps(res, indent=2))
    finally:
        if perf and perf.poll() is None:
            perf.kill()
        if sim.poll() is None:
            sim.kill()
        subprocess.run([str(b / "dtsched"), "--stop"], env=env)


if __name__ == "__main__":
    sys.exit(main())
