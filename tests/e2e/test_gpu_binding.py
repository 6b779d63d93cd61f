"""Every rank sees exactly the GPUs it was given, on every node, with both launchers.

A 3-node fake cluster whose agents report 4 fake GPUs each.  Each rank prints its
CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER; the test compares them with the job's
reservation (`dtctl show --json`: placement slots and each rank's `gpus`):

  - two GPU jobs share every node (one agent launcher, one mpi launcher): each rank on
    node k sees that job's GPUs on node k and nothing of the other job's (before the
    fix, the mpi ranks on nodes 1.. saw GPUs 0..g-1 whatever was reserved);
  - a CPU job beside them sees no GPU (CUDA_VISIBLE_DEVICES=-1, as flux's gpubind);
  - GPU slots are NVML (PCI bus) numbers, so CUDA_DEVICE_ORDER=PCI_BUS_ID;
  - a retried job's second attempt sees its new reservation.
"""

import json
import re
import time

import pytest

from conftest import HeadCluster

HEAD_PORT = 17971
AGENT_PORT = 17970
BIND = ('echo "BIND rank=${OMPI_COMM_WORLD_RANK:-$RANK} cvd=${CUDA_VISIBLE_DEVICES-unset} '
        'order=${CUDA_DEVICE_ORDER-unset}"')


class Ctx(HeadCluster):
    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=4, tag="gpubind",
                         dead_after_ms=3000)

    def submit(self, *args):
        p = self.dtctl("run", "--detach", *args)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout.strip()

    def bindings(self, job):
        """{rank: (cvd, order)} from the job's logs."""
        p = self.dtctl("logs", job)
        assert p.returncode == 0, p.stderr
        out = {}
        for m in re.finditer(r"BIND rank=(\d+) cvd=(\S*) order=(\S*)", p.stdout):
            out[int(m.group(1))] = (m.group(2), m.group(3))
        return out


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    fc = fake_cluster(3)
    ctx = Ctx(fc, dtctl_bin, tmp_path_factory.mktemp("gpubind"))
    with ctx.running():
        yield ctx


def expected(job):
    """{rank: gpus} from the reservation: node k of the placement holds ranks k*per..."""
    per = job["per_node"]
    return {r: job["placement"][r // per]["slots"] for r in range(job["world_size"])}


def test_two_gpu_jobs_share_nodes_both_launchers_and_a_cpu_job(cluster):
    hold = "; sleep 4"
    a = cluster.submit("-n", 3, "-g", 2, "--name", "bind-agent", "--", "sh", "-c", BIND + hold)
    b = cluster.submit("-n", 3, "-g", 2, "--launcher", "mpi", "--name", "bind-mpi", "--",
                       "sh", "-c", BIND + hold)
    c = cluster.submit("-n", 1, "-p", 1, "--name", "bind-cpu", "--", "sh", "-c", BIND)
    ja = cluster.wait_job(a, ("COMPLETED", "FAILED"))
    jb = cluster.wait_job(b, ("COMPLETED", "FAILED"))
    jc = cluster.wait_job(c, ("COMPLETED", "FAILED"))
    assert ja["state"] == jb["state"] == jc["state"] == "COMPLETED", (ja, jb, jc)
    # both held 2 of each node's 4 GPUs at the same time: disjoint reservations
    for pa, pb in zip(sorted(ja["placement"], key=lambda p: p["node"]),
                      sorted(jb["placement"], key=lambda p: p["node"])):
        assert not set(pa["slots"].split(",")) & set(pb["slots"].split(",")), (pa, pb)
    for j, job in ((ja, a), (jb, b)):
        got = cluster.bindings(job)
        want = expected(j)
        assert {r: g[0] for r, g in got.items()} == want, (j["launcher"], got, want)
        assert {g[1] for g in got.values()} == {"PCI_BUS_ID"}, got
        # show lists each rank's GPUs, the same ones
        ranks = {r["rank"]: r["gpus"] for r in j["ranks"] if r["rank"] >= 0}
        assert ranks == want, (j["launcher"], ranks, want)
    got = cluster.bindings(c)
    assert got == {0: ("-1", "unset")}, got
    text = cluster.dtctl("show", a).stdout
    assert re.search(r"^\s+0 +\S+ +\S+ +0 +\S+ +%s " % re.escape(want_first(ja)), text, re.M), text


def want_first(job):
    return job["placement"][0]["slots"]


def test_retried_job_sees_its_new_reservation(cluster):
    # every rank of the first attempt fails (fail-fast may stop the others before they
    # could leave a mark, so the attempt number decides: torchrun's restart count)
    script = 'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 3; fi; ' + BIND
    jid = cluster.submit("-n", 2, "-g", 3, "--retries", 1, "--name", "bind-retry", "--",
                         "sh", "-c", script)
    j = cluster.wait_job(jid, ("COMPLETED", "FAILED"))
    assert j["state"] == "COMPLETED" and j["attempt"] == 1, j
    got = cluster.bindings(jid)
    assert {r: g[0] for r, g in got.items()} == expected(j), (got, j["placement"])
