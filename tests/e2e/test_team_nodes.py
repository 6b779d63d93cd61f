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
from dtapi import DtApi, read_secret
from test_team import ALICE, BOB, as_user, proc_ids, users  # noqa: F401 (users: a fixture)

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


def _tasks_of(team, i, job):
    """The tasks of job on node i, as its agent (root's, the secret) lists them."""
    api = DtApi(team.fc.node(i).addr, team.port(i), read_secret(str(team.home)))
    st, body = api.request("GET", "/v1/tasks")
    assert st == 200, body
    return [t for t in body["tasks"] if t.get("job_id") == job]


def _environ(pid):
    return dict(e.split("=", 1) for e in
                Path("/proc/%d/environ" % pid).read_bytes().decode().split("\0") if "=" in e)


def test_mpi_job_runs_as_its_user_and_its_capability_starts_nothing_else(team):
    """A 2-node mpi job of alice: mpirun, the orted on the other node and both ranks run as
    alice; what her ranks hold (the job's orted capability, never the secret) starts her
    job's orted as her, and nothing as bob, as root, or another task (docs/team.md)."""
    import pwd
    alice, bob = pwd.getpwnam(ALICE), pwd.getpwnam(BOB)
    p = as_user(team, ALICE, "run", "-d", "--json", "-n", "2", "-p", "1", "-w", "/tmp",
                "--launcher", "mpi", "--name", "alice-mpi", "--", "sleep", "60")
    assert p.returncode == 0, (p.stdout, p.stderr)
    doc = json.loads(p.stdout)
    job = doc["job"]["id"] if "job" in doc else doc["id"]
    try:
        deadline = time.monotonic() + 30
        while True:
            tasks = [_tasks_of(team, i, job) for i in (1, 2)]
            j = team.show(job)
            if j["state"] == "RUNNING" and all(t and t[0].get("pid") for t in tasks):
                break
            assert j["state"] in ("PENDING", "RUNNING") and time.monotonic() < deadline, \
                (j.get("reason"), _logs(team, job), tasks)
            time.sleep(0.2)
        mpirun, orted = tasks[0][0], tasks[1][0]
        assert mpirun["id"].endswith(".mpirun") and ".orted-" in orted["id"], tasks
        for t in (mpirun, orted):
            assert proc_ids(t["pid"])[:2] == (alice.pw_uid, alice.pw_gid), t
        # the ranks: in mpirun's and the orted's trees, as alice
        ranks = []
        deadline = time.monotonic() + 30
        while len(ranks) < 2:
            ranks = [int(d) for d in os.listdir("/proc") if d.isdigit() and
                     _cmdline(int(d))[:1] == ["sleep"] and
                     {mpirun["pid"], orted["pid"]} & {p for p, _, _ in _chain(int(d))}]
            assert time.monotonic() < deadline, ranks
            time.sleep(0.2)
        for pid in ranks:
            assert proc_ids(pid)[:2] == (alice.pw_uid, alice.pw_gid), (pid, _chain(pid))
        env = _environ(mpirun["pid"])
        cap, key = env["DT_ORTED_CAP"], bytes.fromhex(env["DT_ORTED_KEY"])
        assert cap == "%s %s %d %d" % (job, ALICE, alice.pw_uid, alice.pw_gid), cap
        secret = read_secret(str(team.home))
        assert secret not in "\n".join(env.values()), "the secret reached mpirun"

        node = team.fc.node(2)
        api = DtApi(node.addr, team.port(2), "00")

        def ask(method, path, obj, capability, k=key):
            body = b"" if obj is None else json.dumps(obj).encode()
            h = api.signed_headers(method, path, body, key=k)
            h["X-DT-Cap"] = capability
            st, text, _ = api.raw(method, path, body, h)
            return st, text

        orted_id = "%s.9.orted-probe" % job
        # as bob: the key is not bob's capability
        st, text = ask("POST", "/v1/tasks", {"id": orted_id, "argv": ["sleep 30"], "shell": True},
                       "%s %s %d %d" % (job, BOB, bob.pw_uid, bob.pw_gid))
        assert st == 401, (st, text)
        # as root: no capability names uid 0, and run_as is not the caller's to set
        st, text = ask("POST", "/v1/tasks", {"id": orted_id, "argv": ["sleep 30"], "shell": True},
                       "%s root 0 0" % job)
        assert st == 401 and "malformed X-DT-Cap" in text, (st, text)
        st, text = ask("POST", "/v1/tasks", {"id": orted_id, "argv": ["sleep 30"], "shell": True,
                                             "run_as": {"user": "root", "uid": 0, "gid": 0}}, cap)
        assert st == 403 and "may not set 'run_as'" in text, (st, text)
        # another task than its job's orted, another job's, or the task list
        for tid in ("%s.0.r9" % job, "j-999999.0.orted-x"):
            st, text = ask("POST", "/v1/tasks", {"id": tid, "argv": ["sleep 30"], "shell": True},
                           cap)
            assert st == 403 and "starts only that job's orted" in text, (tid, st, text)
        st, text = ask("GET", "/v1/tasks", None, cap)
        assert st == 403, (st, text)
        # what it may: its job's orted, as alice (so the refusals above are not a bad key)
        log = str(team.fc.shared / "jobs" / job / "logs" / "orted-probe.log")
        st, text = ask("POST", "/v1/tasks", {"id": orted_id, "argv": ["sleep 30"], "shell": True},
                       cap)
        assert st == 403 and "needs its 'log'" in text, (st, text)
        st, text = ask("POST", "/v1/tasks", {"id": orted_id, "argv": ["sleep 30"], "shell": True,
                                             "log": log}, cap)
        assert st == 201, (st, text)
        try:
            deadline = time.monotonic() + 10
            while True:
                st, text = ask("GET", "/v1/tasks/" + orted_id, None, cap)
                assert st == 200, (st, text)
                pid = json.loads(text)["task"].get("pid")
                if pid:
                    break
                assert time.monotonic() < deadline, text
                time.sleep(0.1)
            assert proc_ids(pid)[:2] == (alice.pw_uid, alice.pw_gid), pid
            # and it cannot see a task that is not its job's orted
            st, text = ask("GET", "/v1/tasks/" + mpirun["id"], None, cap)
            assert st == 403 or st == 404, (st, text)
        finally:
            ask("DELETE", "/v1/tasks/" + orted_id, {"grace_ms": 0}, cap)
    finally:
        team.dtctl("cancel", job)


def _logs(team, job):
    d = team.fc.shared / "jobs" / job / "logs"
    return {f.name: f.read_text()[-2000:] for f in sorted(d.iterdir())} if d.is_dir() else {}


def _chain(pid):
    out = []
    while pid > 1:
        try:
            text = Path("/proc/%d/status" % pid).read_text()
        except OSError:
            break
        st = dict(l.split(":", 1) for l in text.splitlines() if ":" in l)
        out.append((pid, st["Uid"].split()[0], " ".join(_cmdline(pid))[:80]))
        pid = int(st["PPid"])
    return out


def _cmdline(pid):
    try:
        return Path("/proc/%d/cmdline" % pid).read_bytes().decode().split("\0")
    except OSError:
        return []
