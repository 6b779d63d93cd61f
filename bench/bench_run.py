#!/usr/bin/python3
"""bench_run.py - `dtctl run` against bare mpirun, and `dtctl logs -f` against tail -F.

1. Launch + finish a no-op 8-rank program (`true`) on 4 fake nodes (network namespaces,
   one dtagent per node running as the cluster user, dtsched on the host), alternating,
   in the same run:
     * `dtctl run -n 4 -p 2 --launcher mpi -- true`   (whole command: submit, place,
       port, mpirun + rank-log on node 1, state back, logs drained, exit)
     * `dtctl run -n 4 -p 2 --launcher agent -- true` (8 tasks through 4 agents)
     * bare `mpirun --hostfile H -np 8 true` typed on node 1 with the same hostfile and
       ssh configuration (timed inside the node).
   Targets: mpi <= 1.1x mpirun, agent <= 0.5x mpirun.
   With --end NxP (e.g. --end 16x1) only `dtctl run -n N -p P --launcher mpi -- true` on
   N fake nodes, --rounds times: the job end latency (issue #21 item 4, target <= 40 ms
   at 16 x 1), "last rank end -> job ended (dtsched)", median and p99, with the other steps.
2. Logs: 16 rank files in a job dir on the shared dir.
     * follow latency: a writer appends a timestamped line to a random rank file every
       20 ms; the time from the write to the line appearing on the reader's stdout, for
       `dtctl logs -f` (polling, as it must on NFS) and `tail -F` (inotify locally).
     * merged throughput: 16 x 50,000 existing lines, `dtctl logs JOB` (parse, merge
       in time order, prefix) against `tail -q -n +1` of the same files (no merge).

    bench/bench_run.py [--bin build/dev-run/bin] [--rounds 5] [--end 16x1] (root: fake cluster)
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from conftest import FAKECLUSTER, FakeCluster  # noqa: E402
from test_run import setup_ssh  # noqa: E402
from dtapi import DtApi  # noqa: E402

HEAD_PORT = 17881
AGENT_PORT = 17880


class Bench:
    def __init__(self, fc, bin_dir, home):
        self.fc, self.bin, self.home = fc, Path(bin_dir), home
        self.env = dict(os.environ, DTCTL_HOME=str(home), DTCTL_NO_SYSTEMD="1", NO_COLOR="1")

    def agent_home(self, i):
        return "/tmp/dtagent-home-%d" % i

    def dtctl(self, *args, **kw):
        return subprocess.run([str(self.bin / "dtctl")] + [str(a) for a in args],
                              capture_output=True, text=True, env=self.env,
                              stdin=subprocess.DEVNULL, **kw)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def launch_bench(b, rounds):
    fc = b.fc
    hostfile = fc.shared / "bench-hostfile"
    hostfile.write_text("".join("%s slots=2\n" % n.addr for n in fc.nodes))
    bare = ("t0=$(date +%%s%%N); mpirun --hostfile %s -np 8 --map-by slot --bind-to none "
            "--mca plm_rsh_args '-F %s/ssh_config' true >/dev/null || exit 1; t1=$(date +%%s%%N); "
            "echo $(( (t1 - t0) / 1000 ))" % (hostfile, b.agent_home(1)))
    # the same with every rank wrapped in dtctl's rank logger: what the wrapper costs
    rl = fc.shared / "bench-ranklog"
    logged = bare.replace(" true >/dev/null", " %s/dtshim rank-log %s/logs -- true >/dev/null"
                          % (b.bin, rl)).replace("echo $(( (t1 - t0) / 1000 ))", "echo $t0 $t1")
    res = {"mpi": [], "agent": [], "mpirun": [], "mpirun+ranklog": []}
    steps = {"mpi": [], "agent": [], "mpirun+ranklog": []}
    for r in range(rounds + 1):          # round 0 warms up caches and is dropped
        for kind in ("mpirun", "mpi", "agent", "mpirun+ranklog"):
            if kind == "mpirun":
                p = fc.exec(1, bare, user=True, timeout=120)
                assert p.returncode == 0, p.stderr
                t = int(p.stdout.strip()) / 1e6
            elif kind == "mpirun+ranklog":
                p = fc.exec(1, logged, user=True, timeout=120)
                assert p.returncode == 0, p.stderr
                t0, t1 = [int(x) / 1e9 for x in p.stdout.split()]
                t = t1 - t0
                ranks = [json.loads(f.read_text()) for f in (rl / "ranks").glob("*.json")]
                if r and len(ranks) == 8:
                    st = min(ts_parse(x["started_at"]) for x in ranks)
                    en = max(ts_parse(x["ended_at"]) for x in ranks)
                    steps[kind].append({"mpirun start -> first rank starts": round((st - t0) * 1000, 1),
                                        "first rank start -> last rank end": round((en - st) * 1000, 1),
                                        "last rank end -> mpirun exits": round((t1 - en) * 1000, 1)})
                for f in (rl / "ranks").glob("*.json"):
                    f.unlink()
            else:
                w0 = time.time()
                t0 = time.perf_counter()
                p = b.dtctl("run", "-n", 4, "-p", 2, "--launcher", kind, "--name",
                            "bench-" + kind, "--", "true", timeout=120)
                t = time.perf_counter() - t0
                w1 = time.time()
                assert p.returncode == 0, p.stdout + p.stderr
                if r:
                    steps[kind].append(job_steps(b, p.stderr, w0, w1))
            if r:
                res[kind].append(t)
    return res, steps


def end_bench(b, rounds, nodes, ppn):
    """`dtctl run -n nodes -p ppn --launcher mpi -- true`, rounds + a warm-up: steps per round."""
    steps = []
    for r in range(rounds + 1):
        w0 = time.time()
        p = b.dtctl("run", "-n", nodes, "-p", ppn, "--launcher", "mpi", "--name", "bench-end",
                    "--", "true", timeout=120)
        w1 = time.time()
        assert p.returncode == 0, p.stdout + p.stderr
        if r:
            st = job_steps(b, p.stderr, w0, w1)
            st.update(task_ends(b, p.stderr, nodes, st))
            steps.append(st)
    return steps


def task_ends(b, stderr, nodes, st):
    """From every agent's task list: when the job's orted tasks and its mpirun task ended,
    relative to the last rank's end (ms)."""
    jid = next((w for line in stderr.splitlines() for w in line.split() if w.startswith("j-")), None)
    p = b.dtctl("show", "--json", jid) if jid else None
    if not p or p.returncode:
        return {}
    j = json.loads(p.stdout)
    j = j.get("job", j)
    ends = []
    for f in (Path(j["job_dir"]) / "ranks").glob("*.json"):
        ends.append(ts_parse(json.loads(f.read_text()).get("ended_at")))
    if not ends or not all(ends):
        return {}
    last = max(ends)
    secret = (b.home / "secret").read_text().strip()
    # the job ends from the ranks' exit reports: mpirun and the orteds may still be
    # tearing down when dtctl exits; wait (bounded) for their tasks to end
    deadline = time.monotonic() + 10
    while True:
        orted, mpirun, live = [], None, 0
        for n in b.fc.nodes[:nodes]:
            code, body = DtApi(n.addr, AGENT_PORT, secret).request("GET", "/v1/tasks")
            for t in body.get("tasks", []) if code == 200 else []:
                if t.get("job_id") != jid:
                    continue
                if not t.get("ended_at"):
                    live += 1
                elif ".orted-" in t["id"]:
                    orted.append(ts_parse(t["ended_at"]))
                else:
                    mpirun = ts_parse(t["ended_at"])
        if not live or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    out = {}
    if orted:
        out["last rank end -> first orted task ended"] = min(orted) - last
        out["last rank end -> last orted task ended"] = max(orted) - last
    if mpirun:
        out["last rank end -> mpirun task ended"] = mpirun - last
    return {k: round(v * 1000, 1) for k, v in out.items()}


