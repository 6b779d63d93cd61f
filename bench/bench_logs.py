#!/usr/bin/env python3
"""dtctl logs against sort -m and cat; dtctl logs -f against tail -F.

merge:  R rank files of about MB megabytes each (realistic training-log lines,
        timestamps interleaved across ranks) in a job dir of the shared-dir
        layout; then N paired rounds, each running `cat`, `LC_ALL=C sort -m`
        and `dtctl logs` on the same files with stdout to /dev/null, every
        command under /usr/bin/time -v (peak RSS) and timed by wall clock.
        Prints the medians and dtctl's ratio to sort -m.
follow: a writer process appends timestamped lines to a rank file at a steady
        rate; `dtctl logs -f --no-prefix` and `tail -F` read it at the same
        time; each line carries its CLOCK_MONOTONIC write time, compared with
        the time the line is read from each reader's stdout.  Prints p50/p99
        latency and each reader's CPU (utime+stime over the wall time), with
        inotify (the job dir is local) and with DTCTL_LOGS_POLL=1 (polling,
        as on NFS).

    bench/bench_logs.py --bin bin                       # both, defaults below
    bench/bench_logs.py --bin bin --only merge --rounds 7
    bench/bench_logs.py --bin bin --only follow-poll --period 1:10 --seconds 300
"""
import argparse
import json
import os
import random
import re
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone, timedelta

BASE = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)
WORDS = ("loss grad_norm lr tokens/s mfu allreduce bucket ckpt eval ppl acc data "
         "shard worker epoch warmup scaler overflow skipped nccl stream cuda "
         "memory allocated reserved peak dataloader prefetch").split()


_sec_cache = {}


def ts_str(us):
    sec = us // 1000000
    head = _sec_cache.get(sec)
    if head is None:
        head = _sec_cache[sec] = (BASE + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%S.")
    return f"{head}{us % 1000000:06d}Z"


def make_job(root, ranks, mb, seed=1):
    """A job dir with `ranks` rank files of about `mb` MB each; returns (shared, paths, lines)."""
    rng = random.Random(seed)
    shared = os.path.join(root, "shared")
    logs = os.path.join(shared, "jobs", "j-000001", "logs")
    os.makedirs(logs)
    with open(os.path.join(shared, "jobs", "j-000001", "placement.json"), "w") as f:
        json.dump({"ranks": [{"rank": r, "node": f"gpu{r // 8 + 1:03d}"} for r in range(ranks)]}, f)
    paths, total = [], 0
    target = mb * 1000 * 1000
    for r in range(ranks):
        path = os.path.join(logs, f"{r}.log")
        paths.append(path)
        us, step, size, out = 0, 0, 0, []
        with open(path, "w") as f:
            while size < target:
                # ranks step together: the same clock, each with its own jitter
                us += rng.randint(20, 240)
                step += 1
                pad = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 13)))
                stream = "E" if step % 97 == 0 else "O"
                line = (f"{ts_str(us)} {stream} [rank{r}] step {step} loss "
                        f"{rng.random() * 4:.5f} lr {rng.random() * 1e-3:.3e} {pad}\n")
                out.append(line)
                size += len(line)
                if len(out) >= 20000:
                    f.write("".join(out))
                    total += len(out)
                    out = []
            f.write("".join(out))
            total += len(out)
    return shared, paths, total


