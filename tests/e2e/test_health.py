"""Node health (agent/health.h, docs/agents.md "Node health") on a one-node `host: local`
cluster with two fake GPUs, whose faults are injected through the file the test names in
cluster.yaml (`agent: {fake_health: FILE}`, test only):

  - a hot, thermally throttled GPU makes the node "degraded" (shown, still used);
  - an XID 79 (GPU fallen off the bus) makes it "bad": dtsched drains it with the reason
    (`dtctl nodes`: `bad: XID 79 ... (drained: auto: XID 79 ...)`), no GPU job is placed;
  - /metrics of dtsched and of the agent count it;
  - the XID stays after the file is gone (it happened), the drain survives a dtsched
    restart, and goes only with `dtctl resume` once the agent (a GPU reset) restarted;
  - a rank that writes <agent home>/fake-health.json (where the agent used to read fake
    faults) changes nothing (issue 26, B3).
"""

import json
import time
import urllib.request

import pytest

from conftest import LocalCluster


@pytest.fixture
def cluster(dtctl_bin, tmp_path):
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path)
    y = c.home / "cluster.yaml"
    c.fake = tmp_path / "faults.json"
    y.write_text(y.read_text().replace("gpus: 0", "gpus: 2").replace(
        "dead_after: 5s}", "dead_after: 5s, fake_health: %s}" % c.fake))
    with c:
        yield c


def node(c):
    return c.node_json()


def wait_for(c, pred, what, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = node(c)
        if pred(n):
            return n
        time.sleep(0.2)
    pytest.fail("node never %s: %s\nagent.log:\n%s" % (what, node(c), c.log("agent.log")))


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.read().decode()


def ports(c):
    y = (c.home / "cluster.yaml").read_text()
    agent = int(y.split("agent: {port: ")[1].split(",")[0])
    head = int(y.split("head: {port: ")[1].split("}")[0])
    return agent, head


def test_faults_degrade_then_drain_until_resumed(cluster):
    c = cluster
    n = wait_for(c, lambda n: n["health"] == "ok", "ok")
    assert n["gpus_total"] == 2 and n["drain_reason"] is None
    fake = c.fake

    # a hot, throttled GPU: degraded, shown, still UP
    fake.write_text(json.dumps({"gpus": {"1": {"temperature": 95, "throttle": ["hw_thermal"]}}}))
    n = wait_for(c, lambda n: n["health"] == "degraded", "degraded")
    assert n["state"] == "UP" and "GPU 1" in n["health_reason"], n
    p = c.dtctl("nodes")
    assert "degraded: GPU 1" in p.stdout, p.stdout

    # XID 79: bad, drained with the reason, no GPU job placed there
    fake.write_text(json.dumps({"gpus": {"1": {"xid": [79, 13]}}}))
    n = wait_for(c, lambda n: n["state"] == "DRAINED", "drained")
    assert n["health"] == "bad", n
    assert n["health_reason"] == "XID 79 on GPU 1: GPU has fallen off the bus", n
    assert n["drain_reason"].startswith("auto: XID 79 on GPU 1"), n
    p = c.dtctl("nodes")
    line = [l for l in p.stdout.splitlines() if l.startswith("local ")][0]
    assert "DRAINED" in line and "bad: XID 79" in line and "(drained: auto: XID 79" in line, line
    assert "XID 13" not in json.dumps(n), "an application's XID is not the node's fault"
    p = c.dtctl("run", "-g", "1", "--detach", "--", "true")
    if p.returncode == 0:
        job = p.stdout.strip()
        time.sleep(1)
        j = json.loads(c.dtctl("show", "--json", job).stdout)["job"]
        assert j["state"] == "PENDING", j
        c.dtctl("cancel", job)
    agent_port, head_port = ports(c)
    assert 'dtsched_nodes_health{health="bad"} 1' in metrics(head_port)
    assert 'dtagent_health_events{node="local",kind="xid",severity="bad"} 1' in \
        metrics(agent_port)

    # the XID happened: it stays when the file is gone; the drain survives dtsched
    fake.unlink()
    time.sleep(1.5)
    assert node(c)["health"] == "bad"
    assert c.dtctl("head", "stop").returncode == 0
    assert c.dtctl("head", "start").returncode == 0
    n = wait_for(c, lambda n: n["last_heartbeat"] is not None and n["state"] != "DOWN", "back")
    assert n["state"] == "DRAINED" and n["drain_reason"].startswith("auto: XID 79"), n

    # a GPU reset restarts the agent: health ok, still drained until resumed
    assert c.dtctl("agents", "restart").returncode == 0
    n = wait_for(c, lambda n: n["health"] == "ok", "ok after the agent restarted")
    assert n["state"] == "DRAINED", n
    p = c.dtctl("resume", "local")
    assert p.returncode == 0, p.stderr
    n = node(c)
    assert n["state"] == "UP" and n["drain_reason"] is None, n

    # each finding once in the event stream (docs/events.md), across the restart too
    p = c.dtctl("events", "--json")
    assert p.returncode == 0, p.stderr
    evs = [json.loads(l) for l in p.stdout.splitlines()]
    seen = [e for e in evs if e["kind"] in ("node.health", "node.drained", "node.resumed")]
    assert [(e["kind"], e.get("health")) for e in seen] == [
        ("node.health", "degraded"), ("node.health", "bad"), ("node.drained", None),
        ("node.health", "ok"), ("node.resumed", None)], seen
    assert "GPU 1" in seen[0]["reason"], seen
    assert seen[1]["reason"] == "XID 79 on GPU 1: GPU has fallen off the bus", seen
    assert seen[2]["reason"].startswith("auto: XID 79 on GPU 1"), seen


def test_fake_health_written_by_a_rank_is_ignored(cluster):
    """A job of the cluster user writes an XID 79 where the agent used to read fake GPU
    faults (<agent home>/fake-health.json): nothing happens.  Then the test's own fault
    file (the operator's setting) makes a GPU hot: the node turns degraded, so the agent
    has read its faults since the rank wrote, and it is still not bad nor drained."""
    c = cluster
    wait_for(c, lambda n: n["health"] == "ok", "ok")
    planted = c.home / "fake-health.json"
    p = c.dtctl("run", "--", "python3", "-c",
                "import json, sys; open(sys.argv[1], 'w').write(json.dumps("
                "{'gpus': {'0': {'xid': [79]}, '1': {'xid': [79]}}}))", planted)
    assert p.returncode == 0, p.stdout + p.stderr
    assert planted.exists()
    c.fake.write_text(json.dumps({"gpus": {"1": {"temperature": 95}}}))
    n = wait_for(c, lambda n: n["health"] == "degraded", "degraded")
    assert n["state"] == "UP" and n["drain_reason"] is None, n
    assert "XID" not in json.dumps(n), n
