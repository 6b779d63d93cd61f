"""dtctl doctor on the fake cluster: all checks pass on a clean cluster; a planted Open MPI
version mismatch (a fake mpirun put first on PATH by ~/.dtctl/env.sh on one node) and a shared
dir that is not shared (a private bind mount over it on one node) are both found and named."""

import json
import re
import shutil
import subprocess

import pytest

from test_init import home_of, write_cluster

N = 3


@pytest.fixture(scope="module")
def cluster(fake_cluster):
    c = fake_cluster(N)
    if not c.password:
        pytest.skip("fake cluster without password login (non-root loopback mode)")
    return c


@pytest.fixture
def inited(cluster, dtctl, tmp_home, tmp_path):
    cfg = write_cluster(tmp_path / "cluster.yaml", cluster)
    p = dtctl("init", "--accept-new-hosts", cfg, env={"DTCTL_PASSWORD": cluster.password},
              timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return cfg


def test_clean_cluster_passes(cluster, dtctl, inited):
    p = dtctl("doctor", "--cluster", inited, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "doctor: all checks passed" in p.stdout
    p = dtctl("doctor", "--cluster", inited, "--json", timeout=120)
    res = json.loads(p.stdout)
    assert res["ok"] is True
    names = [c["check"] for c in res["checks"]]
    for want in ("ssh", "clock", "os", "glibc", "driver", "cuda", "nccl", "mpi", "container",
                 "gpus", "shared", "network", "port"):
        assert want in names
    engine = [c for c in res["checks"] if c["check"] == "container"][0]
    if shutil.which("podman"):   # podman info worked as the cluster user on every node
        assert re.match(r"container engine podman [0-9.]+, \w+, GPUs by (devices|cdi)"
                        r"(, no squashfs images \(no sqfs2tar\))? on every node$",
                        engine["detail"]), engine
        assert ("no sqfs2tar" in engine["detail"]) == (not shutil.which("sqfs2tar")), engine
    else:
        assert engine["detail"] == "container engine (none) on every node", engine
    if cluster.mode == "netns":
        net = [c for c in res["checks"] if c["check"] == "network"][0]
        assert "interface eth0 reaches every node from every node" in net["detail"]
        assert "jobs use each node's interface toward the head (eth0)" in net["detail"], net
    assert not list(cluster.shared.glob(".dtctl-doctor-*")), "doctor left its probe file"


def test_version_mismatch_and_unshared_dir(cluster, dtctl, inited):
    c = cluster
    if c.mode != "netns":
        pytest.skip("needs private homes and mount namespaces (netns mode)")
    h2 = home_of(c, 2)
    fake = h2 / "fakebin"
    env_sh = h2 / ".dtctl" / "env.sh"
    c.exec(2, "mkdir -p fakebin && printf '#!/bin/sh\\necho \"mpirun (Open MPI) 9.9.9\"\\n' "
              "> fakebin/mpirun && chmod 755 fakebin/mpirun && "
              "echo 'export PATH=$HOME/fakebin:$PATH' > .dtctl/env.sh", user=True, check=True)
    r = c.exec(3, "mkdir -p /tmp/private-shared && chown %s /tmp/private-shared && "
                  "mount --bind /tmp/private-shared %s" % (c.user, c.shared))
    assert r.returncode == 0, r.stderr
    try:
        p = dtctl("doctor", "--cluster", inited, timeout=120)
        assert p.returncode == 1, p.stdout + p.stderr
        out = p.stdout
        mpi = [l for l in out.splitlines() if l.startswith("FAIL mpi")]
        assert mpi, out
        assert "'9.9.9' on dtnode2" in mpi[0] and "'4.1.4' on dtnode[1,3]" in mpi[0] or \
            "on dtnode2" in mpi[0], mpi[0]
        shared = [l for l in out.splitlines() if l.startswith("FAIL shared")]
        assert shared and "dtnode3 does not see the file dtnode1 wrote" in shared[0], out
        assert "fix:" in out
        assert "PASS ssh" in out
    finally:
        c.exec(3, "umount %s" % c.shared)
        fake_mpirun = fake / "mpirun"
        if fake_mpirun.exists():
            fake_mpirun.unlink()
        env_sh.write_text("")


def test_peer_that_cannot_reach_a_node_is_named(cluster, dtctl, inited):
    """Jobs use each node's interface toward the head (docs/run.md): doctor names the node
    whose peers cannot reach it there.  dtnode3 drops every packet to dtnode2 (a blackhole
    route in its namespace), so neither reaches the other; the head reaches both."""
    c = cluster
    if c.mode != "netns":
        pytest.skip("needs a network namespace per node (netns mode)")
    n2 = c.node(2)
    r = c.exec(3, "ip route add blackhole %s/32" % n2.addr)
    assert r.returncode == 0, r.stderr
    try:
        p = dtctl("doctor", "--cluster", inited, "--json", timeout=120)
        assert p.returncode == 1, p.stdout + p.stderr
        net = [x for x in json.loads(p.stdout)["checks"] if x["check"] == "network"][0]
        assert net["ok"] is False, net
        assert "dtnode3's interface toward the head (eth0, %s) is not reached from dtnode2" \
            % c.node(3).addr in net["detail"], net
        assert "dtnode2's interface toward the head" in net["detail"], net
        assert "dtnode1's" not in net["detail"], net
        assert "network.interface" in net["fix"], net
    finally:
        c.exec(3, "ip route del blackhole %s/32" % n2.addr)


def test_team_mode_names_nodes_whose_uids_differ(cluster, dtctl, inited):
    """mode: team (docs/team.md): every account of the head must have the same uid and gid on
    every node.  A user whose uid dtnode2 gives otherwise (its own /etc/passwd, bound over
    the shared one in that node's mount namespace) is named with that node only."""
    c = cluster
    if c.mode != "netns" or not shutil.which("useradd"):
        pytest.skip("needs a mount namespace per node (netns mode) and useradd")
    user = "dtt-doc-uid"
    subprocess.run(["userdel", user], capture_output=True)
    r = subprocess.run(["useradd", "--no-create-home", "--user-group", user],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    team = inited.parent / "team.yaml"
    team.write_text(inited.read_text() + "mode: team\n")
    try:
        p = dtctl("doctor", "--cluster", team, "--json", timeout=120)
        users = [x for x in json.loads(p.stdout)["checks"] if x["check"] == "users"]
        assert users and users[0]["ok"] is True, (users, p.stderr)
        uid = int(subprocess.check_output(["id", "-u", user]))
        r = c.exec(2, "sed 's/^%s:x:%d:/%s:x:%d:/' /etc/passwd > /tmp/passwd && "
                      "mount --bind /tmp/passwd /etc/passwd" % (user, uid, user, uid + 7))
        assert r.returncode == 0, r.stderr
        try:
            p = dtctl("doctor", "--cluster", team, "--json", timeout=120)
            assert p.returncode == 1, p.stdout + p.stderr
            users = [x for x in json.loads(p.stdout)["checks"] if x["check"] == "users"][0]
            assert users["ok"] is False, users
            assert "'%s' (uid %d gid" % (user, uid) in users["detail"], users
            assert "has other ids on dtnode2" in users["detail"], users
            assert "dtnode1" not in users["detail"] and "dtnode3" not in users["detail"], users
            assert "same uid and gid" in users["fix"], users
        finally:
            c.exec(2, "umount /etc/passwd")
    finally:
        subprocess.run(["userdel", user], capture_output=True)
