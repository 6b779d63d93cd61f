#!/usr/bin/python3
"""bench_submit.py - how many `dtctl run --detach` dtsched accepts per second.

A one-node `host: local` cluster (as tests/e2e/conftest.py's LocalCluster: its
own DTCTL_HOME, shared dir, ports; dtsched and one dtagent), a blocker job
holding both slots, then for each client count C (1, 4, 16, 64) C client
threads each run `dtctl run --detach --name bench -- sleep 600` back to back
for --seconds: the jobs users submit (a command job), queued behind the
blocker, so what is measured is acceptance (the reply with the job id), not
running.  Printed per C: jobs/s accepted, the client CPU (user+sys, from
wait4's rusage) per submit, and dtsched's CPU per job.

Also printed: the harness's own CPU per submit (its threads spawning and
reaping, from getrusage) and jobs_per_s_on_free_cores = cores / (client +
dtsched + harness CPU per job): the rate the machine's cores would allow if
nothing else ran on them (the run itself shares them with whatever else runs:
load_average, the 1-minute load when the client count started).

Beside them, in the same run and on the same machine:
  * exec floor: the same client threads running /bin/true instead of dtctl
    (what spawning processes alone allows from C clients);
  * a static start: the same clients running `busybox true` (busybox-static),
    its CPU per start and the client's CPU per submit over it
    (client_cpu_to_static_start, goal <= 1.2);
  * sqlite: the same rows (INSERT, then the UPDATE with the job's JSON, ~2 KB)
    with dtsched's pragmas (WAL, synchronous=NORMAL) in a Python loop, one
    transaction per job and one per 64 jobs: what the database alone allows.

    bench/bench_submit.py [--bin bin] [--seconds 3] [--clients 1,4,16,64]
                          [--perf FILE]   (perf record -g on dtsched during C=16)

Everything is bounded in time; dtsched and the agent are stopped at the end
(the agent stops the blocker; the queued jobs go with the scratch home).
"""
import argparse
import json
import os
import resource
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


