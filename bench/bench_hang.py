#!/usr/bin/python3
"""bench_hang.py - hang detection and attribution latency (docs/BENCHMARKS.md, issue #19).

On a 2-node fake cluster (network namespaces, one dtagent per node, dtsched on the host),
--rounds times (default 20): a 4-rank dttrain job (mpi launcher, 2 nodes x 2 ranks,
--stall-after S) with one rank made to hang (--hang-rank R:STEP:PHASE; R, STEP and PHASE
vary by round: data loading, inside the gradient all-reduce, the optimizer).  From the
job's own files:
  * hang start   the last line any rank wrote (logs/<r>.log timestamps; rank 0 logs
                 every step, so this is within one step of the hang)
  * detection    events.log "STALLED" line - hang start
  * attribution  events.log "ATTRIBUTION" line - the STALLED line
and whether the attribution named the hung rank, its node and its phase.

Side by side (--torch-rounds, on this host, no cluster): two torch.distributed gloo ranks,
rank 1 late, the process-group timeout set to stall_after: the time from rank 0 entering
the all-reduce to its error, and whether the error names rank 1.

The comparison is what a torchrun user gets by default: nothing until the process
group's timeout fires, and then an error on the waiting ranks that does not say which
rank they waited for.  torch's defaults: 30 min (default_pg_timeout, torch 1.13 as
Debian ships it: torch/distributed/constants.py, and init_process_group's docstring in
distributed_c10d.py "Default value equals 30 minutes"); NCCL 10 min since torch 2.2
(pytorch/pytorch#110947).  Those are constants, not measured here (30 min x 20 rounds).

    bench/bench_hang.py [--bin bin] [--rounds 20] [--stall-after 10] (root: fake cluster)
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from conftest import FAKECLUSTER, FakeCluster, HeadCluster  # noqa: E402

HEAD_PORT = 17981
AGENT_PORT = 17980
PHASES = ["data", "all-reduce", "optimizer"]
TORCH_GLOO_DEFAULT_S = 30 * 60
TORCH_NCCL_DEFAULT_S = 10 * 60


def ts(s):
    return datetime.strptime(s[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=timezone.utc).timestamp()


def last_output(job_dir):
    last = 0.0
    for f in (job_dir / "logs").glob("[0-9]*.log"):
        lines = f.read_text(errors="replace").splitlines()
        for line in reversed(lines):
            m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})Z ", line)
            if m:
                last = max(last, ts(m.group(1)))
                break
    return last


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


GLOO_LATE = r'''
import datetime, os, sys, time, torch, torch.distributed as dist
r = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ["TO"])))
t = torch.ones(4)
dist.all_reduce(t)
if r == 1:
    time.sleep(600)          # the late rank
t0 = time.time()
try:
    dist.all_reduce(t)
except Exception as e:
    print("ERROR %.3f %s" % (time.time() - t0, str(e).splitlines()[0][:200]), flush=True)
'''


def torch_baseline(rounds, timeout):
    """What a torchrun user gets: two gloo ranks on this host, rank 1 late; the time from
    rank 0 entering the all-reduce to its error, and whether the error names rank 1."""
    script = Path(tempfile.mkdtemp(prefix="bench-hang-torch-")) / "late.py"
    script.write_text(GLOO_LATE)
    out = []
    for i in range(rounds):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29600 + i),
                   WORLD_SIZE="2", TO=str(timeout))
        late = subprocess.Popen(["/usr/bin/python3", str(script)], env=dict(env, RANK="1"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            p = subprocess.run(["/usr/bin/python3", str(script)], env=dict(env, RANK="0"),
                               capture_output=True, text=True, timeout=timeout + 120)
        finally:
            late.kill()
            late.wait()
        m = re.search(r"ERROR (\S+) (.*)", p.stdout)
        assert m, p.stdout + p.stderr
        out.append((float(m.group(1)), m.group(2)))
        print("torch gloo, timeout %g s: error after %.2f s: %s" % (timeout, out[-1][0],
                                                                    out[-1][1]), flush=True)
    return out


def one_round(c, i, stall_after):
    rank, step, phase = i % 4, 3 + i % 5, PHASES[i % len(PHASES)]
    p = c.dtctl("run", "--detach", "-n", 2, "-p", 2, "--launcher", "mpi", "--stall-after",
                "%ds" % stall_after, "--name", "hang%d" % i, "--trainer", "--",
                "--model=mlp", "--hidden=32", "--train-size=512", "--val-size=64",
                "--log-every=1", "--steps=100000", "--threads=1",
                "--hang-rank=%d:%d:%s" % (rank, step, phase))
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    deadline = time.time() + stall_after + 90
    try:
        while True:
            j = json.loads(c.dtctl("show", "--json", job).stdout)["job"]
            jd = Path(j["job_dir"])
            ev = (jd / "events.log").read_text() if (jd / "events.log").exists() else ""
            if "ATTRIBUTION" in ev:
                break
            if time.time() > deadline or j["state"] not in ("PENDING", "RUNNING"):
                raise AssertionError("round %d: no attribution: %s %s" % (i, j["state"], ev))
            time.sleep(0.5)
        stalled = ts(re.search(r"^(\S+) STALLED", ev, re.M).group(1))
        attrib_line = re.search(r"^(\S+) ATTRIBUTION (.*)$", ev, re.M)
        attributed = ts(attrib_line.group(1))
        start = last_output(jd)
        node = j["placement"][rank // 2]["node"]
        h = j.get("hang") or {}
        named = [x["rank"] for x in h.get("culprits", [])]
        right = named == [rank] and h["culprits"][0]["node"] == node and \
            h["culprits"][0]["phase"] == phase
        return dict(round=i, rank=rank, step=step, phase=phase, detect=stalled - start,
                    attrib=attributed - stalled, right=right, text=attrib_line.group(2))
    finally:
        c.dtctl("cancel", job)
        for _ in range(100):
            j = json.loads(c.dtctl("show", "--json", job).stdout)["job"]
            if j["state"] not in ("PENDING", "RUNNING"):
                break
            time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--stall-after", type=int, default=10, help="seconds (the job's stall_after)")
    ap.add_argument("--torch-rounds", type=int, default=3,
                    help="rounds of the torch gloo timeout, set to --stall-after (0: none)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_hang: needs root (fake cluster in network namespaces)")
    p = subprocess.run([str(FAKECLUSTER), "up", "2"], capture_output=True, text=True)
    if p.returncode:
        sys.exit("fakecluster up failed: " + p.stderr)
    fc = FakeCluster.from_env()
    # a copy the nodes see, so that a rebuild meanwhile changes nothing under the bench
    bin_dir = fc.shared / "bench-hang-bin"
    shutil.rmtree(bin_dir, ignore_errors=True)
    bin_dir.mkdir()
    for prog in ("dtctl", "dtctl-full", "dtagent", "dtshim", "dtsched", "dttrain"):
        if (Path(a.bin) / prog).exists():     # dtctl-full: beside the static front
            shutil.copy2(Path(a.bin) / prog, bin_dir / prog)
    os.chmod(bin_dir, 0o755)
    c = HeadCluster(fc, bin_dir, Path(tempfile.mkdtemp(prefix="bench-hang-")),
                    HEAD_PORT, AGENT_PORT, gpus=0, tag="bhang", dead_after_ms=5000)
    res = []
    load0 = os.getloadavg()[0]
    try:
        with c.running():
            for i in range(a.rounds):
                r = one_round(c, i, a.stall_after)
                res.append(r)
                print("round %2d: rank %d step %d %-10s detect %5.1f s attribute %4.1f s %s"
                      % (i, r["rank"], r["step"], r["phase"], r["detect"], r["attrib"],
                         "right" if r["right"] else "WRONG: " + r["text"]), flush=True)
    finally:
        subprocess.run([str(FAKECLUSTER), "down"], capture_output=True)
    base = torch_baseline(a.torch_rounds, a.stall_after) if a.torch_rounds else []
    load1 = os.getloadavg()[0]
    d = [r["detect"] for r in res]
    t = [r["attrib"] for r in res]
    tot = [r["detect"] + r["attrib"] for r in res]
    print("\n%d injected hangs, stall_after %d s, load average %.1f -> %.1f, %d/%d named "
          "right (rank, node, phase)" % (len(res), a.stall_after, load0, load1,
                                         sum(r["right"] for r in res), len(res)))
    print("| | p50 s | p99 s | max s |")
    print("|---|---|---|---|")
    for name, xs in (("detection (hang -> STALLED)", d), ("attribution (STALLED -> named)", t),
                     ("hang -> culprit named", tot)):
        print("| %s | %.1f | %.1f | %.1f |" % (name, pct(xs, 50), pct(xs, 99), max(xs)))
    if base:
        bt = [x[0] for x in base]
        print("| torch gloo with timeout = %d s (hang -> error; names a rank: %s) | %.1f | %.1f "
              "| %.1f |" % (a.stall_after, "yes" if any(re.search(r"rank\s*1\b", x[1])
                                                      for x in base) else "no",
                            pct(bt, 50), pct(bt, 99), max(bt)))
    print("| torch default, gloo (torch 1.13: 30 min; names no rank) | %d | %d | |"
          % (TORCH_GLOO_DEFAULT_S, TORCH_GLOO_DEFAULT_S))
    print("| torch default, NCCL watchdog (torch >= 2.2: 10 min; names no rank) | %d | %d | |"
          % (TORCH_NCCL_DEFAULT_S, TORCH_NCCL_DEFAULT_S))
    print("ratio hang -> named (p50) vs NCCL default: %.0fx faster; vs gloo default: %.0fx"
          % (TORCH_NCCL_DEFAULT_S / pct(tot, 50), TORCH_GLOO_DEFAULT_S / pct(tot, 50)))


if __name__ == "__main__":
    main()
