"""Quarantine (docs/agents.md, "Node health"): a node where jobs keep dying in ways that
point at the node is drained by dtsched, and re-admitted after a burn-in.  On a one-node
`host: local` cluster (no fake cluster):

  - three jobs that exit 1 (the user's bug) leave the node UP: exit codes never count;
  - three jobs killed by SIGSEGV drain it with the reason
    `auto: 3 failures in 1h (j-.. rank 0 exit 139, ...)`; the failures are kept in
    state.db, so two before a dtsched restart and one after are still three;
  - `dtctl resume --burn-in` runs the doctor on it, then dttrain as a one-node job on the
    drained node, and resumes it when both pass; that forgets the failures, so the next
    crash does not drain it again at once;
  - no burn-in on a DOWN node: refused with what to do, the node stays drained.
"""

import json
import re
import time

import pytest

from conftest import LocalCluster


@pytest.fixture
def cluster(dtctl_bin, tmp_path):
    with LocalCluster(dtctl_bin / "dtctl", tmp_path) as c:
        yield c


def node(c):
    return c.node_json()


def run(c, script, want_rc):
    p = c.dtctl("run", "--shell", "--", script, timeout=60)
    assert p.returncode == want_rc, "%r: rc %d\n%s%s" % (script, p.returncode, p.stdout, p.stderr)


def test_repeated_crashes_drain_node(cluster):
    c = cluster
    for _ in range(3):
        run(c, "exit 1", 1)
    n = node(c)
    assert n["state"] == "UP" and n["drain_reason"] is None, \
        "exit codes are the user's and must not drain a node: %s" % n

    run(c, "kill -SEGV $$", 139)
    run(c, "kill -SEGV $$", 139)
    assert node(c)["state"] == "UP"
    # the failures are in state.db: a restarted dtsched still counts them
    assert c.dtctl("head", "stop").returncode == 0
    assert c.dtctl("head", "start").returncode == 0
    c.wait_up()
    run(c, "kill -SEGV $$", 139)
    n = node(c)
    assert n["state"] == "DRAINED", n
    assert re.fullmatch(r"auto: 3 failures in 1h \(j-\d+ rank 0 exit 139, j-\d+ rank 0 exit 139, "
                        r"j-\d+ rank 0 exit 139\)", n["drain_reason"]), n["drain_reason"]
    p = c.dtctl("nodes")
    assert "(drained: auto: 3 failures in 1h" in p.stdout, p.stdout

    # re-admitted after a burn-in: the doctor, then dttrain on the drained node
    p = c.dtctl("resume", "--burn-in", "local", timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "burn-in 1/2: dtctl doctor --nodes local" in p.stdout, p.stdout
    assert "doctor: all checks passed" in p.stdout, p.stdout
    m = re.search(r"burn-in 2/2: job (j-\d+): dttrain --model=mlp --steps=20 .*on its CPU",
                  p.stdout)
    assert m, p.stdout
    assert "burn-in of local passed" in p.stdout and "local: resumed (state UP)" in p.stdout, \
        p.stdout
    job = json.loads(c.dtctl("show", "--json", m.group(1)).stdout)["job"]
    assert job["state"] == "COMPLETED" and job["spec"]["burn_in"] is True, job

    # resumed: forgiven, one more crash does not drain it again
    run(c, "kill -SEGV $$", 139)
    n = node(c)
    assert n["state"] == "UP" and n["drain_reason"] is None, n


def test_burn_in_refused_on_a_down_node(cluster):
    c = cluster
    assert c.dtctl("drain", "local").returncode == 0
    assert c.dtctl("agents", "stop").returncode == 0
    deadline = time.monotonic() + 15
    while node(c)["state"] != "DOWN" and time.monotonic() < deadline:
        time.sleep(0.2)
    p = c.dtctl("resume", "--burn-in", "local")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "node 'local' is DOWN: no burn-in can run there" in p.stderr, p.stderr
    assert node(c)["drain_reason"] == "by dtctl drain"
