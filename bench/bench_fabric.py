#!/usr/bin/python3
"""bench_fabric.py - the fabric test's own overhead, and what the pre-flight gate costs a job.

On N fake nodes (network namespaces, one dtagent per node, dtsched on the host), alternating
in the same run, --rounds times:

  * `dtctl doctor --fabric` and `dtctl doctor --fabric --quick` (whole command: submit,
    place, mpirun through the agents, the verdict against the baselines, printed);
  * what a user would do otherwise: the same program by hand, bare `mpirun --hostfile H
    -np N --map-by node dttrain --fabric full|quick` typed on node 1 (timed inside the
    node), the nccl-tests / OSU way of running a measurement with mpirun;
  * a `dtctl run` of a no-op 3-node job (`command: [/bin/true]`) with and without
    `preflight: true`: what the gate adds to a job's start; and what the default
    connectivity check (no `preflight:`) adds, against `preflight: false`.

    bench/bench_fabric.py [--bin bin] [--rounds 5] [--nodes 4]   (root: fake cluster)
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from conftest import FAKECLUSTER, FakeCluster, HeadCluster  # noqa: E402
from test_run import setup_ssh  # noqa: E402

HEAD_PORT = 17981
AGENT_PORT = 17980


def timed(fn):
    t0 = time.time()
    ok = fn()
    return time.time() - t0, ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=4)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_fabric: needs root (fake cluster in network namespaces)")
    bin_dir = Path(a.bin).resolve()
    p = subprocess.run([str(FAKECLUSTER), "up", str(a.nodes)], capture_output=True, text=True)
    if p.returncode:
        sys.exit("fakecluster up failed: " + p.stderr)
    fc = FakeCluster.from_env()
    tmp = Path(tempfile.mkdtemp(prefix="bench-fabric-"))
    hc = HeadCluster(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=0, tag="bfabric",
                     dead_after_ms=5000, dtctl_timeout=300)
    # as tests/e2e/test_fabric.py: this VM's noise (docs/agents.md, "Fabric test")
    with open(hc.home / "cluster.yaml", "a") as f:
        f.write("health: {fabric_fraction: 0.2}\n")
    hostfile = fc.shared / "bench-fabric-hostfile"
    hostfile.write_text("".join("%s slots=1\n" % n.addr for n in fc.nodes))
    os.chmod(hostfile, 0o644)
    res = {k: [] for k in ("doctor --fabric", "mpirun dttrain --fabric full",
                           "doctor --fabric --quick", "mpirun dttrain --fabric quick",
                           "run 3 nodes, preflight: false", "run 3 nodes (connectivity check)",
                           "run 3 nodes, preflight")}
    plain = tmp / "plain.yaml"
    plain.write_text("name: plain\nnodes: 3\ncommand: [/bin/true]\n")
    unchecked = tmp / "unchecked.yaml"
    unchecked.write_text("name: unchecked\nnodes: 3\npreflight: false\ncommand: [/bin/true]\n")
    gated = tmp / "gated.yaml"
    gated.write_text("name: gated\nnodes: 3\npreflight: true\ncommand: [/bin/true]\n")
    measured = {}
    try:
        setup_ssh(fc, hc, tmp)
        with hc.running():
            def bare(mode):
                cmd = ("t0=$(date +%%s%%N); mpirun --hostfile %s -np %d --map-by node "
                       "--bind-to none --mca plm_rsh_args '-F %s/ssh_config' %s/dttrain "
                       "--fabric %s >/dev/null || exit 1; t1=$(date +%%s%%N); "
                       "echo $(( (t1 - t0) / 1000 ))"
                       % (hostfile, a.nodes, hc.agent_home(1), bin_dir, mode))
                p = fc.exec(1, cmd, user=True, timeout=300)
                assert p.returncode == 0, p.stderr
                return int(p.stdout.split()[-1]) / 1e6

            measured.update(full=[], quick=[])

            def ok(*args):
                p = hc.dtctl(*args)
                assert p.returncode == 0, p.stdout + p.stderr
                m = [x for x in p.stdout.splitlines() if x.startswith("measured in ")]
                if m:   # the measurement itself, from rank 0's document
                    measured["quick" if "--quick" in args else "full"].append(
                        float(m[0].split()[2]))
                return True

            hc.dtctl("doctor", "--fabric")     # warm-up; records the first baselines
            for r in range(a.rounds):
                res["doctor --fabric"].append(timed(lambda: ok("doctor", "--fabric"))[0])
                res["mpirun dttrain --fabric full"].append(bare("full"))
                res["doctor --fabric --quick"].append(
                    timed(lambda: ok("doctor", "--fabric", "--quick"))[0])
                res["mpirun dttrain --fabric quick"].append(bare("quick"))
                res["run 3 nodes, preflight: false"].append(
                    timed(lambda: ok("run", unchecked))[0])
                res["run 3 nodes (connectivity check)"].append(timed(lambda: ok("run", plain))[0])
                res["run 3 nodes, preflight"].append(timed(lambda: ok("run", gated))[0])
                print("round %d/%d done" % (r + 1, a.rounds), file=sys.stderr)
    finally:
        subprocess.run([str(FAKECLUSTER), "down"], capture_output=True)
    print("load average at the end: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    for mode, v in measured.items():
        print("the measurement itself (%s): median %.0f ms (%s)" % (
            mode, statistics.median(v), ", ".join("%.0f" % x for x in v)))
    print("| measure (%d fake nodes) | median s | rounds (s) |" % a.nodes)
    print("|---|---|---|")
    for k, v in res.items():
        print("| %s | **%.2f** | %s |" % (k, statistics.median(v),
                                          ", ".join("%.2f" % x for x in v)))
    for mine, base in (("doctor --fabric", "mpirun dttrain --fabric full"),
                       ("doctor --fabric --quick", "mpirun dttrain --fabric quick"),
                       ("run 3 nodes (connectivity check)", "run 3 nodes, preflight: false"),
                       ("run 3 nodes, preflight", "run 3 nodes, preflight: false")):
        print("%s / %s: %.2fx" % (mine, base, statistics.median(res[mine]) /
                                  statistics.median(res[base])))


if __name__ == "__main__":
    main()
