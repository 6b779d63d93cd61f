"""A real Slurm (Debian's 22.05) on the fake cluster: the fixture itself (tests/cluster/
fakeslurm through conftest's slurm_cluster), then dtctl's pieces that run under Slurm.
See docs/slurm.md."""

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import FAKESLURM, free_ports
from dtapi import DtApi
from test_head_trust import other_user  # noqa: F401 (a fixture: a second Unix user)


@pytest.fixture(scope="module")
def slurm(slurm_cluster):
    return slurm_cluster(2)


def test_srun_runs_on_both_nodes_with_gres_gpus(slurm):
    p = slurm.run(["srun", "-N", "2", "hostname"], user=True)
    assert p.returncode == 0, "srun -N 2 hostname: %s%s\n%s" % (p.stdout, p.stderr,
                                                              slurm.log("slurmctld.log"))
    assert sorted(p.stdout.split()) == ["dtnode1", "dtnode2"], p.stdout
    p = slurm.run(["srun", "-N", "2", "--ntasks-per-node=1", "--gres=gpu:2", "/bin/sh", "-c",
                   'echo "$(hostname) $(id -un) $CUDA_VISIBLE_DEVICES"'], user=True)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.splitlines()) == ["dtnode1 dttest 0,1", "dtnode2 dttest 0,1"], p.stdout
    # more GPUs than a node has: Slurm refuses at submit
    p = slurm.run(["srun", "-N", "1", "--gres=gpu:%d" % (slurm.gpus + 1), "true"], user=True)
    assert p.returncode != 0 and re.search(r"[Rr]equested node configuration is not available",
                                           p.stderr), p.stderr


# --------------------------------------------------------------------------- helpers

ENV_KEYS = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
            "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "DT_JOB_ID", "SLURM_JOB_ID",
            "DTCTL_AGENT_SECRET"]
DUMP = ("import json, os, socket; print('ENV ' + json.dumps(dict({k: os.environ.get(k) for k in "
        + json.dumps(ENV_KEYS) + "}, host=socket.gethostname())), flush=True)")


def envs_of(text):
    """{rank: env} from the ENV lines the ranks printed."""
    out = {}
    for m in re.finditer(r"ENV (\{.*\})", text):
        e = json.loads(m.group(1))
        out[int(e["RANK"])] = e
    return out


def check_torchrun_env(envs, nodes, per_node, slurm_job):
    """2 nodes x 2 ranks, torchrun's contract rank by rank."""
    world = len(nodes) * per_node
    assert sorted(envs) == list(range(world)), envs
    master = envs[0]["MASTER_ADDR"], envs[0]["MASTER_PORT"]
    for r, e in envs.items():
        k = r // per_node
        assert e["host"] == nodes[k], (r, e)
        assert (e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"]) == (
            str(r % per_node), str(world), str(per_node)), (r, e)
        assert e["GROUP_RANK"] == e["NODE_RANK"] == str(k), (r, e)
        assert (e["MASTER_ADDR"], e["MASTER_PORT"]) == master and master[1].isdigit(), (r, e)
        assert e["SLURM_JOB_ID"] == slurm_job, (r, e)
        assert e["DT_JOB_ID"] == envs[0]["DT_JOB_ID"]
        # the agents got the secret in their environment; their ranks must not
        assert e["DTCTL_AGENT_SECRET"] is None, (r, e)
    # rank 0's node is where MASTER_ADDR points
    assert socket.gethostbyname(nodes[0]) == master[0] or master[0] == socket.gethostbyname(
        envs[0]["host"]), master