BUSYBOX = next((p for p in ("/usr/bin/busybox", "/bin/busybox") if os.access(p, os.X_OK)), None)


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def spawn_loop(argv, env, seconds, nclients):
    """nclients threads running argv back to back for `seconds`: (ok, failed, cpu_s, wall_s)."""
    lock = threading.Lock()
    tot = {"ok": 0, "bad": 0, "cpu": 0.0, "err": ""}
    deadline = time.monotonic() + seconds

    def client():
        ok = bad = 0
        cpu = 0.0
        err = ""
        while time.monotonic() < deadline:
            pid = os.posix_spawn(argv[0], argv, env, file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0)])
            _, status, ru = os.wait4(pid, 0)
            cpu += ru.ru_utime + ru.ru_stime
            if os.waitstatus_to_exitcode(status) == 0:
                ok += 1
            else:
                bad += 1
                err = "exit %d" % os.waitstatus_to_exitcode(status)
        with lock:
            tot["ok"] += ok
            tot["bad"] += bad
            tot["cpu"] += cpu
            tot["err"] = tot["err"] or err

    t0 = time.monotonic()
    ths = [threading.Thread(target=client) for _ in range(nclients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(timeout=seconds + 60)
    return tot, time.monotonic() - t0


def sqlite_reference(dbdir, seconds, batch):
    """dtsched's two writes per job (INSERT, UPDATE with ~2 KB of JSON), `batch` jobs per
    transaction, for `seconds`: jobs/s."""
    path = Path(dbdir) / ("ref-%d.db" % batch)
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE jobs(seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, "
               "state TEXT NOT NULL, updated_us INTEGER, data TEXT)")
    db.execute("CREATE INDEX jobs_state ON jobs(state)")
    data = json.dumps({"spec": {"command": ["sleep", "600"], "env": {}}, "history": [],
                       "pad": "x" * 1800})
    n = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        db.execute("BEGIN")
        for _ in range(batch):
            cur = db.execute("INSERT INTO jobs(state, updated_us) VALUES('PENDING', 0)")
            seq = cur.lastrowid
            db.execute("UPDATE jobs SET id=?, state=?, updated_us=?, data=? WHERE seq=?",
                       ("j-%06d" % seq, "PENDING", int(time.time() * 1e6), data, seq))
        db.execute("COMMIT")
        n += batch
    rate = n / (time.monotonic() - t0)
    db.close()
    return rate


def local_cluster(dtctl, tmp, slots=2):
    """A one-node `host: local` cluster under tmp (its own DTCTL_HOME, shared dir and
    ports, as tests/e2e/conftest.py's LocalCluster): (home, env, run), run(*args)
    being one dtctl call in it.  Nothing is started: start_local_cluster(run)."""
    home, shared = tmp / "home", tmp / "shared"
    home.mkdir(mode=0o700)
    shared.mkdir()
    agent_port, head_port = free_ports(2)
    (home / "cluster.yaml").write_text(
        "cluster: bench\nshared_dir: %s\nnodes:\n  - {host: local, gpus: 0, slots: %d}\n"
        "agent: {port: %d, heartbeat: 500ms, dead_after: 5s}\nhead: {port: %d}\n"
        % (shared, slots, agent_port, head_port))
    env = dict(os.environ, DTCTL_HOME=str(home), DTCTL_NO_SYSTEMD="1", NO_COLOR="1")
    env.pop("DTCTL_CLUSTER", None)
    env.pop("DTCTL_SHARED_DIR", None)

    def run(*args, timeout=60):
        return subprocess.run([dtctl] + list(args), env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    return home, env, run


def start_local_cluster(run):
    """dtsched and the agent up, node 'local' UP (20 s at most)."""
    for what in (("head", "start"), ("agents", "start")):
        p = run(*what)
        assert p.returncode == 0, "dtctl %s: %s%s" % (" ".join(what), p.stdout, p.stderr)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        p = run("nodes", "--json")
        if p.returncode == 0 and any(n["state"] == "UP" for n in json.loads(p.stdout)["nodes"]):
            return
        time.sleep(0.2)
    sys.exit("bench: node 'local' not UP: %s" % p.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--perf", help="perf record -g dtsched into this file during C=16")
    a = ap.parse_args()
    b = Path(a.bin).resolve()
    dtctl = str(b / "dtctl")
    tmp = Path(tempfile.mkdtemp(prefix="bench-submit-"))
    home, env, run = local_cluster(dtctl, tmp)
    res = {"seconds": a.seconds, "cores": os.cpu_count(), "clients": []}
    try:
        start_local_cluster(run)
        p = run("run", "--detach", "-p", "2", "--name", "blocker", "--", "sleep", "600")
        assert p.returncode == 0, p.stderr
        pid = int((home / "dtsched.pid").read_text())
        hz = os.sysconf("SC_CLK_TCK")
        argv = [dtctl, "run", "--detach", "-p", "1", "--name", "bench", "--", "sleep", "600"]
        for c in [int(x) for x in a.clients.split(",")]:
            perf = None
            if a.perf and c == 16:
                perf = subprocess.Popen(["perf", "record", "-g", "-o", a.perf, "-p", str(pid)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            c0 = cpu_ticks(pid)
            h0 = resource.getrusage(resource.RUSAGE_SELF)
            la0 = os.getloadavg()[0]
            tot, wall = spawn_loop(argv, env, a.seconds, c)
            h1 = resource.getrusage(resource.RUSAGE_SELF)
            c1 = cpu_ticks(pid)
            if perf:
                perf.send_signal(2)
                perf.wait(timeout=30)
            floor, fwall = spawn_loop(["/bin/true"], env, a.seconds, c)
            # a bare start of a static binary: what a client's start cannot go below
            static = None
            if BUSYBOX:
                sfl, _ = spawn_loop([BUSYBOX, "true"], env, a.seconds, c)
                static = 1000 * sfl["cpu"] / max(1, sfl["ok"] + sfl["bad"])
            n = tot["ok"]
            # the harness's own CPU (its threads spawning and reaping) per submit, and
            # what the three together cost: the jobs/s two free cores would allow
            harness = 1000 * (h1.ru_utime + h1.ru_stime - h0.ru_utime - h0.ru_stime) / max(1, n)
            client = 1000 * tot["cpu"] / max(1, n + tot["bad"])
            sched = 1000 * (c1 - c0) / hz / max(1, n)
            res["clients"].append({
                "clients": c, "jobs_per_s": round(n / wall, 1), "failed": tot["bad"],
                "client_cpu_ms_per_submit": round(client, 2),
                "dtsched_cpu_ms_per_job": round(sched, 3),
                "harness_cpu_ms_per_submit": round(harness, 3),
                "jobs_per_s_on_free_cores": round(1000 * (os.cpu_count() or 1) /
                                                  max(1e-9, client + sched + harness), 1),
                "load_average": round(la0, 2),
                "static_start_cpu_ms": round(static, 3) if static else None,
                "client_cpu_to_static_start": round(client / static, 2) if static else None,
                "exec_floor_per_s": round(floor["ok"] / fwall, 1),
                "ratio_to_exec_floor": round(n / wall / max(1e-9, floor["ok"] / fwall), 3),
                "error": tot["err"] or None})
            print(json.dumps(res["clients"][-1]), flush=True)
        p = run("ps", "--json")
        res["pending_at_end"] = sum(1 for j in json.loads(p.stdout)["jobs"]
                                    if j["state"] == "PENDING") if p.returncode == 0 else None
        res["sqlite_ref_jobs_per_s_txn_per_job"] = round(sqlite_reference(tmp, 2, 1), 1)
        res["sqlite_ref_jobs_per_s_txn_per_64"] = round(sqlite_reference(tmp, 2, 64), 1)
        for r in res["clients"]:
            r["ratio_to_sqlite_txn_per_job"] = round(
                r["jobs_per_s"] / res["sqlite_ref_jobs_per_s_txn_per_job"], 3)
        print(json.dumps(res, indent=2))
    finally:
        run("agents", "stop")
        run("head", "stop")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