def print_end(steps, nodes, ppn):
    keys = []
    for st in steps:
        keys += [k for k in st if k not in keys]
    print("\n`dtctl run -n %d -p %d --launcher mpi -- true`, %d rounds (ms):" % (nodes, ppn, len(steps)))
    print("| step | median | p99 | min | max |")
    print("|---|---|---|---|---|")
    for k in keys:
        xs = [st[k] for st in steps if k in st]
        print("| %s | %.1f | %.1f | %.1f | %.1f |" % (k, statistics.median(xs), pct(xs, 99),
                                                     min(xs), max(xs)))
    sys.stdout.flush()


def ts_parse(s):
    """dt_timestamp() string -> unix seconds (float)."""
    import calendar
    if not s:
        return None
    base, frac = s.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) + int(frac) / 1e6


def job_steps(b, stderr, w0, w1):
    """Where one `dtctl run` spent its time, from dtsched's and the ranks' timestamps (ms)."""
    jid = next((w for line in stderr.splitlines() for w in line.split() if w.startswith("j-")), None)
    if not jid:
        return {}
    p = b.dtctl("show", "--json", jid)
    if p.returncode:
        return {}
    j = json.loads(p.stdout)
    j = j.get("job", j)
    hist = {h["state"]: ts_parse(h["at"]) for h in j.get("history", [])}
    sub, run, end = ts_parse(j.get("submitted_at")), hist.get("RUNNING"), ts_parse(j.get("ended_at"))
    starts, ends = [], []
    rdir = Path(j["job_dir"]) / "ranks"
    for f in (rdir.glob("*.json") if rdir.is_dir() else []):
        x = json.loads(f.read_text())
        starts.append(ts_parse(x.get("started_at")))
        ends.append(ts_parse(x.get("ended_at")))
    out = {"dtctl start -> submitted": sub - w0 if sub else None,
           "submitted -> RUNNING": run - sub if run and sub else None}
    if starts and all(starts) and all(ends):
        out["RUNNING -> first rank starts"] = min(starts) - run
        out["first rank start -> last rank end"] = max(ends) - min(starts)
        out["last rank end -> job ended (dtsched)"] = end - max(ends)
    else:
        out["RUNNING -> job ended (dtsched)"] = end - run if end and run else None
    out["job ended -> dtctl exits"] = w1 - end if end else None
    return {k: round(v * 1000, 1) for k, v in out.items() if v is not None}


