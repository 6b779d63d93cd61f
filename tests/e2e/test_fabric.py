"""The fabric test (docs/agents.md, "Fabric test") on the 4-node fake cluster: `dtctl doctor
--fabric` runs `dttrain --fabric` as a job through dtsched, one rank per node under the real
mpirun, and prints dtsched's verdict.

  - healthy nodes pass, every node and link measured; the head keeps baselines in state.db,
    so the next run shows each node's baseline;
  - --quick (connectivity and latency) passes on healthy nodes, --nodes picks the nodes;
  - one node's veth throttled on its host end with tc tbf (the kernel has no sch_netem):
    at 100 Mbit/s its transfers finish and its rx is named as far below its baseline; at
    1 Mbit/s they do not finish in time and its three links are named as cut; the other
    nodes pass, exit 1;
  - `preflight: true`: a job whose first placement has the throttled node gets it
    drained by its pre-flight gate and runs on the others; `dtctl resume --burn-in`
    re-admits the node only once the fabric step with a peer passes.

Every tc change is removed at the end of its test, whatever happened.
"""

import json
import shutil
import subprocess

import pytest

from conftest import HeadCluster
from test_run import setup_ssh

HEAD_PORT = 18271
AGENT_PORT = 18270
NODES = 4


class Ctx(HeadCluster):
    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=0, tag="fabric",
                         dead_after_ms=5000, dtctl_timeout=240)
        # veths between netns on 2 shared, loaded cores: a healthy link's bandwidth swings
        # 3x from run to run (a throttled one is 1000x down); the default is 0.5
        with open(self.home / "cluster.yaml", "a") as f:
            f.write("health: {fabric_fraction: 0.2}\n")


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    fc = fake_cluster(NODES)
    if fc.mode != "netns":
        pytest.skip("the fabric test needs veths and distinct hostnames (fake cluster mode %s)"
                    % fc.mode)
    if not shutil.which("tc"):
        pytest.skip("tc not found (Debian package iproute2)")
    tmp = tmp_path_factory.mktemp("fabric")
    ctx = Ctx(fc, dtctl_bin, tmp)
    setup_ssh(fc, ctx, tmp)
    # dtctl's own SSH to the nodes (the burn-in's doctor step), as `dtctl init` leaves it:
    # the cluster key that setup_ssh authorized, the nodes' host keys, the login user
    for f in ("id_ed25519", "id_ed25519.pub"):
        shutil.copy(tmp / f, ctx.home / f)
    shutil.copy(fc.known_hosts, ctx.home / "known_hosts")
    with open(ctx.home / "cluster.yaml", "a") as f:
        f.write("user: %s\n" % fc.user)
    with ctx.running():
        yield ctx


def doctor(c, *args):
    p = c.dtctl("doctor", "--fabric", *args)
    assert p.returncode in (0, 1), "rc %d\n%s%s" % (p.returncode, p.stdout, p.stderr)
    return p


def fabric_json(c, *args):
    p = doctor(c, "--json", *args)
    return p.returncode, json.loads(p.stdout)


def names(c):
    return [n.name for n in c.fc.nodes]


def test_healthy_nodes_pass_and_baselines_are_kept(cluster):
    c = cluster
    rc, out = fabric_json(c)
    v = out["fabric"]
    assert rc == 0 and out["ok"] is True and v["ok"] is True, out
    assert sorted(n["node"] for n in v["nodes"]) == sorted(names(c)), v
    assert len(v["links"]) == NODES * (NODES - 1) // 2, v
    for link in v["links"]:
        assert link["ok"] and link["bw_ab_MBps"] > 0 and link["bw_ba_MBps"] > 0 \
            and link["lat_us"] > 0, link
    assert v["allreduce"]["ok"] and v["allreduce"]["busbw_MBps"] > 0, v
    # the first run had nothing to compare with; the second has every node's baseline
    assert all(n["base_rx"] is None for n in v["nodes"]), v
    job = c.show(out["job"])
    assert job["state"] == "COMPLETED" and job["fabric"]["ok"] is True, job
    assert job["launcher"] == "mpi" and job["world_size"] == NODES, job

    p = doctor(c)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "fabric: every node and link passed" in p.stdout, p.stdout
    rc, out = fabric_json(c)
    assert rc == 0, out
    assert all(n["base_rx"] > 0 and n["base_tx"] > 0 for n in out["fabric"]["nodes"]), out


