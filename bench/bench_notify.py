#!/usr/bin/python3
"""bench_notify.py - a dead webhook receiver never slows scheduling (docs/notifications.md).

Two one-node `host: local` clusters, one after the other in the same run (each as
bench_submit.py makes one: its own DTCTL_HOME, shared dir, ports; dtsched + one dtagent,
2 CPU slots): C client threads submit `dtctl run --detach -- true` back to back for
--seconds; the jobs run and end, so every one of them is an event a target asks for.

  * baseline: no notify:
  * dead receiver: cluster.yaml `notify: [{webhook: https://127.0.0.1:PORT/x, on: [done,
    fail, start], timeout: 30s}]` where PORT is a listening socket that never accepts
    (connections wait in its backlog; TLS never starts), so every delivery hangs for
    its whole timeout and the queue fills and drops.

Printed per cluster: submits accepted per second, jobs ended by the end of the window,
and the ratio dead/baseline of both (1.0: no slowdown).  Then dtsched's counters of
notifications (queued, dropped) from /metrics for the dead receiver.

    bench/bench_notify.py [--bin bin] [--seconds 5] [--clients 4]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_submit import free_ports, spawn_loop  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def one(dtctl, seconds, clients, notify):
    tmp = Path(tempfile.mkdtemp(prefix="bench-notify-"))
    home, shared = tmp / "home", tmp / "shared"
    home.mkdir(mode=0o700)
    shared.mkdir()
    agent_port, head_port = free_ports(2)
    (home / "cluster.yaml").write_text(
        "cluster: bench\nshared_dir: %s\nnodes:\n  - {host: local, gpus: 0, slots: 2}\n"
        "agent: {port: %d, heartbeat: 500ms, dead_after: 5s}\nhead: {port: %d}\n%s"
        % (shared, agent_port, head_port, notify))
    env = dict(os.environ, DTCTL_HOME=str(home), DTCTL_NO_SYSTEMD="1", NO_COLOR="1")
    env.pop("DTCTL_CLUSTER", None)
    env.pop("DTCTL_SHARED_DIR", None)

    def run(*args, timeout=60):
        return subprocess.run([dtctl] + list(args), env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    try:
        for what in (("head", "start"), ("agents", "start")):
            p = run(*what)
            assert p.returncode == 0, "dtctl %s: %s%s" % (" ".join(what), p.stdout, p.stderr)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            p = run("nodes", "--json")
            if p.returncode == 0 and any(n["state"] == "UP" for n in json.loads(p.stdout)["nodes"]):
                break
            time.sleep(0.2)
        else:
            sys.exit("bench_notify: node 'local' not UP: %s" % p.stderr)
        argv = [dtctl, "run", "--detach", "-p", "1", "--name", "n", "--", "true"]
        tot, wall = spawn_loop(argv, env, seconds, clients)
        jobs = json.loads(run("ps", "--all", "--json").stdout)["jobs"]
        ended = sum(1 for j in jobs if j["state"] in ("COMPLETED", "FAILED"))
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % head_port, timeout=10) as r:
            metrics = r.read().decode()
        counters = {}
        for line in metrics.splitlines():
            if line.startswith("dtsched_notifications"):
                name, value = line.rsplit(" ", 1)
                counters[name] = float(value)
        return {"submits_per_s": round(tot["ok"] / wall, 1), "failed": tot["bad"],
                "jobs_ended": ended, "notifications": counters}
    finally:
        run("agents", "stop")
        run("head", "stop")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3,
                    help="baseline and dead receiver alternated this many times (medians)")
    a = ap.parse_args()
    dtctl = str(Path(a.bin).resolve() / "dtctl")
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead.listen(4096)   # never accepted: the receiver never answers
    port = dead.getsockname()[1]
    notify = ("notify:\n  - {webhook: 'https://127.0.0.1:%d/hooks/x', on: [done, fail, start], "
              "timeout: 30s}\n" % port)
    rounds = []
    for _ in range(a.rounds):   # alternated, so a busy moment of the machine hits both
        base = one(dtctl, a.seconds, a.clients, "")
        slow = one(dtctl, a.seconds, a.clients, notify)
        rounds.append({"baseline": base, "dead_receiver": slow,
                       "submit_ratio": slow["submits_per_s"] / max(1e-9, base["submits_per_s"]),
                       "ended_ratio": slow["jobs_ended"] / max(1, base["jobs_ended"])})
    dead.close()
    med = lambda xs: sorted(xs)[len(xs) // 2]
    res = {"seconds": a.seconds, "clients": a.clients, "cores": os.cpu_count(),
           "load_average": os.getloadavg()[0], "rounds": [
               {"baseline_submits_per_s": r["baseline"]["submits_per_s"],
                "dead_submits_per_s": r["dead_receiver"]["submits_per_s"],
                "baseline_jobs_ended": r["baseline"]["jobs_ended"],
                "dead_jobs_ended": r["dead_receiver"]["jobs_ended"],
                "dead_queued": r["dead_receiver"]["notifications"].get(
                    "dtsched_notifications_queued"),
                "dead_dropped": r["dead_receiver"]["notifications"].get(
                    "dtsched_notifications_dropped_total")} for r in rounds],
           "submit_ratio_median": round(med([r["submit_ratio"] for r in rounds]), 3),
           "ended_ratio_median": round(med([r["ended_ratio"] for r in rounds]), 3)}
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