def timed(cmd, env=None):
    """Wall seconds and peak RSS (KiB, from /usr/bin/time -v) of cmd > /dev/null."""
    with open(os.devnull, "wb") as null:
        t0 = time.perf_counter()
        p = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=null, stderr=subprocess.PIPE,
                           env=env)
        wall = time.perf_counter() - t0
    err = p.stderr.decode(errors="replace")
    if p.returncode:
        sys.exit(f"bench_logs: {cmd[0]} failed ({p.returncode}): {err[-500:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))
    return wall, rss


def bench_merge(args, dtctl):
    root = tempfile.mkdtemp(prefix="bench_logs.")
    try:
        t0 = time.time()
        shared, paths, total = make_job(root, args.ranks, args.mb)
        size = sum(os.path.getsize(p) for p in paths)
        print(f"merge: {args.ranks} rank files, {size / 1e6:.0f} MB, {total} lines "
              f"(made in {time.time() - t0:.1f} s)")
        env = dict(os.environ, NO_COLOR="1", LC_ALL="C")
        out = subprocess.run([dtctl, "logs", "--shared-dir", shared, "j-000001"],
                             stdout=subprocess.PIPE, env=env, check=True).stdout
        printed = out.count(b"\n")
        if printed != total:
            sys.exit(f"bench_logs: dtctl logs printed {printed} lines, not {total}")
        del out
        cmds = {
            "cat": ["cat", *paths],
            "sort -m": ["sort", "-m", *paths],
            "dtctl logs": [dtctl, "logs", "--shared-dir", shared, "j-000001"],
        }
        if args.base_bin:   # the same command from another build, e.g. before a change
            cmds["dtctl (base)"] = [os.path.abspath(os.path.join(args.base_bin, "dtctl")), "logs",
                                    "--shared-dir", shared, "j-000001"]
        for cmd in cmds.values():   # warm the page cache
            timed(cmd, env)
        res = {k: [] for k in cmds}
        load0 = os.getloadavg()
        for _ in range(args.rounds):
            for k, cmd in cmds.items():
                res[k].append(timed(cmd, env))
        load1 = os.getloadavg()
        print(f"  load average before {load0[0]:.2f}, after {load1[0]:.2f}; "
              f"{args.rounds} paired rounds, medians:")
        sort_t = statistics.median(w for w, _ in res["sort -m"])
        for k, v in res.items():
            wall = statistics.median(w for w, _ in v)
            rss = statistics.median(r for _, r in v) / 1024
            print(f"  {k:12s} {wall:7.3f} s  {rss:7.1f} MiB peak  {wall / sort_t:5.2f}x sort -m"
                  f"   (all: {' '.join(f'{w:.3f}' for w, _ in v)})")
    finally:
        shutil.rmtree(root)


WRITER = r"""
import os, sys, time
import random
path, rate, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
lo, hi = (float(x) for x in sys.argv[4].split(":")) if len(sys.argv) > 4 else (0, 0)
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
start = due = time.monotonic()
for i in range(count):
    # a steady rate, or (--period) a silence of lo..hi seconds before each line
    due = start + i / rate if not hi else due + random.uniform(lo, hi)
    while True:
        d = due - time.monotonic()
        if d <= 0:
            break
        time.sleep(d)
    now = time.time()
    t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%06dZ" % int(now % 1 * 1e6)
    os.write(fd, ("%s O seq %d mono %d pad pad pad\n" % (t, i, time.monotonic_ns())).encode())
"""


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def bench_follow(args, dtctl, poll):
    root = tempfile.mkdtemp(prefix="bench_logs_f.")
    try:
        jd = os.path.join(root, "shared", "jobs", "j-000001")
        os.makedirs(os.path.join(jd, "logs"))
        path = os.path.join(jd, "logs", "0.log")
        open(path, "w").close()
        env = dict(os.environ, NO_COLOR="1")
        if poll:
            env["DTCTL_LOGS_POLL"] = "1"
        readers = {
            "dtctl logs -f": subprocess.Popen([dtctl, "logs", "-f", "--no-prefix", "--shared-dir",
                                               os.path.join(root, "shared"), "j-000001"],
                                              stdout=subprocess.PIPE, env=env),
            "tail -F": subprocess.Popen(["tail", "-n", "0", "-F", path], stdout=subprocess.PIPE),
        }
        if args.base_bin:
            readers["dtctl (base) -f"] = subprocess.Popen(
                [os.path.abspath(os.path.join(args.base_bin, "dtctl")), "logs", "-f", "--no-prefix",
                 "--shared-dir", os.path.join(root, "shared"), "j-000001"],
                stdout=subprocess.PIPE, env=env)
        time.sleep(0.5)
        if args.period:
            lo, hi = (float(x) for x in (args.period + ":" + args.period).split(":")[:2])
            count = max(1, int(args.seconds / ((lo + hi) / 2)))
            wargs = [f"{lo}:{hi}"]
        else:
            count = int(args.rate * args.seconds)
            wargs = []
        cpu0 = {k: cpu_s(p.pid) for k, p in readers.items()}
        t0 = time.monotonic()
        writer = subprocess.Popen([sys.executable, "-c", WRITER, path, str(args.rate), str(count)] + wargs)
        sel = selectors.DefaultSelector()
        bufs, lat = {}, {k: [] for k in readers}
        for k, p in readers.items():
            os.set_blocking(p.stdout.fileno(), False)
            sel.register(p.stdout, selectors.EVENT_READ, k)
            bufs[k] = b""
        deadline = time.monotonic() + args.seconds + 10
        while time.monotonic() < deadline and any(len(v) < count for v in lat.values()):
            for key, _ in sel.select(timeout=0.5):
                now = time.monotonic_ns()
                k = key.data
                chunk = os.read(key.fileobj.fileno(), 1 << 16)
                bufs[k] += chunk
                *lines, bufs[k] = bufs[k].split(b"\n")
                for line in lines:
                    m = re.search(rb"mono (\d+)", line)
                    if m:
                        lat[k].append((now - int(m.group(1))) / 1e6)
        wall = time.monotonic() - t0
        cpu1 = {k: cpu_s(p.pid) for k, p in readers.items()}
        writer.wait()
        with open(os.path.join(jd, "state"), "w") as f:
            f.write("COMPLETED\n")
        for p in readers.values():
            if p.args[0] == "tail":
                p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        mode = "polling (DTCTL_LOGS_POLL=1)" if poll else "inotify (local dir)"
        what = f"one every {args.period} s" if args.period else f"at {args.rate:.0f}/s"
        print(f"follow, dtctl {mode}: {count} lines {what}, "
              f"load average {os.getloadavg()[0]:.2f}")
        for k, v in lat.items():
            if not v:
                print(f"  {k:16s} no lines seen")
                continue
            print(f"  {k:16s} p50 {pct(v, 0.5):6.2f} ms  p99 {pct(v, 0.99):6.2f} ms  "
                  f"max {max(v):6.2f} ms  cpu {(cpu1[k] - cpu0[k]) / wall * 100:4.1f} %  "
                  f"({len(v)}/{count} lines)")
    finally:
        shutil.rmtree(root)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="bin")
    ap.add_argument("--base-bin", help="also time this build's dtctl (merge and follow)")
    ap.add_argument("--only", choices=("merge", "follow", "follow-poll"))
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--mb", type=float, default=65)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rate", type=float, default=100, help="follow: lines per second")
    ap.add_argument("--seconds", type=float, default=20, help="follow: how long to write")
    ap.add_argument("--period", help="follow: a line after a silence of S (or LO:HI, random) "
                    "seconds instead of --rate, the training-log pattern")
    args = ap.parse_args()
    dtctl = os.path.abspath(os.path.join(args.bin, "dtctl"))
    if args.only in (None, "merge"):
        bench_merge(args, dtctl)
    if args.only in (None, "follow"):
        bench_follow(args, dtctl, poll=False)
    if args.only != "merge":
        bench_follow(args, dtctl, poll=True)


if __name__ == "__main__":
    main()