def test_quick_on_chosen_nodes(cluster):
    c = cluster
    two = names(c)[:2]
    rc, out = fabric_json(c, "--quick", "--nodes", ",".join(two))
    v = out["fabric"]
    assert rc == 0 and v["ok"] and v["mode"] == "quick", out
    assert sorted(n["node"] for n in v["nodes"]) == sorted(two), v
    assert len(v["links"]) == 1 and v["links"][0]["lat_us"] > 0, v
    assert v["links"][0]["bw_ab_MBps"] is None and "allreduce" not in v, v
    # bad use: --quick alone, an unknown node
    p = c.dtctl("doctor", "--quick")
    assert p.returncode == 2, p.stdout + p.stderr
    p = c.dtctl("doctor", "--fabric", "--nodes", "nosuchnode")
    assert p.returncode == 2 and "nosuchnode" in p.stderr, p.stdout + p.stderr


class Throttle:
    """tc tbf on node i's veth (its host end: what reaches the node), removed on exit."""

    def __init__(self, node, *tbf):
        self.dev, self.tbf = "dtveth%d" % node.index, tbf

    def __enter__(self):
        subprocess.run(["tc", "qdisc", "replace", "dev", self.dev, "root", "tbf"] + list(self.tbf),
                       check=True)

    def __exit__(self, *exc):
        subprocess.run(["tc", "qdisc", "del", "dev", self.dev, "root"], check=False)


def check_named(c, bad, p, rc, out, why):
    """The doctor's text (p) and JSON (rc, out) runs name node bad, and only it, with why,
    and its three links."""
    assert p.returncode == 1, p.stdout + p.stderr
    line = [x for x in p.stdout.splitlines() if x.startswith(bad.name + " ")]
    assert line and "FAIL: " + why in line[0], p.stdout
    assert "fabric: FAILED: fabric test failed: %s: %s" % (bad.name, why) in p.stdout, p.stdout
    v = out["fabric"]
    assert rc == 1 and out["ok"] is False, out
    assert v["bad_nodes"] == [bad.name], v
    assert {frozenset(x.split("<->")) for x in v["bad_links"]} == \
        {frozenset((a, bad.name)) for a in names(c) if a != bad.name}, v
    job = c.show(out["job"])
    assert job["reason"].startswith("fabric test failed: %s: %s" % (bad.name, why)), job
    return v


def test_slow_node_fails(cluster):
    """100 Mbit/s into node 3: every transfer finishes, its rx is far below the others'."""
    c = cluster
    bad = c.fc.node(3)
    with Throttle(bad, "rate", "100mbit", "burst", "256kbit", "latency", "100ms"):
        p = doctor(c)
        rc, out = fabric_json(c)
    v = check_named(c, bad, p, rc, out, "rx ")
    n = [x for x in v["nodes"] if x["node"] == bad.name][0]
    assert 0 < n["rx_MBps"] < 0.2 * n["base_rx"] and n["rx_MBps"] < 0.2 * n["median_rx"], n
    assert all(x["ok"] for x in v["links"] if bad.name not in (x["a"], x["b"])), v


def test_throttled_node_fails(cluster):
    """1 Mbit/s into node 3 (the issue's tbf): its transfers do not finish in time."""
    c = cluster
    bad = c.fc.node(3)
    with Throttle(bad, "rate", "1mbit", "burst", "32kbit", "latency", "400ms"):
        p = doctor(c)
        rc, out = fabric_json(c)
    v = check_named(c, bad, p, rc, out, "3 of its 3 links did not finish")
    assert v["allreduce"]["ok"] is False, v
    for x in v["links"]:
        if bad.name in (x["a"], x["b"]):
            assert "did not finish" in x["why"] and x["lat_us"] > 0, x

    # untouched again: it passes; the failed runs did not lower any baseline
    rc, out = fabric_json(c)
    assert rc == 0 and out["fabric"]["ok"], out


