#!/usr/bin/python3
"""bench_container.py - jobs in a container image against the same jobs bare (issue #33).

On 4 fake nodes (network namespaces, rootless podman per node as tests/e2e/test_container.py
sets it up, one dtagent per node, dtsched on the host), in one run, alternating:
  1. per rank: `dtctl run -n 1 -p 1 [-C IMG] -- true`: the start overhead of one rank in
     a container (podman run --rm, warm cache) against a bare rank, whole command;
  2. 4 nodes: `dtctl run -n 4 -p 1|2 [-C IMG] -- true` (4 and 8 ranks) against bare;
plus the first (cold) job, which loads the image on all 4 nodes at once.
Medians of --rounds; the added seconds and the ratios.  Goal (issue #33): <= 1.3 s added
to a job's start on a warm cache, independent of the node count.  The fake nodes share
this machine's cores, so ranks that start at once on several "nodes" compete for them
(podman's client costs ~0.25 s of CPU per rank): on real nodes each has its own.

With --base BIN (another build, e.g. of the previous commit in its own tree), each round
runs the jobs under both builds, one after the other (in turn first; dtsched and the
agents restarted between them), and prints both side by side, with the load average before and after.

    bench/bench_container.py [--bin bin] [--base BIN] [--rounds 5]     (root: fake cluster)
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
from conftest import FAKECLUSTER, FakeCluster  # noqa: E402
from test_container import CONTAINERS_CONF, Ctx, rootfs_tar, unavailable  # noqa: E402


SHAPES = {"1 node x 1 rank ": (1, 1), "4 nodes x 1 rank ": (4, 1), "4 nodes x 2 ranks": (4, 2)}


def timed(ctx, *args):
    t0 = time.monotonic()
    p = ctx.dtctl("run", *args, timeout=300)
    took = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit("bench_container: dtctl run %s failed:\n%s%s" % (args, p.stdout, p.stderr))
    return took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--base", help="another build's bin dir, measured in the same rounds")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    why = unavailable()
    if why:
        sys.exit("bench_container: " + why)
    env = dict(os.environ, FAKECLUSTER_CGROUPS="1", FAKECLUSTER_MODE="netns")
    subprocess.run([str(FAKECLUSTER), "up", "4"], check=True, env=env, capture_output=True)
    try:
        fc = FakeCluster.from_env()
        for i in range(1, 5):
            fc.exec(i, "mkdir -p ~/.config/containers && cat > ~/.config/containers/"
                    "containers.conf <<'EOF'\n%sEOF\n" % CONTAINERS_CONF, user=True)
        with tempfile.TemporaryDirectory() as tmp:
            ctx = Ctx(fc, Path(a.bin).resolve(), Path(tmp))
            ctx.devdir.mkdir()
            img = Path(fc.shared) / "img"
            img.mkdir()
            os.chmod(img, 0o777)
            image = img / "bb.tar"
            rootfs_tar("bench", image)
            builds = [("", Path(a.bin).resolve())]
            if a.base:
                builds.insert(0, ("base ", Path(a.base).resolve()))
            res = {label: {k: {"bare": [], "image": []} for k in SHAPES} for label, _ in builds}
            cold = {}
            load = [os.getloadavg()[0]]
            for r in range(a.rounds):
                for label, bin_dir in (builds if r % 2 == 0 else builds[::-1]):
                    ctx.bin = bin_dir
                    with ctx.running():
                        if r == 0:
                            cold[label] = timed(ctx, "-n", 4, "-p", 2, "-C", image, "--", "true")
                        for shape, (n, pp) in SHAPES.items():
                            d = res[label][shape]
                            d["bare"].append(timed(ctx, "-n", n, "-p", pp, "--", "true"))
                            d["image"].append(timed(ctx, "-n", n, "-p", pp, "-C", image, "--",
                                                    "true"))
            load.append(os.getloadavg()[0])
    finally:
        subprocess.run([str(FAKECLUSTER), "down"], capture_output=True)
    print("bench_container: %d rounds, medians (whole `dtctl run`, s); load average %.2f "
          "before, %.2f after" % (a.rounds, load[0], load[1]))
    for label, _ in builds:
        for shape in SHAPES:
            d = res[label][shape]
            b, i = statistics.median(d["bare"]), statistics.median(d["image"])
            print("  %s%s  bare %.3f  image %.3f  added %.3f s  ratio %.2fx"
                  % (label, shape, b, i, i - b, i / b))
        print("  %scold: first 4 x 2 job (the first under this build; only the first build's "
              "loads the image): %.3f s" % (label, cold[label]))


if __name__ == "__main__":
    main()
