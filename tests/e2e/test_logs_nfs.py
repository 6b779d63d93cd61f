"""Following a job's logs through a mount that caches like an NFS client (issue 27).

There is no kernel NFS here (/work/shared/nfs-here.md); bindfs (FUSE) with attr_timeout,
entry_timeout and negative_timeout of 3 s reproduces what NFS clients do with attributes
and lookups: another client's append is seen late, a new file appears late, a name looked
up before it existed stays missing for a while.  Each fake node mounts it over the shared
dir inside its own mount namespace (its own cache: the agents write their ranks' logs
through it), and `dtctl logs -f` reads through a third view on the host.  bindfs does not
do close-to-open revalidation, so it is harsher than NFS there: what passes here passes on
NFS, not necessarily the other way round.

The job's 4 ranks (2 nodes x 2) write numbered lines at different paces, one only after a
pause, while the follow runs from before their files exist: every line arrives exactly once,
in each rank's order.
"""

import re
import shutil
import subprocess
import time

import pytest

from conftest import HeadCluster

HEAD_PORT = 18671
AGENT_PORT = 18670
PY = "/usr/bin/python3"
CACHE = "attr_timeout=3,entry_timeout=3,negative_timeout=3"
LINES = 400

# rank r writes LINES numbered lines; rank 3 first stays silent for 4 s (its file exists,
# empty, and its size is cached as 0), rank 1 writes in bursts with pauses
WRITER = """import os, time
r = int(os.environ["RANK"])
if r == 3:
    time.sleep(4)
for i in range(%d):
    print("r%%d n%%d" %% (r, i))
    if r == 1 and i %% 50 == 49:
        time.sleep(0.7)
    elif i %% 10 == 9:
        time.sleep(0.02)
""" % LINES


class Ctx(HeadCluster):
    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=0, tag="nfs",
                         dead_after_ms=3000)


def mounted_fuse(run, path):
    """Whether path is a FUSE mount, as `run` (a node's exec, or the host's) sees it."""
    p = run(["stat", "-f", "-c", "%T", str(path)])
    return p.returncode == 0 and "fuse" in p.stdout


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    if not shutil.which("bindfs"):
        pytest.skip("bindfs not found (Debian package bindfs; scripts/deps.sh installs it)")
    fc = fake_cluster(2)
    if fc.mode != "netns":
        pytest.skip("needs a mount namespace per node (netns mode)")
    tmp = tmp_path_factory.mktemp("nfs")
    ctx = Ctx(fc, dtctl_bin, tmp)
    ctx.writer = ctx.shared_file("nfs", "writer.py", WRITER)
    # each node's own cached view of the shared dir, mounted over it in its namespace
    for i in range(1, fc.n + 1):
        p = fc.exec(i, ["bindfs", "-o", CACHE, str(fc.shared), str(fc.shared)])
        assert p.returncode == 0, p.stderr
        assert mounted_fuse(lambda a: fc.exec(i, a), fc.shared), "no FUSE mount on node %d" % i
        p = fc.exec(i, "touch %s/nfs/node%d && stat -c %%U %s/nfs/node%d"
                    % (fc.shared, i, fc.shared, i), user=True)
        assert p.returncode == 0 and p.stdout.strip() == fc.user, (p.stdout, p.stderr)
    # and the reader's, on the host
    ctx.view = tmp / "view"
    ctx.view.mkdir()
    subprocess.run(["bindfs", "-o", CACHE, str(fc.shared), str(ctx.view)], check=True)
    try:
        assert mounted_fuse(lambda a: subprocess.run(a, capture_output=True, text=True),
                            ctx.view)
        with ctx.running():
            yield ctx
    finally:
        subprocess.run(["umount", "-l", str(ctx.view)], capture_output=True)


def test_follow_through_caching_mounts_loses_and_repeats_nothing(cluster):
    # the slots taken first, so the job waits PENDING and its rank files appear only after
    # the follow has been looking (lookups of missing names are cached as missing)
    blocker = cluster.dtctl("run", "--detach", "-n", 2, "-p", 2, "--name", "blocker", "--",
                            "sleep", "60").stdout.strip()
    cluster.wait_job(blocker, ["RUNNING"])
    job = cluster.dtctl("run", "--detach", "-n", 2, "-p", 2, "-w", "/tmp", "--name", "nfs-writer", "--",
                        PY, cluster.writer).stdout.strip()
    assert job.startswith("j-"), job
    f = cluster.popen("logs", "-f", "--shared-dir", cluster.view, job)
    # let the follow look at the job dir while no rank file exists yet (a pause, not a
    # synchronisation: the assertions below hold whatever the order)
    time.sleep(1.5)
    assert cluster.show(job)["state"] == "PENDING", cluster.show(job)
    assert f.poll() is None, f.communicate()
    assert cluster.dtctl("cancel", blocker).returncode == 0
    try:
        out, err = f.communicate(timeout=120)
    finally:
        if f.poll() is None:
            f.kill()
    assert f.returncode == 0, err
    assert cluster.show(job)["state"] == "COMPLETED"
    got = {}
    for line in out.splitlines():
        m = re.match(r"^\[dtnode(\d) (\d)\] r(\d) n(\d+)$", line)
        assert m and m.group(2) == m.group(3), "unexpected line %r" % line
        got.setdefault(int(m.group(3)), []).append(int(m.group(4)))
    for r in range(4):
        seq = got.get(r, [])
        missing = sorted(set(range(LINES)) - set(seq))
        dups = len(seq) - len(set(seq))
        assert not missing and not dups and seq == sorted(seq), \
            "rank %d: %d lines missing (first %s), %d repeated, in order: %s" % (
                r, len(missing), missing[:5], dups, seq == sorted(seq))
    # read again after the end, through the same cached view: the same lines
    again = cluster.dtctl("logs", "--shared-dir", cluster.view, job)
    assert again.returncode == 0 and sorted(again.stdout.splitlines()) == sorted(out.splitlines())
