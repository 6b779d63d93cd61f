"""Quarantine (docs/agents.md, "Node health"): a node where jobs keep dying in ways that
point at the node is drained by dtsched, and re-admitted after a burn-in.  On a one-node
`host: local` cluster (no fake cluster):

  - three jobs that exit 1 (the user's bug) leave the node UP: exit codes never count;
  - three jobs killed by SIGSEGV drain it with the reason
    `auto: 3 failures in 1h (j-.. rank 0 exit 139, ...)`; the failures are kept in
    state.db, so two before a dtsched restart and one after are still three;
  - `dtctl resume` forgets them: the next crash does not drain it again at once.
"""

import re

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

    # resumed: forgiven, one more crash does not drain it again
    assert c.dtctl("resume", "local").returncode == 0
    run(c, "kill -SEGV $$", 139)
    n = node(c)
    assert n["state"] == "UP" and n["drain_reason"] is None, n
