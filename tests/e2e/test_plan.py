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

dtsched starts a node's ranks with one request, POST /v1/tasks {"tasks": [...]}: the
agent answers one result per task, each started or refused as if alone (a malformed
batch starts nothing).  When the agent starts 3 of a job's 4 ranks (rank 3's id is
taken), the job fails naming rank 3 and its node, and the 3 started are stopped, as
when one of the former one-per-rank requests failed.
"""

import json
import os
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
    # env values (setup.env, the job's env: tokens) are the cluster user's only
    for name in ("plan.json", "job.yaml"):
        mode = (Path(job["job_dir"]) / name).stat().st_mode & 0o777
        assert mode == 0o600, "%s is %o: env values readable by others" % (name, mode)
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


def agent_api(cluster, i):
    n = cluster.fc.node(i)
    return DtApi(n.addr, cluster.port(i), read_secret(str(cluster.home)))


def test_agent_starts_a_batch_one_result_per_task(cluster):
    api = agent_api(cluster, 1)
    tag = "batch-%d" % os.getpid()
    status, body = api.request("POST", "/v1/tasks", {"tasks": [
        {"id": tag + "-a", "argv": ["sleep", "30"]},
        {"id": tag + "-a", "argv": ["true"]},             # the same id again: 409
        {"id": tag + "-c", "argv": []},                    # invalid: 400
        {"id": tag + "-d", "argv": ["true"], "rank": 3}]})
    assert status == 200, body
    res = body["tasks"]
    assert [r["status"] for r in res] == [201, 409, 400, 201], res
    assert res[0]["task"]["id"] == tag + "-a" and res[3]["task"]["rank"] == 3
    assert "already exists" in res[1]["error"] and "argv" in res[2]["error"]
    assert api.request("GET", "/v1/tasks/%s-a" % tag)[0] == 200
    assert api.request("GET", "/v1/tasks/%s-c" % tag)[0] == 404
    # the single-task form is unchanged
    status, body = api.request("POST", "/v1/tasks", {"id": tag + "-e", "argv": ["true"]})
    assert status == 201 and body["task"]["id"] == tag + "-e", body
    # a malformed batch starts nothing
    before = len(api.request("GET", "/v1/tasks")[1]["tasks"])
    for bad in ({"tasks": []}, {"tasks": [{"id": tag + "-f", "argv": ["true"]}, 1]},
                {"tasks": {"id": tag + "-g"}},
                {"tasks": [{"id": tag + "-h", "argv": ["true"]}], "argv": ["true"]}):
        status, body = api.request("POST", "/v1/tasks", bad)
        assert status == 400, (bad, body)
    assert len(api.request("GET", "/v1/tasks")[1]["tasks"]) == before
    for x in "ade":
        api.request("DELETE", "/v1/tasks/%s-%s" % (tag, x), {"grace_ms": 0})


def next_job_id(cluster):
    """The id dtsched gives the next job: past every id it gave and every job dir."""
    ids = [int(j["id"][2:]) for j in cluster.jobs()]
    jobs = Path(cluster.fc.shared) / "jobs"
    ids += [int(d.name[2:]) for d in jobs.iterdir() if re.fullmatch(r"j-\d+", d.name)]
    return "j-%06d" % (max(ids, default=0) + 1)


def test_a_rank_the_agent_refuses_fails_the_job_and_the_started_are_stopped(cluster):
    args = ["-n", 2, "-p", 2, "--launcher", "agent", "--name", "partial", "--", "sleep", "60"]
    cluster.wait_idle()
    p = cluster.dtctl("run", "--dry-run", "--json", *args)
    assert p.returncode == 0, p.stderr
    dry = json.loads(p.stdout)
    assert dry["state"] == "RUNNING", dry
    node3 = dry["plan"]["placement"][dry["plan"]["tasks"][3]["node"]]
    i3 = next(i for i in range(1, cluster.fc.n + 1) if cluster.fc.node(i).name == node3["node"])
    job_id = next_job_id(cluster)
    # rank 3's task file is taken on its node (a directory where the agent would write it:
    # not a task of its table, so no heartbeat tells dtsched and the id is not skipped, as a
    # live task's id now is): the agent starts rank 2 but refuses rank 3 there
    taken = "%s.0.r3" % job_id
    taken_path = "%s/tasks/%s.json" % (cluster.agent_home(i3), taken)
    p = cluster.fc.exec(i3, ["mkdir", taken_path], user=True)
    assert p.returncode == 0, p
    try:
        p = cluster.dtctl("run", "--detach", *args)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == job_id, "the job got another id than predicted"
        job = cluster.wait_job(job_id, ("COMPLETED", "FAILED", "CANCELLED"), timeout=30)
        assert job["state"] == "FAILED", job
        assert ("cannot start rank 3 on node '%s'" % node3["node"]) in job["reason"], job
        assert "already exists" in job["reason"], job
        # the three that started are stopped (not left to run their 60 s)
        plan = json.loads((Path(job["job_dir"]) / "plan.json").read_text())
        deadline = time.time() + 20
        for t in plan["tasks"][:3]:
            node = plan["placement"][t["node"]]
            api = DtApi(node["address"], node["port"], read_secret(str(cluster.home)))
            while True:
                status, body = api.request("GET", "/v1/tasks/" + t["id"])
                assert status == 200, (t["id"], body)
                if body["task"]["state"] in ("exited", "failed", "lost"):
                    break
                assert time.time() < deadline, "rank %d still %s" % (t["rank"], body["task"])
                time.sleep(0.2)
            assert body["task"]["exit_code"] != 0, body["task"]   # stopped, not done
        ranks = {r["rank"]: r for r in cluster.show(job_id)["ranks"]}
        assert all(ranks[r]["state"] in ("killed", "exited") for r in range(3)), ranks
    finally:
        cluster.fc.exec(i3, ["rmdir", taken_path], user=True)


def agent_requests(api):
    """dtagent_requests_total of an agent (its /metrics: public, counted after it answers)."""
    status, text = api.request("GET", "/metrics", sign=False)
    assert status == 200, text
    m = re.search(r"^dtagent_requests_total(?:\{[^}]*\})? (\d+)$", text, re.M)
    assert m, text
    return int(m.group(1))


def test_one_request_per_node_starts_its_ranks(cluster):
    args = ["-n", 2, "-p", 2, "--launcher", "agent", "--name", "per-node", "--", "sleep", "30"]
    cluster.wait_idle()
    p = cluster.dtctl("run", "--dry-run", "--json", *args)
    assert p.returncode == 0, p.stderr
    second = json.loads(p.stdout)["plan"]["placement"][1]["node"]   # not the master
    i2 = next(i for i in range(1, cluster.fc.n + 1) if cluster.fc.node(i).name == second)
    api = agent_api(cluster, i2)
    before = agent_requests(api)
    job_id = cluster.dtctl("run", "--detach", *args).stdout.strip()
    try:
        deadline = time.time() + 20
        while True:
            ranks = cluster.show(job_id)["ranks"]
            if len(ranks) == 4 and all(r["state"] == "running" for r in ranks):
                break
            assert time.time() < deadline, ranks
            time.sleep(0.2)
        # its two ranks came in one request (the first /metrics is counted too, and the
        # connectivity check's POST /v1/probe before the launch: docs/agents.md)
        assert agent_requests(api) - before == 1 + 1 + 1
    finally:
        cluster.dtctl("cancel", job_id)
        cluster.wait_job(job_id, ("CANCELLED", "FAILED", "COMPLETED"))