def log_bench(b, work):
    jd = work / "jobs" / "j-bench"
    (jd / "logs").mkdir(parents=True, exist_ok=True)
    (jd / "state").write_text("RUNNING\n")
    files = [jd / "logs" / ("%d.log" % r) for r in range(16)]
    for f in files:
        f.write_text("")

    def ts():
        t = time.time()
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)

    def follow(argv, n=200):
        """Start argv, write n marked lines, return latencies in ms."""
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=b.env, bufsize=1)
        seen = {}

        def reader():
            for line in proc.stdout:
                k = line.find("MARK ")
                if k >= 0:
                    seen[line[k + 5:].split()[0]] = time.perf_counter()
        th = threading.Thread(target=reader, daemon=True)
        th.start()
        time.sleep(1.0)
        sent = {}
        handles = [open(f, "a") for f in files]
        for i in range(n):
            key = "k%d" % i
            h = random.choice(handles)
            sent[key] = time.perf_counter()
            h.write("%s O MARK %s\n" % (ts(), key))
            h.flush()
            time.sleep(0.02)
        time.sleep(1.0)
        for h in handles:
            h.close()
        proc.terminate()
        proc.wait(timeout=10)
        return [(seen[k] - sent[k]) * 1000 for k in sent if k in seen], len(seen)

    lat = {}
    lat["dtctl logs -f (--interval 200, default)"] = follow(
        [str(b.bin / "dtctl"), "logs", "-f", "--shared-dir", str(work), "j-bench"])
    lat["dtctl logs -f --interval 20"] = follow(
        [str(b.bin / "dtctl"), "logs", "-f", "--interval", "20", "--shared-dir", str(work), "j-bench"])
    lat["tail -F"] = follow(["tail", "-q", "-n", "0", "-F"] + [str(f) for f in files])

    # throughput: 16 x 50,000 lines
    n = 50000
    for r, f in enumerate(files):
        with open(f, "w") as h:
            base = time.time() - 1000
            for i in range(n):
                t = base + i * 0.01 + r * 0.0001
                h.write(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) +
                        ".%06dZ O rank %d step %d loss 0.%06d\n" % (int((t % 1) * 1e6), r, i, i))
    (jd / "state").write_text("COMPLETED\n")
    thr = {}
    for name, argv in (("dtctl logs (merged)", [str(b.bin / "dtctl"), "logs", "--shared-dir",
                                                 str(work), "j-bench"]),
                       ("tail -q -n +1 (no merge)", ["tail", "-q", "-n", "+1"] + [str(f) for f in files])):
        best = None
        for _ in range(3):
            t0 = time.perf_counter()
            p = subprocess.run(argv, stdout=subprocess.PIPE, env=b.env)
            t = time.perf_counter() - t0
            assert p.returncode == 0
            lines = p.stdout.count(b"\n")
            best = t if best is None or t < best else best
        thr[name] = (16 * n / best, lines, best)
    return lat, thr