def test_preflight_job_placed_on_healthy_nodes(cluster, tmp_path):
    """`preflight: true`: a 3-node job would land on dtnode1-3; dtnode2's veth is throttled,
    so its pre-flight fabric test fails, and fails again when repeated (one slow run does
    not drain a node): dtnode2 is drained with the reason and the job runs on the three
    others after a third test passed.  Then `dtctl resume --burn-in`:
    refused while still throttled (its fabric step), passed once not."""
    c = cluster
    bad = c.fc.node(2)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: pf\nnodes: 3\npreflight: true\ncommand: [/bin/true]\n")
    # baselines of every node and link (the burn-in's 2-node fabric step has only those)
    assert doctor(c).returncode == 0
    try:
        with Throttle(bad, "rate", "100mbit", "burst", "256kbit", "latency", "100ms"):
            p = c.dtctl("run", "--detach", spec)
            assert p.returncode == 0, p.stdout + p.stderr
            job = p.stdout.strip()
            j = c.wait_job(job, ["COMPLETED", "FAILED"], timeout=180)
        assert j["state"] == "COMPLETED", j
        placed = sorted(x["node"] for x in j["placement"])
        assert placed == sorted(n for n in names(c) if n != bad.name), j
        said = [h.get("reason") or "" for h in j["history"]]
        failed = [x for x in said if x.startswith("pre-flight fabric test failed")]
        assert len(failed) == 2 and all(("%s: rx" % bad.name) in x for x in failed), said
        assert failed[0].endswith("; tested again before any node is drained"), said
        assert any(x.startswith("pre-flight fabric test passed") for x in said), said
        # the pass resets the count of gates in a row; the nodes that passed are kept
        assert j["preflight"]["rounds"] == 0 and sorted(j["preflight"]["passed"]) == placed, j
        assert j["spec"]["preflight"] is True, j
        gates = [x for x in c.jobs() if x["name"] == "preflight-" + job]
        assert len(gates) == 3 and [g["state"] for g in gates] == ["COMPLETED"] * 3, gates

        n = c.nodes()[bad.name]
        assert n["state"] == "DRAINED", n
        assert n["drain_reason"].startswith("auto: fabric test failed twice (pre-flight of %s, "
                                            "job " % job), n
        assert "rx" in n["drain_reason"], n
        p = c.dtctl("nodes")
        assert "(drained: auto: fabric test failed" in p.stdout, p.stdout

        # re-admission: the burn-in's third step is a fabric test with an UP peer; still
        # throttled it fails and the node stays drained, untouched it passes
        peer = sorted(x for x in names(c) if x != bad.name)[0]
        with Throttle(bad, "rate", "100mbit", "burst", "256kbit", "latency", "100ms"):
            p = c.dtctl("resume", "--burn-in", bad.name)
        assert p.returncode == 1, p.stdout + p.stderr
        assert "burn-in 3/3: dtctl doctor --fabric --nodes %s,%s" % (bad.name, peer) in p.stdout
        assert "burn-in of %s FAILED: the fabric test with %s failed" % (bad.name, peer) \
            in p.stdout, p.stdout
        assert c.nodes()[bad.name]["state"] == "DRAINED"
        p = c.dtctl("resume", "--burn-in", bad.name)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "doctor: all checks passed" in p.stdout, p.stdout
        assert "; the fabric test with %s passed" % peer in p.stdout, p.stdout
        assert c.nodes()[bad.name]["state"] == "UP"
    finally:
        c.dtctl("resume", bad.name)


