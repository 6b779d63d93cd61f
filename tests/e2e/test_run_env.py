"""Where ranks start, what environment they get, and how `dtctl show` reports their end,
on a 2-node fake cluster, for both launchers.

The agents are started over real ssh, as `dtctl init` starts them, so their own
environment holds that login session's SSH_CLIENT/SSH_CONNECTION: none of it may reach a
rank.  cluster.yaml has a setup.env and every node an env.sh in the agent's home (what
the setup template writes): both must reach every rank.  Ranks start in the directory
`dtctl run` ran in when it exists on their node (a project dir on the shared dir, where a
relative script must work), else in the agent's home with a one-line note; -w wins.
After a cancel and after fail-fast, `show` gives every rank (every MPI rank too, not only
mpirun) a final state and exit code, or "killed by dtctl".
"""

import json
import os
import re
import time
import uuid
from pathlib import Path

import pytest

from conftest import HeadCluster

HEAD_PORT = 17871
AGENT_PORT = 17870
PY = "/usr/bin/python3"
FINAL = {"exited", "failed", "killed", "lost"}

PROBE = """import json, os
print("CWD=" + os.getcwd())
print("ENV=" + json.dumps(dict(os.environ), sort_keys=True))
"""


class Ctx(HeadCluster):
    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=0, tag="runenv",
                         dead_after_ms=3000)
        cy = self.home / "cluster.yaml"
        cy.write_text(cy.read_text() + "setup: {env: {DT_TEST_SETUP: 'from setup.env', "
                      "NCCL_SOCKET_IFNAME: lo}}\n")

    def start_agent_over_ssh(self, i):
        """As `dtctl init` does: a login session on the node starts the daemon."""
        n = self.fc.node(i)
        p = self.fc.ssh(i, [str(self.bin / "dtagent"), "--home", self.agent_home(i), "--daemon",
                            "--name", n.name, "--bind", n.addr, "--port", str(self.port(i)),
                            "--heartbeat-ms", "300",
                            "--head", "%s:%d" % (self.fc.host_addr, self.head_port)])
        assert p.returncode == 0, "agent on %s: %s" % (n.name, p.stderr)

    def wait_job(self, job, pred, timeout=30):
        deadline = time.time() + timeout
        while True:
            j = self.show(job)
            if pred(j):
                return j
            if time.time() > deadline:
                raise AssertionError("job %s: condition not met after %ss: %s" % (job, timeout, j))
            time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    fc = fake_cluster(2)
    tmp = tmp_path_factory.mktemp("runenv")
    ctx = Ctx(fc, dtctl_bin, tmp)
    home = ctx.home
    try:
        assert ctx.dtctl("head", "start").returncode == 0
        for i in range(1, fc.n + 1):
            # and the env.sh the setup template writes into the agent's home
            ctx.give_secret(i, "printf 'export DT_TEST_ENVSH=\"sourced on $(hostname)\"\\n' "
                            "> %s/env.sh" % ctx.agent_home(i))
        for i in range(1, fc.n + 1):
            ctx.start_agent_over_ssh(i)
        ctx.wait_nodes_up()
        yield ctx
        ctx.shutdown()
    finally:
        __import__("conftest").stop_home_daemons(home)


def need_mpi(cluster, launcher):
    if launcher == "mpi" and cluster.fc.mode != "netns":
        pytest.skip("mpirun across nodes needs distinct hostnames (fake cluster mode %s)"
                    % cluster.fc.mode)


def project_dir(cluster):
    """A project dir on the shared dir, readable by the cluster user, with the probe."""
    d = Path(cluster.fc.shared) / ("proj-" + uuid.uuid4().hex[:8])
    d.mkdir()
    (d / "probe.py").write_text(PROBE)
    os.chmod(d, 0o755)
    return d