def print_launch(res, steps, rounds):
    m = statistics.median(res["mpirun"])
    print("\nlaunch + finish of 8 no-op ranks on 4 fake nodes (%d rounds, median):" % rounds)
    print("| launcher | median s | min s | vs bare mpirun | target |")
    print("|---|---|---|---|---|")
    for kind, label, target in (("mpirun", "bare `mpirun -np 8 true` (on node 1)", ""),
                                ("mpirun+ranklog", "bare mpirun, ranks wrapped in `dtshim rank-log`", ""),
                                ("mpi", "`dtctl run --launcher mpi`", "<= 1.1x"),
                                ("agent", "`dtctl run --launcher agent`", "<= 0.5x")):
        md = statistics.median(res[kind])
        print("| %s | %.3f | %.3f | %.2fx | %s |" % (label, md, min(res[kind]), md / m, target))
    # each round ran the three back to back: the paired figures see less of the
    # machine's drift than the ratio of medians
    print("\npaired per round (median over rounds): mpi - mpirun %+.0f ms, mpi/mpirun %.2fx, "
          "agent/mpirun %.2fx" % (
              1000 * statistics.median(x - y for x, y in zip(res["mpi"], res["mpirun"])),
              statistics.median(x / y for x, y in zip(res["mpi"], res["mpirun"])),
              statistics.median(x / y for x, y in zip(res["agent"], res["mpirun"]))))
    for kind in ("mpirun+ranklog", "mpi", "agent"):
        keys = []
        for st in steps[kind]:
            keys += [k for k in st if k not in keys]
        print("\nwhere `dtctl run --launcher %s` spends its time (median ms over rounds):" % kind)
        print("| step | median ms |")
        print("|---|---|")
        for k in keys:
            xs = [st[k] for st in steps[kind] if k in st]
            print("| %s | %.1f |" % (k, statistics.median(xs)))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-logs", action="store_true", help="launch benchmark only")
    ap.add_argument("--end", metavar="NxP", help="only the mpi job end latency, N nodes x P ranks")
    a = ap.parse_args()
    nnodes, ppn = 4, 2
    if a.end:
        nnodes, ppn = [int(x) for x in a.end.split("x")]
    if os.geteuid() != 0:
        sys.exit("bench_run: needs root (fake cluster in network namespaces)")
    bin_dir = Path(a.bin).resolve()
    p = subprocess.run([str(FAKECLUSTER), "up", str(nnodes)], capture_output=True, text=True)
    if p.returncode:
        sys.exit("fakecluster up failed: " + p.stderr)
    fc = FakeCluster.from_env()
    tmp = Path(tempfile.mkdtemp(prefix="bench-run-"))
    home = tmp / "home"
    home.mkdir(mode=0o700)
    b = Bench(fc, bin_dir, home)
    try:
        nodes = "\n".join("  - {host: %s, name: %s, gpus: 0, slots: 2}" % (n.addr, n.name)
                          for n in fc.nodes)
        (home / "cluster.yaml").write_text(
            "cluster: bench\nshared_dir: %s\nnodes:\n%s\nagent: {port: %d, heartbeat: 1s}\n"
            "head: {address: %s, port: %d}\n" % (fc.shared, nodes, AGENT_PORT, fc.host_addr, HEAD_PORT))
        assert b.dtctl("head", "start").returncode == 0
        secret = (home / "secret").read_text().strip()

        class Shim:   # what setup_ssh needs
            def agent_home(self, i):
                return b.agent_home(i)
        setup_ssh(fc, Shim(), tmp)
        for i, n in enumerate(fc.nodes, 1):
            fc.exec(i, "mkdir -p -m 700 %s && umask 077 && printf '%%s\\n' %s > %s/secret"
                    % (b.agent_home(i), secret, b.agent_home(i)), user=True, check=True)
            p = fc.exec(i, [str(bin_dir / "dtagent"), "--home", b.agent_home(i), "--daemon",
                            "--name", n.name, "--bind", n.addr, "--port", str(AGENT_PORT),
                            "--gpus", "0", "--heartbeat-ms", "1000",
                            "--head", "%s:%d" % (fc.host_addr, HEAD_PORT)], user=True)
            assert p.returncode == 0, p.stderr
        for _ in range(50 + 10 * nnodes):
            p = b.dtctl("nodes", "--json")
            if p.returncode == 0 and sum(n["state"] == "UP" for n in json.loads(p.stdout)["nodes"]) == nnodes:
                break
            time.sleep(0.2)
        if a.end:
            print_end(end_bench(b, a.rounds, nnodes, ppn), nnodes, ppn)
            return
        res, steps = launch_bench(b, a.rounds)
        print_launch(res, steps, a.rounds)
        if not a.no_logs:
            lat, thr = log_bench(b, fc.shared)
    finally:
        for i in range(1, fc.n + 1):
            fc.exec(i, [str(bin_dir / "dtagent"), "--home", b.agent_home(i), "--stop"], user=True)
        b.dtctl("head", "stop")
        subprocess.run([str(FAKECLUSTER), "down"], capture_output=True)

    if a.no_logs:
        return
    print("\nfollow latency, write -> shown (200 lines over 16 files, 20 ms apart):")
    print("| reader | lines seen | p50 ms | p99 ms |")
    print("|---|---|---|---|")
    for name, (xs, seen) in lat.items():
        print("| %s | %d/200 | %.1f | %.1f |" % (name, seen, pct(xs, 50), pct(xs, 99)))
    print("\nthroughput over 16 x 50,000 lines (best of 3):")
    print("| reader | lines/s | lines out | s |")
    print("|---|---|---|---|")
    for name, (rate, lines, t) in thr.items():
        print("| %s | %.0f | %d | %.2f |" % (name, rate, lines, t))


if __name__ == "__main__":
    main()