def cut_off(c, i):
    """Blackhole routes in node i's namespace to every other node (the head, 10.88.0.1,
    stays reachable: heartbeats go on, the node stays UP); returns the undo."""
    peers = [n.addr for k, n in enumerate(c.fc.nodes, 1) if k != i]
    for a in peers:
        r = c.fc.exec(i, "ip route add blackhole %s/32" % a)
        assert r.returncode == 0, r.stderr

    def undo():
        for a in peers:
            c.fc.exec(i, "ip route del blackhole %s/32" % a)
    return undo


def test_connectivity_check_places_a_job_without_a_cut_off_node(cluster):
    """Without `preflight:`, a job on 2 nodes or more first gets the agents' connectivity
    check (docs/agents.md).  dtnode4 reaches the head but none of its peers.  dtnode1 is
    full, so a 3-node job is first placed on dtnode2-4: the check names dtnode4 (it fails
    with both peers; dtnode2-3 only with it), the job is placed again without it and
    waits; once dtnode1 is free it runs there and on dtnode2-3.  One failed check does
    not drain dtnode4."""
    c = cluster
    for name, n in c.nodes().items():
        if n["drained"]:
            c.dtctl("resume", name)
    undo = cut_off(c, 4)
    blocker = None
    try:
        p = c.dtctl("run", "--detach", "-n", "1", "-p", "2", "--nodes", "dtnode1",
                    "--name", "blocker", "--", "sleep", "600")
        assert p.returncode == 0, p.stderr
        blocker = p.stdout.strip()
        c.wait_job(blocker, ("RUNNING",))
        p = c.dtctl("run", "--detach", "-n", "3", "-p", "1", "--name", "conn", "--",
                    "/bin/true")
        assert p.returncode == 0, p.stderr
        job = p.stdout.strip()
        import time
        deadline = time.time() + 30
        while True:
            j = c.show(job)
            hist = " | ".join(h.get("reason") or "" for h in j.get("history", []))
            if "connectivity check failed" in hist:
                break
            assert time.time() < deadline and j["state"] == "PENDING", (j["state"], hist)
            time.sleep(0.2)
        assert "placed again without dtnode4" in hist, hist
        assert "dtnode4 -> dtnode" in hist, hist
        assert j["state"] == "PENDING" and "dtnode4" in j["avoid"], j
        assert not c.nodes()["dtnode4"]["drained"], "one failed check drained the node"
        c.dtctl("cancel", blocker)
        j = c.wait_job(job, ("COMPLETED", "FAILED"), timeout=60)
        assert j["state"] == "COMPLETED", j
        assert sorted(p["node"] for p in j["placement"]) == ["dtnode1", "dtnode2", "dtnode3"], j
    finally:
        undo()
        if blocker:
            c.dtctl("cancel", blocker)


def test_connectivity_check_drains_a_node_that_fails_it_twice(cluster):
    """A 3-node job that can only run on dtnode2-4 (`--nodes`) while dtnode4 is cut off:
    its first check makes dtnode4 a suspect, the second (nowhere else to go) drains it
    with the reason; `preflight: false` would have skipped the check."""
    c = cluster
    undo = cut_off(c, 4)
    try:
        p = c.dtctl("run", "--detach", "-n", "3", "-p", "1", "--nodes", "dtnode[2-4]",
                    "--name", "conn2", "--", "/bin/true")
        assert p.returncode == 0, p.stderr
        job = p.stdout.strip()
        import time
        deadline = time.time() + 40
        while not c.nodes()["dtnode4"]["drained"]:
            assert time.time() < deadline, c.show(job)
            time.sleep(0.3)
        why = c.nodes()["dtnode4"]["drain_reason"]
        assert why.startswith("auto: connectivity check failed twice"), why
        assert "dtnode4 -> dtnode2" in why or "dtnode2 -> dtnode4" in why, why
        assert not c.nodes()["dtnode2"]["drained"] and not c.nodes()["dtnode3"]["drained"]
        c.dtctl("cancel", job)
    finally:
        undo()
        c.dtctl("resume", "dtnode4")