def user_processes(uid):
    """{pid: cmdline} of every live (not zombie) process of uid on this machine: the fake
    nodes have no pid namespace, so /proc here shows the nodes' processes too."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = os.stat("/proc/" + d)
            with open("/proc/%s/stat" % d) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if st.st_uid == uid and state != "Z":
            out[int(d)] = cmd
    return out


def wait_no_user_processes(uid, timeout=30):
    deadline = time.monotonic() + timeout
    left = user_processes(uid)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = user_processes(uid)
    assert not left, "processes of uid %d left after the allocation ended: %s" % (uid, left)


def node_tmp_entries(fc, prefix):
    """Names in the nodes' private /tmp (and the host's) starting with prefix."""
    found = []
    for i in range(1, fc.n + 1):
        d = fc.state / ("node%d" % i) / "tmp"
        found += ["%s:%s" % (fc.node(i).name, n) for n in os.listdir(d) if n.startswith(prefix)]
    found += ["host:" + n for n in os.listdir("/tmp") if n.startswith(prefix)]
    return found


def shared_subdir(slurm, name):
    """A dir on the shared dir every user may write (the test user's job files)."""
    d = slurm.fc.shared / name
    d.mkdir(exist_ok=True)
    os.chmod(d, 0o777)
    return d


@pytest.fixture
def user_env(slurm, dtctl_bin):
    """Environment and helpers for dtctl run by the fake cluster's user."""
    uid = pwd.getpwnam(slurm.fc.user).pw_uid
    return dict(env={"DTCTL_SHARED_DIR": str(slurm.fc.shared), "NO_COLOR": "1",
                     "TMPDIR": "/tmp"},
                dtctl=str(dtctl_bin / "dtctl"), dtagent=str(dtctl_bin / "dtagent"), uid=uid)


# --------------------------------------------------------------------------- dtctl run inside

def test_run_inside_salloc_2x2_torchrun_env_and_nothing_left(slurm, user_env):
    u = user_env
    p = slurm.run(["salloc", "-N", "2", "--ntasks-per-node=2", u["dtctl"], "run", "-N", "2",
                   "-p", "2", "--", "/usr/bin/python3", "-c", DUMP],
                  user=True, env=u["env"], timeout=180)
    assert p.returncode == 0, "salloc + dtctl run: rc %d\n%s%s" % (p.returncode, p.stdout,
                                                                    p.stderr)
    job = re.search(r"Granted job allocation (\d+)", p.stderr).group(1)
    assert "inside Slurm job %s" % job in p.stderr, p.stderr
    envs = envs_of(p.stdout)
    check_torchrun_env(envs, ["dtnode1", "dtnode2"], 2, job)
    for e in envs.values():
        assert e["CUDA_VISIBLE_DEVICES"] == "-1", e      # a CPU job
    # the rank logs are on the shared dir, and dtctl logs reads them after the allocation
    dt_job = envs[0]["DT_JOB_ID"]
    p = slurm.run([u["dtctl"], "logs", dt_job], user=True, env=u["env"])
    assert p.returncode == 0, p.stderr
    assert sorted(envs_of(p.stdout)) == [0, 1, 2, 3], p.stdout
    wait_no_user_processes(u["uid"])
    assert not node_tmp_entries(slurm.fc, "dtagent-slurm-"), "agent homes left"
    assert not node_tmp_entries(slurm.fc, "dtctl-alloc-"), "head home left"


def wait_for(what, cond, timeout=60, why=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < deadline, "%s not seen after %ss: %s" % (what, timeout, why())
        time.sleep(0.1)


def sleepers(uid, tag):
    """pids of uid's `sleep <tag>` processes (the ranks of a test job)."""
    return [pid for pid, cmd in user_processes(uid).items() if cmd.strip() == "sleep " + tag]


def test_run_inside_sbatch_then_scancel_leaves_nothing(slurm, user_env):
    u = user_env
    out = slurm.fc.shared / "sbatch-env.out"
    script = slurm.fc.shared / "env.sbatch"
    script.write_text("#!/bin/sh\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n"
                      "exec %s run -N 2 -p 2 -- /usr/bin/python3 -c \"$DUMP\"\n" % u["dtctl"])
    os.chmod(script, 0o755)
    p = slurm.run(["sbatch", "--parsable", "--output=%s" % out, str(script)], user=True,
                  env=dict(u["env"], DUMP=DUMP))
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]
    state = slurm.wait_job_gone(job, timeout=120)
    text = out.read_text()
    assert state == "COMPLETED", "sbatch job %s: %s\n%s" % (job, state, text)
    # the batch script runs on the first node: the head is there, its address the node's
    assert "inside Slurm job %s: head on 10.88.0.11:" % job in text, text
    check_torchrun_env(envs_of(text), ["dtnode1", "dtnode2"], 2, job)

    # a long job, then scancel of the whole allocation: nothing of ours stays anywhere
    tag = "6%05d" % (int(job) % 100000)
    script.write_text("#!/bin/sh\nexec %s run -N 2 -p 1 -- sleep %s\n" % (u["dtctl"], tag))
    p = slurm.run(["sbatch", "--parsable", "-N", "2", "--output=%s" % out, str(script)],
                  user=True, env=u["env"])
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]
    wait_for("both ranks running", lambda: len(sleepers(u["uid"], tag)) == 2, 90,
             lambda: out.read_text() if out.exists() else "")
    assert user_processes(u["uid"]), "nothing of the job runs?"
    p = slurm.run(["scancel", job], user=True)
    assert p.returncode == 0, p.stderr
    assert slurm.wait_job_gone(job, timeout=60) == "CANCELLED"
    wait_no_user_processes(u["uid"])
    assert not node_tmp_entries(slurm.fc, "dtagent-slurm-"), "agent homes left"
    assert not node_tmp_entries(slurm.fc, "dtctl-alloc-"), "head home left"


