"""What `dtctl run --dry-run` shows is what runs: one launch-plan builder in dtsched.

A 3-node fake cluster, 4 fake GPUs per node.  For each launcher (agent: one task per
rank; mpi: one mpirun task) the test takes the plan of `dtctl run --dry-run --json` and
then runs the same job on the same idle cluster, and compares that plan with the plan
the attempt was launched with (<job_dir>/plan.json, written by dtsched with lib/safefile
before it starts the tasks).  They must be equal after normalizing only what is by
nature per submission:

  - the job id ("j-DRYRUN" in a dry run; it is also in every task id, TORCHELASTIC_RUN_ID
    and DT_JOB_ID),
  - the job dir ("<shared_dir>/jobs/<id>" in a dry run; in DT_JOB_DIR, DT_METRICS_FILE,
    TORCHELASTIC_ERROR_FILE, log paths and mpirun's --hostfile),
  - the master port (0 in a dry run: a free port is asked of the master node at launch;
    master_port and MASTER_PORT).

Then what the agents were sent is checked against the plan: each task's id, node,
argv, the names of its env, and its GPUs, as the agent reports them.  A GPU task's
CUDA_VISIBLE_DEVICES reaches the agent once, as cuda_visible_devices (not also in its
env), and the rank sees exactly the plan's value.
"""

import json
import re
import time
from pathlib import Path

import pytest

from conftest import HeadCluster
from dtapi import DtApi, read_secret

HEAD_PORT = 18171
AGENT_PORT = 18170
PROBE = 'echo "PLAN rank=${RANK-none} cvd=${CUDA_VISIBLE_DEVICES-unset} port=${MASTER_PORT-unset}"'


class Ctx(HeadCluster):
    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=4, tag="plan",
                         dead_after_ms=3000)

    def wait_idle(self, timeout=30):
        """Every GPU free: a dry run of a job taking all of them would start at once."""
        deadline = time.time() + timeout
        while True:
            p = self.dtctl("run", "--dry-run", "--json", "-n", self.fc.n, "-g", self.gpus,
                           "--", "true")
            assert p.returncode == 0, p.stderr
            if json.loads(p.stdout)["state"] == "RUNNING":
                return
            assert time.time() < deadline, "GPUs still held: %s" % p.stdout
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    fc = fake_cluster(3)
    ctx = Ctx(fc, dtctl_bin, tmp_path_factory.mktemp("plan"))
    with ctx.running():
        yield ctx


def normalized(plan, job_id, job_dir):
    """The plan with the per-submission values (module docstring) made those of a dry run."""
    dry_dir = job_dir.rsplit("/", 1)[0] + "/<id>"
    text = json.dumps(plan, sort_keys=True)
    text = text.replace(json.dumps(job_dir)[1:-1], json.dumps(dry_dir)[1:-1])
    text = text.replace(job_id, "j-DRYRUN")
    out = json.loads(text)
    out["master_port"] = 0
    for t in out["tasks"]:
        if "MASTER_PORT" in t["env"]:
            t["env"]["MASTER_PORT"] = "0"
    return out


@pytest.mark.parametrize("launcher", ["agent", "mpi"])
def test_dry_run_plan_is_the_launched_plan(cluster, launcher):
    args = ["-n", 2, "-g", 2, "--launcher", launcher, "-e", "A=1 2", "--name", "plan-" + launcher,
            "--", "sh", "-c", PROBE]
    cluster.wait_idle()
    p = cluster.dtctl("run", "--dry-run", "--json", *args)
    assert p.returncode == 0, p.stderr
    dry = json.loads(p.stdout)
    assert dry["state"] == "RUNNING", dry
    assert dry["plan"]["job_id"] == "j-DRYRUN" and dry["plan"]["master_port"] == 0

    p = cluster.dtctl("run", "--detach", *args)
    assert p.returncode == 0, p.stderr
    job_id = p.stdout.strip()
    job = cluster.wait_job(job_id, ("COMPLETED", "FAILED"))
    plan_file = Path(job["job_dir"]) / "plan.json"
    assert plan_file.is_file(), "no %s: the launched plan is not recorded" % plan_file
    launched = json.loads(plan_file.read_text())
    assert launched["job_id"] == job_id and launched["master_port"] == job["master_port"] > 0

    # the dry run's plan, value for value, is the one that was launched
    norm = normalized(launched, job_id, job["job_dir"])
    assert norm == dry["plan"], "dry run:\n%s\nlaunched (normalized):\n%s" % (
        json.dumps(dry["plan"], indent=1, sort_keys=True), json.dumps(norm, indent=1, sort_keys=True))
    assert dry["placement"] == job["placement"]

    # what the agents got is the plan's tasks
    secret = read_secret(str(cluster.home))
    ranks = {r["rank"]: r for r in job["ranks"]}   # mpi: rank -1 is mpirun's task
    assert len(launched["tasks"]) == (4 if launcher == "agent" else 1)
    for t in launched["tasks"]:
        node = launched["placement"][t["node"]]
        r = ranks[t["rank"]]
        assert (r["task"], r["node"]) == (t["id"], node["node"]), (t, r)
        api = DtApi(node["address"], node["port"], secret)
        status, body = api.request("GET", "/v1/tasks/" + t["id"])
        assert status == 200, body
        task = body["task"]
        assert task["argv"] == t["argv"]
        assert task["job_id"] == job_id and task["rank"] == t["rank"]
        sent_env = set(t["env"]) - {"CUDA_VISIBLE_DEVICES"}
        assert set(task["env_keys"]) == sent_env, set(task["env_keys"]) ^ sent_env
        # the GPUs once: as cuda_visible_devices, not in the env as well
        assert task["cuda_visible_devices"] == t["cuda_visible_devices"] == node["slots"]
        assert "CUDA_VISIBLE_DEVICES" not in task["env_keys"]

    if launcher == "agent":
        # and each rank saw what the plan says
        p = cluster.dtctl("logs", job_id)
        assert p.returncode == 0, p.stderr
        seen = {int(m.group(1)): (m.group(2), m.group(3))
                for m in re.finditer(r"PLAN rank=(\d+) cvd=(\S*) port=(\S*)", p.stdout)}
        want = {t["rank"]: (t["env"]["CUDA_VISIBLE_DEVICES"], t["env"]["MASTER_PORT"])
                for t in launched["tasks"]}
        assert seen == want, p.stdout
        assert job["state"] == "COMPLETED", job

