"""Team mode on the fake cluster (issue 30, docs/team.md): dtsched on the head and an agent
on every node, all as root; a user's 2-node job runs as that user's uid, gid and groups on
both nodes (read from /proc: the fake nodes share the host's pid space and /etc/passwd)."""
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from conftest import HeadCluster
from test_team import ALICE, as_user, proc_ids, users  # noqa: F401 (users: a fixture)

HEAD_PORT, AGENT_PORT = 17371, 17370


class TeamHead(HeadCluster):
    """HeadCluster with `mode: team`: agents as root, users' dtctl on the local socket."""

    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=0, tag="team",
                         dead_after_ms=3000)
        self.exe = self.bin / "dtctl"
        self.pub = Path(tempfile.mkdtemp(prefix="dtt-teamn-", dir="/var/tmp"))
        os.chmod(self.pub, 0o755)
        self.sock = self.pub / "run" / "dtsched.sock"
        conf = (self.home / "cluster.yaml").read_text().replace(
            "head: {address:", "head: {socket: %s, address:" % self.sock)
        conf += "mode: team\n"
        (self.home / "cluster.yaml").write_text(conf)
        self.public = self.pub / "cluster.yaml"
        self.public.write_text(conf)
        os.chmod(self.public, 0o644)

    def give_secret(self, i, extra=""):
        """The agent's home as root's, 0700, with the secret 0600 (no job can read it)."""
        secret = (self.home / "secret").read_text().strip()
        h = self.agent_home(i)
        p = self.fc.exec(i, "rm -rf %s && mkdir -m 700 %s && umask 077 && "
                            "printf '%%s\\n' %s > %s/secret" % (h, h, secret, h))
        assert p.returncode == 0, p.stderr

    def start_agent(self, i):
        n = self.fc.node(i)
        p = self.fc.exec(i, [str(self.bin / "dtagent"), "--home", self.agent_home(i), "--daemon",
                             "--name", n.name, "--bind", n.addr, "--port", str(self.port(i)),
                             "--gpus", "0", "--heartbeat-ms", "300",
                             "--head", "%s:%d" % (self.fc.host_addr, self.head_port)])
        assert p.returncode == 0, "agent on %s: %s" % (n.name, p.stderr)

    def stop_agent(self, i):
        self.fc.exec(i, [str(self.bin / "dtagent"), "--home", self.agent_home(i), "--stop"])


@pytest.fixture(scope="module")
def team(users, fake_cluster, dtctl_bin, tmp_path_factory):  # noqa: F811
    fc = fake_cluster(2)
    if fc.mode != "netns":
        pytest.skip("needs root and a namespace per node (netns mode)")
    c = TeamHead(fc, dtctl_bin, tmp_path_factory.mktemp("teamn"))
    try:
        with c.running():
            yield c
    finally:
        shutil.rmtree(c.pub, ignore_errors=True)


def test_ranks_on_every_node_run_as_their_user(team):
    import pwd
    import grp
    p = as_user(team, ALICE, "run", "-d", "--json", "-n", "2", "-p", "1", "-w", "/tmp",
                "--name", "alice-2n", "--", "sleep", "60")
    assert p.returncode == 0, (p.stdout, p.stderr)
    doc = json.loads(p.stdout)
    job = doc["job"]["id"] if "job" in doc else doc["id"]
    try:
        deadline = time.monotonic() + 30
        while True:
            j = team.show(job)
            ranks = j.get("ranks") or []
            if j["state"] == "RUNNING" and len(ranks) == 2 and all(r.get("pid") for r in ranks):
                break
            assert j["state"] in ("PENDING", "RUNNING") and time.monotonic() < deadline, j
            time.sleep(0.2)
        assert {r["node"] for r in ranks} == {n.name for n in team.fc.nodes}, ranks
        pw = pwd.getpwnam(ALICE)
        groups = sorted(set([pw.pw_gid] + [g.gr_gid for g in grp.getgrall()
                                           if ALICE in g.gr_mem]))
        for r in ranks:
            assert proc_ids(r["pid"]) == (pw.pw_uid, pw.pw_gid, groups, "1"), (r, proc_ids(r["pid"]))
        log = team.fc.shared / "jobs" / job / "logs" / "1.log"
        assert log.stat().st_uid == pw.pw_uid, log.stat()
    finally:
        team.dtctl("cancel", job)
