"""A real Slurm (Debian's 22.05) on the fake cluster: the fixture itself (tests/cluster/
fakeslurm through conftest's slurm_cluster), then dtctl's pieces that run under Slurm.
See docs/slurm.md."""

import json
import os
import pwd
import re
import socket
import time

import pytest


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
            "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "DT_JOB_ID", "SLURM_JOB_ID"]
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