def test_other_shells_of_the_allocation_find_its_head(slurm, user_env, other_user):
    """`dtctl run` in an sbatch script starts a private head.  Another shell of the
    allocation finds it through the user's 0700 record on the shared dir: a step on the
    other node (`srun --overlap --jobid=N dtctl ps`) and a shell with $SLURM_JOB_ID on the
    host (salloc's second terminal) see the job in ps/show/logs, and cancel it, which ends
    the run; another Unix user with the same $SLURM_JOB_ID finds nothing; the record goes
    with the head."""
    u = user_env
    out = slurm.fc.shared / "sbatch-other-shell.out"
    script = slurm.fc.shared / "other-shell.sbatch"
    tag = "7%05d" % (os.getpid() % 100000)
    script.write_text("#!/bin/sh\nexec %s run -N 2 -p 1 -- /bin/sh -c 'echo up-$0; exec sleep %s'"
                      " %s\n" % (u["dtctl"], tag, tag))
    os.chmod(script, 0o755)
    p = slurm.run(["sbatch", "--parsable", "-N", "2", "--output=%s" % out, str(script)],
                  user=True, env=u["env"])
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]
    wait_for("both ranks running", lambda: len(sleepers(u["uid"], tag)) == 2, 90,
             lambda: out.read_text() if out.exists() else "")
    records = slurm.fc.shared / (".dtctl-alloc-%d" % u["uid"])
    st = records.stat()
    assert st.st_uid == u["uid"] and st.st_mode & 0o777 == 0o700, oct(st.st_mode)
    assert [n.split(".")[0] for n in os.listdir(records)] == [job], os.listdir(records)

    def step(node, *args):
        return slurm.run(["srun", "--overlap", "--jobid=%s" % job, "-N", "1", "-w", node,
                          u["dtctl"]] + list(args), user=True, env=u["env"])
    p = step("dtnode2", "ps", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    jobs = json.loads(p.stdout)["jobs"]
    assert [j["state"] for j in jobs] == ["RUNNING"], jobs
    dt_job = jobs[0]["id"]
    # salloc's second terminal: the host, $SLURM_JOB_ID set
    host_env = dict(u["env"], SLURM_JOB_ID=job)
    p = slurm.run([u["dtctl"], "show", "--json", dt_job], user=True, env=host_env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["job"]["state"] == "RUNNING", p.stdout
    p = slurm.run([u["dtctl"], "logs", dt_job], user=True, env=host_env)
    assert p.stdout.count("up-" + tag) == 2, p.stdout + p.stderr
    # another user, the same $SLURM_JOB_ID: not ours to find
    p = subprocess.run(["runuser", "-u", other_user, "--", "env", "SLURM_JOB_ID=" + job,
                        "DTCTL_SHARED_DIR=%s" % slurm.fc.shared, "DTCTL_HOME=/tmp/dtt-other-home",
                        u["dtctl"], "ps"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 3 and "no cluster set up" in p.stderr, p.stdout + p.stderr
    assert dt_job not in p.stdout
    p = step("dtnode1", "cancel", dt_job)
    assert p.returncode == 0, p.stdout + p.stderr
    assert slurm.wait_job_gone(job, timeout=60) in ("COMPLETED", "FAILED")
    assert "CANCELLED" in out.read_text(), out.read_text()
    wait_no_user_processes(u["uid"])
    assert os.listdir(records) == [], "record left"
    assert not node_tmp_entries(slurm.fc, "dtctl-alloc-"), "head home left"


def sbatch_one_node_run(slurm, u, name, tag_digit):
    """As user u, a one-node sbatch on dtnode1 whose script is `dtctl run` of one sleeping
    rank (tagged tag_digit + pid); returns (Slurm job id, its output file) once the rank
    runs."""
    out = slurm.fc.shared / ("sbatch-%s.out" % name)
    script = slurm.fc.shared / ("%s.sbatch" % name)
    tag = tag_digit + "%05d" % (os.getpid() % 100000)
    script.write_text("#!/bin/sh\nexec %s run -N 1 -p 1 -- /bin/sh -c 'echo up-$0; exec sleep "
                      "%s' %s\n" % (u["dtctl"], tag, tag))
    os.chmod(script, 0o755)
    p = slurm.run(["sbatch", "--parsable", "-N", "1", "-w", "dtnode1", "--output=%s" % out,
                   str(script)], user=True, env=u["env"])
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]
    try:
        wait_for("the rank running", lambda: len(sleepers(u["uid"], tag)) == 1, 90,
                 lambda: out.read_text() if out.exists() else "")
    except BaseException:
        slurm.run(["scancel", job])
        raise
    return job, out


def test_one_node_allocation_head_is_reached_from_another_node(slurm, user_env):
    """`dtctl run` in a ONE-node sbatch job: the batch script runs on that node, and its
    head is published at the node's address (Slurm's NodeAddr of dtnode1), not 127.0.0.1,
    so a shell on another node (here dtnode2's namespaces, outside the allocation) reaches
    it through the record: ps sees the job, cancel ends it (signed with the secret as
    any client); nothing stays."""
    u = user_env
    fc = slurm.fc
    job, out = sbatch_one_node_run(slurm, u, "one-node", "8")
    try:
        addr = fc.node(1).addr
        assert "inside Slurm job %s: head on %s:" % (job, addr) in out.read_text(), \
            out.read_text()
        records = fc.shared / (".dtctl-alloc-%d" % u["uid"])
        [rec] = [r for r in os.listdir(records) if r.startswith(job + ".")]
        assert "address: %s," % addr in (records / rec / "cluster.yaml").read_text()

        def on_node2(*args):
            return fc.exec(2, ["env", "SLURM_JOB_ID=" + job, "DTCTL_SHARED_DIR=%s" % fc.shared,
                               "NO_COLOR=1", "TMPDIR=/tmp", u["dtctl"]] + list(args),
                           user=True, timeout=60)
        p = on_node2("ps", "--json")
        assert p.returncode == 0, p.stdout + p.stderr
        jobs = json.loads(p.stdout)["jobs"]
        assert [j["state"] for j in jobs] == ["RUNNING"], jobs
        p = on_node2("cancel", jobs[0]["id"])
        assert p.returncode == 0, p.stdout + p.stderr
        assert slurm.wait_job_gone(job, timeout=60) in ("COMPLETED", "FAILED")
        assert "CANCELLED" in out.read_text(), out.read_text()
    finally:
        slurm.run(["scancel", job])
    wait_no_user_processes(u["uid"])
    assert not node_tmp_entries(fc, "dtctl-alloc-"), "head home left"


def test_a_squatted_record_dir_still_lets_other_shells_find_the_head(slurm, user_env,
                                                                     other_user):
    """The shared dir is everyone's: another user who made .dtctl-alloc-<uid> first (theirs)
    once left other shells of the allocation with a warning and no head.  The head now
    records itself in .dtctl-alloc-<uid>-<random> (the user's, 0700), which the other shells
    find by owner and mode; the squatted dir is never used or touched."""
    u = user_env
    fc = slurm.fc
    squat = fc.shared / (".dtctl-alloc-%d" % u["uid"])
    if squat.exists():
        shutil.rmtree(squat)
    squat.mkdir(mode=0o777)
    os.chmod(squat, 0o777)
    os.chown(squat, pwd.getpwnam(other_user).pw_uid, -1)
    job, out = sbatch_one_node_run(slurm, u, "squat", "6")
    try:
        assert os.listdir(squat) == [], "the squatted dir was used"
        mine = [d for d in fc.shared.iterdir()
                if d.name.startswith(squat.name + "-") and d.stat().st_uid == u["uid"]]
        assert len(mine) == 1 and mine[0].stat().st_mode & 0o777 == 0o700, mine
        assert re.fullmatch(r"\.dtctl-alloc-%d-[0-9a-f]{16}" % u["uid"], mine[0].name), mine
        assert [r.split(".")[0] for r in os.listdir(mine[0])] == [job], os.listdir(mine[0])
        assert "not a directory of yours" in out.read_text(), out.read_text()
        host_env = dict(u["env"], SLURM_JOB_ID=job)   # salloc's second terminal
        p = slurm.run([u["dtctl"], "ps", "--json"], user=True, env=host_env)
        assert p.returncode == 0, p.stdout + p.stderr
        jobs = json.loads(p.stdout)["jobs"]
        assert [j["state"] for j in jobs] == ["RUNNING"], jobs
        p = slurm.run([u["dtctl"], "cancel", jobs[0]["id"]], user=True, env=host_env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert slurm.wait_job_gone(job, timeout=60) in ("COMPLETED", "FAILED")
        wait_no_user_processes(u["uid"])
        assert os.listdir(mine[0]) == [], "record left"
        assert os.listdir(squat) == [] and squat.stat().st_uid != u["uid"]
    finally:
        slurm.run(["scancel", job])
        shutil.rmtree(squat, ignore_errors=True)
        for d in fc.shared.glob(squat.name + "-*"):
            shutil.rmtree(d, ignore_errors=True)


def test_another_users_dir_at_the_agents_home_path_denies_nothing(slurm, user_env, other_user):
    """A node's /tmp is everyone's, and Slurm's job ids come in order: another user who
    made /tmp/dtagent-slurm-<job>.<step>-<node> before the job (0700, theirs) once made
    every agent of it die ("not a private directory of ours") and the run fail.  Each
    agent now makes a fresh home of its own beside it; the planted dirs stay untouched."""
    u = user_env
    p = slurm.run(["sbatch", "--parsable", "--hold", "--output=/dev/null", "--wrap", "true"], user=True, env=u["env"])
    assert p.returncode == 0, p.stderr
    held = int(p.stdout.strip().split(";")[0])
    assert slurm.run(["scancel", str(held)], user=True).returncode == 0
    ouid = pwd.getpwnam(other_user).pw_uid
    planted = []
    for i in (1, 2):
        for job in range(held + 1, held + 4):
            for step_id in range(3):
                d = slurm.fc.state / ("node%d" % i) / "tmp" / (
                    "dtagent-slurm-%d.%d-dtnode%d" % (job, step_id, i))
                d.mkdir()
                os.chown(d, ouid, ouid)
                os.chmod(d, 0o700)
                planted.append(d)
    try:
        p = slurm.run(["salloc", "-N", "2", u["dtctl"], "run", "-N", "2", "--", "true"],
                      user=True, env=u["env"], timeout=180)
        assert p.returncode == 0, "salloc + dtctl run: rc %d\n%s%s" % (p.returncode, p.stdout,
                                                                        p.stderr)
        job = int(re.search(r"Granted job allocation (\d+)", p.stderr).group(1))
        assert held < job < held + 4, (held, job)
        wait_no_user_processes(u["uid"])
        for d in planted:
            st = d.lstat()
            assert st.st_uid == ouid and st.st_mode & 0o7777 == 0o700, d
        # the agents' own homes went with them
        assert sorted(node_tmp_entries(slurm.fc, "dtagent-slurm-")) == sorted(
            "%s:%s" % (d.parent.parent.name.replace("node", "dtnode"), d.name) for d in planted)
    finally:
        for d in planted:
            shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def head_with_slurm_agents(slurm, u):
    """A head on the host (a private DTCTL_HOME of the test user) and, in an sbatch job,
    `dtctl slurm-agents` joining it with the secret in a 0600 file on the shared dir;
    yields (dt, home, slurm job id, the job's output file) once both nodes are UP."""
    fc = slurm.fc
    pw = pwd.getpwnam(fc.user)
    home = Path(tempfile.mkdtemp(prefix="dtctl-slurm-head-"))     # the user's: not pytest's 0700
    port = free_ports(1)[0]
    (home / "cluster.yaml").write_text(
        "cluster: s\nshared_dir: %s\nnodes:\n  - {host: dtnode1}\n  - {host: dtnode2}\n"
        "agent: {heartbeat: 300ms, dead_after: 3s}\nhead: {address: %s, port: %d}\n"
        % (fc.shared, fc.host_addr, port))
    os.chown(home, pw.pw_uid, pw.pw_gid)
    os.chmod(home, 0o700)
    os.chown(home / "cluster.yaml", pw.pw_uid, pw.pw_gid)
    env = dict(u["env"], DTCTL_HOME=str(home))
    env.pop("DTCTL_SHARED_DIR")

    def dt(*args, **kw):
        return slurm.run([u["dtctl"]] + list(args), user=True, env=env, **kw)

    job = None
    try:
        p = dt("head", "start")
        assert p.returncode == 0, p.stderr
        secret = fc.shared / "agents.secret"
        secret.write_text((home / "secret").read_text())
        os.chown(secret, pw.pw_uid, pw.pw_gid)
        os.chmod(secret, 0o600)
        script = fc.shared / "agents.sbatch"
        script.write_text("#!/bin/sh\nexec %s slurm-agents --head %s:%d --secret %s\n"
                          % (u["dtctl"], fc.host_addr, port, secret))
        os.chmod(script, 0o755)
        out = fc.shared / "agents.out"
        p = slurm.run(["sbatch", "--parsable", "-N", "2", "--output=%s" % out, str(script)],
                      user=True, env=u["env"])
        assert p.returncode == 0, p.stderr
        job = p.stdout.strip().split(";")[0]

        def nodes_up():
            q = dt("nodes", "--json")
            return q.returncode == 0 and sorted(n["name"] for n in json.loads(q.stdout)["nodes"]
                                                if n["state"] == "UP") == ["dtnode1", "dtnode2"]
        wait_for("dtnode1 and dtnode2 UP", nodes_up, 60,
                 lambda: out.read_text() if out.exists() else "")
        yield dt, home, job, out
    finally:
        if job:
            slurm.run(["scancel", job])
        dt("head", "stop")
        shutil.rmtree(home, ignore_errors=True)


def test_slurm_agents_join_a_head_and_stop_their_tasks_with_the_step(slurm, user_env):
    """dtctl slurm-agents in an sbatch script joins a head that runs elsewhere (here: the
    host), under the Slurm node names, the secret in a 0600 file; scancel ends the step:
    the agents stop their ranks and remove their homes."""
    u = user_env
    with head_with_slurm_agents(slurm, u) as (dt, home, job, out):
        # no secret on any agent's command line
        for pid, cmd in user_processes(u["uid"]).items():
            assert (home / "secret").read_text().strip() not in cmd, cmd
        tag = "7%05d" % (int(job) % 100000)
        p = dt("run", "-d", "-N", "2", "-p", "1", "--", "sleep", tag)
        assert p.returncode == 0, p.stderr
        dt_job = p.stdout.strip()
        wait_for("both ranks running", lambda: len(sleepers(u["uid"], tag)) == 2, 60)
        p = slurm.run(["scancel", job], user=True)
        assert p.returncode == 0, p.stderr
        assert slurm.wait_job_gone(job) == "CANCELLED"
        wait_for("the ranks gone", lambda: not sleepers(u["uid"], tag), 30)
        head_pid = int((home / "dtsched.pid").read_text().split()[0])
        wait_for("nothing but dtsched left", lambda: not {
            pid: c for pid, c in user_processes(u["uid"]).items() if pid != head_pid}, 30,
            lambda: str(user_processes(u["uid"])))
        assert not node_tmp_entries(slurm.fc, "dtagent-slurm-"), "agent homes left"

        # the head saw the ranks end: the job is over, not RUNNING on agents that are gone
        def job_over():
            q = dt("show", "--json", dt_job)
            j = json.loads(q.stdout)["job"]
            return j if j["state"] in ("FAILED", "CANCELLED", "NODE_FAIL") else None
        j = wait_for("job %s over" % dt_job, job_over, 30)
        print("after scancel the head has the job %s: %s" % (j["state"], j.get("reason")))


def test_slurm_agents_leave_when_the_head_tells_them(slurm, user_env):
    """POST /v1/leave (signed) to each agent of the step: they stop their ranks and exit,
    so the step, and the sbatch job running only it, complete."""
    u = user_env
    with head_with_slurm_agents(slurm, u) as (dt, home, job, out):
        tag = "8%05d" % (int(job) % 100000)
        p = dt("run", "-d", "-N", "2", "-p", "1", "--", "sleep", tag)
        assert p.returncode == 0, p.stderr
        wait_for("both ranks running", lambda: len(sleepers(u["uid"], tag)) == 2, 60)
        secret = (home / "secret").read_text().strip()
        nodes = json.loads(dt("nodes", "--json").stdout)["nodes"]
        for n in nodes:
            status, body = DtApi(n["address"], n["port"], secret).request("POST", "/v1/leave")
            assert status == 202 and body["node"] == n["name"], (status, body)
        assert slurm.wait_job_gone(job, timeout=30) == "COMPLETED", out.read_text()
        wait_for("the ranks gone", lambda: not sleepers(u["uid"], tag), 30)
        assert not node_tmp_entries(slurm.fc, "dtagent-slurm-"), "agent homes left"


def test_ranks_get_the_gpus_slurm_gave_the_allocation(slurm, user_env):
    """Another job holds GPUs 0 and 1 of dtnode1: Slurm gives ours 2 and 3, and the two
    ranks of `dtctl run -g 2` inside the allocation see exactly those, not 0,1 (our agent maps its
    GPU i to the i-th device of the step's CUDA_VISIBLE_DEVICES)."""
    u = user_env
    p = slurm.run(["sbatch", "--parsable", "-w", "dtnode1", "--gres=gpu:2", "--output=/dev/null",
                   "--wrap", "sleep 300"], user=True, env=u["env"])
    assert p.returncode == 0, p.stderr
    holder = p.stdout.strip().split(";")[0]
    try:
        wait_for("holder running", lambda: "JobState=RUNNING" in slurm.run(
            ["scontrol", "-o", "show", "job", holder]).stdout, 30)
        p = slurm.run(["salloc", "-N", "1", "-w", "dtnode1", "--gres=gpu:2", u["dtctl"], "run",
                       "-N", "1", "-g", "2", "--", "/usr/bin/python3", "-c", DUMP],
                      user=True, env=u["env"], timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        envs = envs_of(p.stdout)
        # each rank sees its node's reservation (docs/run.md), here all of the allocation's
        assert sorted(e["CUDA_VISIBLE_DEVICES"] for e in envs.values()) == ["2,3", "2,3"], envs
    finally:
        slurm.run(["scancel", holder])


def test_mpi_ranks_get_the_gpus_slurm_gave_each_node(slurm, user_env):
    """Another job holds GPUs 0 and 1 of dtnode2: the allocation gets 0,1 of dtnode1 and 2,3
    of dtnode2.  `dtctl run --launcher mpi -N 2 -g 2` inside it: the ranks mpirun starts on
    dtnode1 see 0,1, and those of the orted on dtnode2 (started through that node's agent)
    2,3, as the agent launcher's ranks do (the rank logger maps through DT_GPU_MAP)."""
    u = user_env
    p = slurm.run(["sbatch", "--parsable", "-w", "dtnode2", "--gres=gpu:2", "--output=/dev/null",
                   "--wrap", "sleep 300"], user=True, env=u["env"])
    assert p.returncode == 0, p.stderr
    holder = p.stdout.strip().split(";")[0]
    try:
        wait_for("holder running", lambda: "JobState=RUNNING" in slurm.run(
            ["scontrol", "-o", "show", "job", holder]).stdout, 30)
        p = slurm.run(["salloc", "-N", "2", "-w", "dtnode[1-2]", "--gres=gpu:2", u["dtctl"], "run",
                       "--launcher", "mpi", "-N", "2", "-g", "2", "--", "/bin/sh", "-c",
                       "echo MPIGPU rank=$OMPI_COMM_WORLD_RANK host=$(hostname) "
                       "cvd=$CUDA_VISIBLE_DEVICES"], user=True, env=u["env"], timeout=120)
        m = re.search(r"logs: (\S+)", p.stderr)
        mpirun_log = Path(m.group(1)) / "mpirun.log" if m else None
        assert p.returncode == 0, p.stdout + p.stderr + (
            mpirun_log.read_text() if mpirun_log and mpirun_log.exists() else "")
        got = sorted(re.findall(r"MPIGPU rank=(\d+) host=(\S+) cvd=(\S*)", p.stdout))
        assert got == [("0", "dtnode1", "0,1"), ("1", "dtnode1", "0,1"),
                       ("2", "dtnode2", "2,3"), ("3", "dtnode2", "2,3")], p.stdout
    finally:
        slurm.run(["scancel", holder])


def test_export_slurm_script_submitted_with_sbatch(slurm, user_env):
    """dtctl export slurm job.yaml: one readable sbatch script; submitted as it is, its
    ranks get the torchrun env of a 2 x 2 job (nothing about ranks in the script)."""
    u = user_env
    d = shared_subdir(slurm, "export")
    job = d / "job.yaml"
    job.write_text("name: exported\nnodes: 2\nprocs_per_node: 2\ntimeout: 10m\n"
                   "command: [/usr/bin/python3, -c, %s]\n" % json.dumps(DUMP))
    p = slurm.run([u["dtctl"], "export", "slurm", "--partition", slurm.partition, str(job)],
                  user=True, env=u["env"], cwd=str(d))
    assert p.returncode == 0, p.stderr
    script = p.stdout
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2", "#SBATCH --time=11",
                 "#SBATCH --job-name=exported", "#SBATCH --partition=debug",
                 "run --in-allocation"):
        assert line in script, script
    # no rank wiring by hand: outside its comments and the embedded job file, the script
    # never names a rank variable
    code = [l for l in script.split("<<'DTCTL_JOB_EOF'")[0].splitlines()
            if not l.startswith("# ")] + script.split("\nDTCTL_JOB_EOF\n")[1].splitlines()
    assert not [l for l in code if re.search(r"RANK|MASTER_|WORLD_SIZE", l)], script
    (d / "job.sbatch").write_text(script)
    out = d / "out.txt"
    # submitted without our environment: everything it needs is in the script
    p = slurm.run(["sbatch", "--parsable", "--export=NONE", "--output=%s" % out,
                   str(d / "job.sbatch")], user=True, cwd=str(d))
    assert p.returncode == 0, p.stderr
    jid = p.stdout.strip().split(";")[0]
    state = slurm.wait_job_gone(jid, timeout=120)
    text = out.read_text()
    assert state == "COMPLETED", text
    check_torchrun_env(envs_of(text), ["dtnode1", "dtnode2"], 2, jid)
    # a bad job file: exit 2 naming file:line:col, no script
    (d / "bad.yaml").write_text("nodes: two\n")
    p = slurm.run([u["dtctl"], "export", "slurm", str(d / "bad.yaml")], user=True, env=u["env"])
    assert p.returncode == 2 and re.search(r"bad\.yaml:1:\d+", p.stderr) and not p.stdout, p


def test_export_slurm_never_makes_a_name_or_path_a_command(dtctl_bin, tmp_path):
    """A job file someone hands you, exported: a newline in its name (the #SBATCH
    --job-name line) or in its path (the script's first comment) used to end that line, and
    what followed ran as a command of the script (and ended sbatch's options there).  Now
    the name is refused (exit 2, naming it) and the path is shown with '?' for it; the
    script, run, makes no file (it stops at 'dtctl run --in-allocation' outside Slurm)."""
    env = dict(os.environ, DTCTL_SHARED_DIR=str(tmp_path))
    env.pop("SLURM_JOB_ID", None)
    (tmp_path / "name.yaml").write_text('name: "x\\ntouch INJECTED #"\ncommand: [true]\n')
    p = subprocess.run([str(dtctl_bin / "dtctl"), "export", "slurm", "name.yaml"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and not p.stdout, (p.returncode, p.stdout)
    assert "name.yaml': the job's name has a control character (byte 0x0a)" in p.stderr, p.stderr
    path = tmp_path / "p\ntouch MARK\n.yaml"
    path.write_text("name: fine\ncommand: [true]\n")
    p = subprocess.run([str(dtctl_bin / "dtctl"), "export", "slurm", path.name], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert "# sbatch script made by 'dtctl export slurm %s/p?touch MARK?.yaml'" % tmp_path \
        in p.stdout, p.stdout
    (tmp_path / "job.sbatch").write_text(p.stdout)
    r = subprocess.run(["sh", "job.sbatch"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert "not inside a Slurm allocation" in r.stderr, (r.returncode, r.stderr)
    assert not (tmp_path / "MARK").exists() and not (tmp_path / "INJECTED").exists()


def test_sweep_inside_salloc_packs_trials_onto_the_allocation(slurm, user_env):
    """dtctl sweep in an salloc shell: its trials run as jobs of the allocation's own
    head, on its nodes (4 one-rank trials on 2 nodes), and nothing is left afterwards."""
    u = user_env
    d = shared_subdir(slurm, "sweep")
    f = d / "sweep.yaml"
    f.write_text("method: grid\nmetric: {name: loss}\nparameters:\n  k: {values: [1, 2, 3, 4]}\n"
                 "parallel: 4\njob: {name: trial, procs_per_node: 1, command: [/bin/sh, -c, "
                 "'echo \"DTCTL_METRIC {\\\"epoch\\\": 1, \\\"loss\\\": $DT_PARAM_K}\"; "
                 "echo TRIAL $DT_PARAM_K $(hostname) $SLURM_JOB_ID']}\n")
    p = slurm.run(["salloc", "-N", "2", u["dtctl"], "sweep", str(f)], user=True, env=u["env"],
                  cwd=str(d), timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    job = re.search(r"Granted job allocation (\d+)", p.stderr).group(1)
    assert "inside Slurm job %s" % job in p.stderr, p.stderr
    sid = re.search(r"sweep (s-\d+)", p.stderr).group(1)
    # the trials' rank logs on the shared dir: each ran on an allocated node, in the allocation
    trials = {}
    for log in (slurm.fc.shared / "jobs").glob("*/logs/*.log"):
        for m in re.finditer(r"TRIAL (\d) (dtnode\d) (\d+)", log.read_text(errors="replace")):
            trials[m.group(1)] = (m.group(2), m.group(3))
    assert sorted(trials) == ["1", "2", "3", "4"], (sid, trials)
    assert all(j == job for _, j in trials.values()), trials
    wait_no_user_processes(u["uid"])
    assert not node_tmp_entries(slurm.fc, "dtctl-alloc-"), "head home left"


def test_doctor_on_slurm_and_with_slurmctld_stopped(slurm, user_env):
    """Last in this file: it stops slurmctld for real."""
    u = user_env
    p = slurm.run(["salloc", "-N", "2", u["dtctl"], "doctor"], user=True, env=u["env"],
                  timeout=120)
    job = re.search(r"Granted job allocation (\d+)", p.stderr).group(1)
    assert p.returncode == 0, p.stdout + p.stderr
    for want in (r"PASS munge +munged at \S+: a credential made and read back",
                 r"PASS slurmctld +Slurmctld\(primary\) at \S+ is UP",
                 r"PASS versions +slurm(-wlm)? 22\.05\.\S+, dtctl ", r"PASS partition +debug\* up 2 ",
                 r"PASS gres +.*gpu:4", r"PASS pmix ", r"PASS shared dir +%s on 2 nodes of job %s"
                 % (re.escape(str(slurm.fc.shared)), job), r"PASS dtagent +"):
        assert re.search(want, p.stdout), "%r not in:\n%s" % (want, p.stdout)
    # munged unreachable (slurm.conf's AuthInfo socket wrong): munge fails, and says so
    # apart from slurmctld, which cannot be asked without it
    conf = Path(tempfile.mkdtemp(prefix="dtctl-nomunge-", dir="/var/tmp"))
    try:
        text = Path(slurm.conf).read_text()
        assert "AuthInfo=socket=" in text
        (conf / "slurm.conf").write_text(re.sub(r"AuthInfo=socket=\S+",
                                                "AuthInfo=socket=/nonexistent/munge.socket", text))
        os.chmod(conf, 0o755)
        os.chmod(conf / "slurm.conf", 0o644)
        p = slurm.run(["env", "SLURM_CONF=%s" % (conf / "slurm.conf"), u["dtctl"], "doctor",
                       "--slurm", "--json"], user=True, env=u["env"])   # run() sets its own
        assert p.returncode == 1, p.stdout + p.stderr
        checks = json.loads(p.stdout)["checks"]
        assert checks[0]["check"] == "munge" and not checks[0]["ok"], checks
        assert "/nonexistent/munge.socket" in checks[0]["detail"], checks
        assert "munged" in checks[0]["fix"], checks
        assert checks[1]["check"] == "slurmctld" and not checks[1]["ok"], checks
    finally:
        shutil.rmtree(conf, ignore_errors=True)
    # a real failure: slurmctld gone
    inst = json.loads(subprocess.run([str(FAKESLURM), "env", "--json"], capture_output=True,
                                     text=True, check=True).stdout)
    os.kill(inst["pids"]["slurmctld"], signal.SIGTERM)
    wait_for("slurmctld gone", lambda: slurm.run(["scontrol", "ping"]).returncode != 0, 30)
    p = slurm.run([u["dtctl"], "doctor", "--slurm", "--json"], user=True, env=u["env"])
    assert p.returncode == 1, p.stdout + p.stderr
    checks = json.loads(p.stdout)["checks"]
    assert checks[0]["check"] == "munge" and checks[0]["ok"], checks   # not munge's fault
    assert checks[1]["check"] == "slurmctld" and not checks[1]["ok"], checks
    assert "DOWN" in checks[1]["detail"] and "slurmctld" in checks[1]["fix"], checks
    assert len(checks) == 2, checks        # nothing else is tried without the controller


def test_in_allocation_mistakes_are_usage_errors(dtctl):
    """No Slurm needed: what is missing is named, exit 2, nothing started."""
    p = dtctl("run", "--in-allocation", "--", "true", env={"SLURM_JOB_ID": ""})
    assert p.returncode == 2 and "not inside a Slurm allocation ($SLURM_JOB_ID is not set)" \
        in p.stderr, p.stderr
    p = dtctl("run", "--detach", "--", "true", env={"SLURM_JOB_ID": "7",
                                                    "SLURM_JOB_NODELIST": "n[1-2]",
                                                    "SLURM_CONF": "/nonexistent/slurm.conf"})
    assert p.returncode == 2 and "$SLURM_CONF '/nonexistent/slurm.conf': No such file" \
        in p.stderr, p.stderr
    p = dtctl("slurm-agents", "--head", "10.0.0.1:7071", env={"SLURM_JOB_ID": ""})
    assert p.returncode == 2 and "cluster secret" in p.stderr, p.stderr
    p = dtctl("export", "pbs", "job.yaml")
    assert p.returncode == 2 and "unknown export format 'pbs'" in p.stderr, p.stderr