def agent_environ(cluster, i):
    """The environment of node i's agent (no pid namespace: /proc shows every node)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path("/proc/%s/cmdline" % pid).read_bytes().split(b"\0")
            if argv[0].endswith(b"dtagent") and cluster.agent_home(i).encode() in argv:
                return Path("/proc/%s/environ" % pid).read_bytes().replace(b"\0", b"\n").decode()
        except OSError:
            continue
    raise AssertionError("no dtagent of %s running" % cluster.agent_home(i))


def rank_lines(out, key):
    """{rank: value} of the '[node rank] KEY=value' lines of an attached run."""
    return {int(m.group(1)): m.group(2)
            for m in re.finditer(r"^\[\S+ (\d+)\] %s=(.*)$" % key, out, re.M)}


# ------------------------------------------------------------------- where ranks start

@pytest.mark.parametrize("launcher", ["agent", "mpi"])
def test_ranks_start_in_submit_dir_relative_script(cluster, launcher):
    need_mpi(cluster, launcher)
    d = project_dir(cluster)
    p = cluster.dtctl("run", "-n", 2, "-p", 1, "--launcher", launcher, "--", PY, "probe.py",
                      cwd=str(d), timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    cwds = rank_lines(p.stdout, "CWD")
    assert cwds == {0: str(d), 1: str(d)}, p.stdout + p.stderr
    assert "does not exist on" not in p.stdout + p.stderr


@pytest.mark.parametrize("launcher", ["agent", "mpi"])
def test_setup_env_and_env_sh_reach_ranks_no_ssh_leftovers(cluster, launcher):
    need_mpi(cluster, launcher)
    # the agents' own environment has the login session's variables (the premise)
    assert "SSH_CONNECTION=" in agent_environ(cluster, 1)
    d = project_dir(cluster)
    p = cluster.dtctl("run", "-n", 2, "-p", 1, "--launcher", launcher, "-e", "NCCL_DEBUG=WARN",
                      "-w", str(d), "--", PY, str(d / "probe.py"), timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    envs = {r: json.loads(v) for r, v in rank_lines(p.stdout, "ENV").items()}
    assert sorted(envs) == [0, 1], p.stdout + p.stderr
    for r, e in envs.items():
        assert e.get("DT_TEST_SETUP") == "from setup.env", (r, e)
        assert e.get("NCCL_SOCKET_IFNAME") == "lo", (r, e)
        assert e.get("DT_TEST_ENVSH", "").startswith("sourced on "), (r, e)
        assert e.get("NCCL_DEBUG") == "WARN", (r, e)
        left = [k for k in e if k.startswith("SSH_") or k in ("MOTD_SHOWN", "OLDPWD", "SHLVL")
                or k.startswith("XDG_SESSION_")]
        assert not left, (r, left)
        assert e.get("PWD") == str(d), (r, e.get("PWD"))
    if cluster.fc.hostnames_distinct:   # the env.sh of each rank's own node
        assert len(set(e["DT_TEST_ENVSH"] for e in envs.values())) == 2, envs


def test_submit_dir_missing_on_nodes_starts_in_home_with_note(cluster, tmp_path):
    # tmp_path is under the host's /tmp: the fake nodes have their own /tmp
    (tmp_path / "probe.py").write_text(PROBE)
    p = cluster.dtctl("run", "-n", 2, "-p", 1, "--", PY, "-c", PROBE, cwd=str(tmp_path),
                      timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    cwds = rank_lines(p.stdout, "CWD")
    assert sorted(cwds) == [0, 1] and all(c != str(tmp_path) for c in cwds.values()), p.stdout
    homes = {cluster.fc.exec(i, "echo $HOME", user=True).stdout.strip() for i in (1, 2)}
    assert set(cwds.values()) <= homes, (cwds, homes)
    notes = [l for l in p.stdout.splitlines()
             if "the submit directory '%s' does not exist on" % tmp_path in l]
    assert len(notes) == 2, p.stdout     # one per node, one line each


@pytest.mark.parametrize("launcher", ["agent", "mpi"])
def test_workdir_overrides_submit_dir(cluster, launcher):
    need_mpi(cluster, launcher)
    d, w = project_dir(cluster), project_dir(cluster)
    p = cluster.dtctl("run", "-n", 2, "-p", 1, "--launcher", launcher, "-w", str(w), "--",
                      PY, "probe.py", cwd=str(d), timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert rank_lines(p.stdout, "CWD") == {0: str(w), 1: str(w)}, p.stdout


# ----------------------------------------------------------------- show: how ranks ended

def started(cluster, job, launcher, world):
    """RUNNING with every rank's process up (mpi: every rank has written its log line)."""
    def ok(j):
        if j["state"] != "RUNNING":
            return False
        if launcher == "mpi":
            logs = Path(j["job_dir"]) / "logs"
            return all((logs / ("%d.log" % r)).exists() and (logs / ("%d.log" % r)).stat().st_size
                       for r in range(world))
        return len(j["ranks"]) == world and all(r["state"] == "running" for r in j["ranks"])
    return cluster.wait_job(job, ok, timeout=60)


def by_rank(j):
    return {r["rank"]: r for r in j["ranks"] if r["rank"] >= 0}


@pytest.mark.parametrize("launcher", ["agent", "mpi"])
def test_show_after_cancel_every_rank_killed_by_dtctl(cluster, launcher):
    need_mpi(cluster, launcher)
    p = cluster.dtctl("run", "--detach", "-n", 2, "-p", 2, "--launcher", launcher, "--",
                      "sh", "-c", "echo up; exec sleep 120")
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    started(cluster, job, launcher, 4)
    assert cluster.dtctl("cancel", job).returncode == 0
    j = cluster.wait_job(job, lambda j: j["state"] == "CANCELLED")
    ranks = by_rank(j)
    assert sorted(ranks) == [0, 1, 2, 3], j["ranks"]
    for r in j["ranks"]:
        assert r["state"] == "killed" and r["reason"] == "killed by dtctl", r
    time.sleep(1.5)   # later heartbeats change nothing
    assert [r["state"] for r in cluster.show(job)["ranks"]] == [r["state"] for r in j["ranks"]]
    text = cluster.dtctl("show", job).stdout
    assert text.count("killed by dtctl") == len(j["ranks"]), text
    assert not re.search(r"^\s+\d+ \S+\s+running", text, re.M), text


@pytest.mark.parametrize("launcher", ["agent", "mpi"])
def test_show_after_fail_fast_final_state_per_rank(cluster, launcher):
    need_mpi(cluster, launcher)
    var = "OMPI_COMM_WORLD_RANK" if launcher == "mpi" else "RANK"
    p = cluster.dtctl("run", "--detach", "-n", 2, "-p", 2, "--launcher", launcher, "--",
                      "sh", "-c", "echo up; if [ \"$%s\" = 3 ]; then sleep 1; exit 7; fi; "
                      "exec sleep 120" % var)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    j = cluster.wait_job(job, lambda j: j["state"] == "FAILED", timeout=60)
    ranks = by_rank(j)
    assert sorted(ranks) == [0, 1, 2, 3], j["ranks"]
    assert ranks[3]["state"] == "exited" and ranks[3]["exit_code"] == 7, ranks[3]
    for r in (0, 1, 2):
        assert ranks[r]["state"] == "killed" and ranks[r]["reason"] == "killed by dtctl", ranks[r]
    for r in j["ranks"]:
        assert r["state"] in FINAL, r
    text = cluster.dtctl("show", job).stdout
    assert re.search(r"^\s+3 \S+\s+exited\s+7 ", text, re.M), text
    assert text.count("killed by dtctl") >= 3, text
