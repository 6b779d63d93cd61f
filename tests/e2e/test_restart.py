"""Coordinated restart (docs/run.md, "Restarts") on the 3-node fake cluster with fake GPUs
(test_run.py's cluster, reused): a node of a 2-node job dies mid-run.

  - with a spare node: the job is stopped as a whole (the surviving rank is gone within
    5 s of the NODE_FAIL decision), requeued with DT_RESUME from its checkpoint and restarted
    on the spare with the same world size; `dtctl show` counts the restart, the time and
    GPU-hours lost, and the effective training time ratio;
  - without one (include_nodes names only two nodes) and `elastic: {min_nodes: 1}`: it
    restarts on the one healthy node, WORLD_SIZE 4 instead of 8.
"""

import datetime
import os
import time
import uuid

from test_run import (NODE_KILL, PY, cluster, kill_node, wait_checkpointed,  # noqa: F401
                      wait_no_procs)


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def kill_and_wait_restart(cluster, job):
    """Kill the job's second node; returns (victim index, victim, seconds from the
    NODE_FAIL decision until the surviving rank was gone, the job once final)."""
    j = cluster.wait_job(job, ["RUNNING"])
    wait_checkpointed(cluster, job)
    victim = j["placement"][1]["node"]
    survivor = [r["pid"] for r in cluster.show(job)["ranks"] if r["node"] != victim][0]
    killed = time.time()
    i = kill_node(cluster, job, victim)
    deadline = time.time() + 30
    while not gone(survivor) and time.time() < deadline:
        time.sleep(0.02)
    stopped = time.time()
    print("surviving rank gone %.2f s after the kill" % (stopped - killed))
    j = cluster.wait_job(job, ["COMPLETED", "FAILED", "NODE_FAIL"], 30)
    # dtsched's decision: when it wrote NODE_FAIL into the job's history (same clock)
    at = [h["at"] for h in j["history"] if h["state"] == "NODE_FAIL"][0]
    decided = datetime.datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    assert stopped >= decided - 0.1, "the surviving rank ended before NODE_FAIL: %s" % j
    print("surviving rank gone %.2f s after the NODE_FAIL decision" % (stopped - decided))
    return i, victim, stopped - decided, j


def test_restart_on_spare_same_world_with_lost_time(cluster):
    marker = "restart-" + uuid.uuid4().hex[:8]
    job = cluster.submit("-n", 2, "-g", 4, "--retries", 1, "--name", "spare", "--",
                         PY, "-c", NODE_KILL, marker)
    i, victim, stopped_after, j = kill_and_wait_restart(cluster, job)
    try:
        assert stopped_after < 5, "the surviving rank lived %.1f s after NODE_FAIL" % stopped_after
        assert j["state"] == "COMPLETED", j
        assert victim not in [x["node"] for x in j["placement"]], j
        assert len(j["placement"]) == 2 and j["world_size"] == 8, j
        logs = cluster.logs(job)
        assert "rank 0 resumed from step-7.ckpt: step 7 (world 8)" in logs, logs
        # what it cost: work since the checkpoint + the restart, on 8 GPUs
        assert j["restarts"] == 1, j
        assert j["lost_s"] > 1, j   # at least the node's dead_after (2 s) went by
        assert abs(j["gpu_hours_lost"] * 3600 - j["lost_s"] * 8) < 0.01, j
        assert 0 <= j["effective_ratio"] < 1, j
        p = cluster.dtctl("show", job)
        assert "restarts:   1, lost " in p.stdout and "GPU-hours, effective training time" \
            in p.stdout, p.stdout
    finally:
        cluster.start_agent(i)
        cluster.wait_nodes_up()
    wait_no_procs(marker, 10)


def test_elastic_restart_on_fewer_nodes(cluster, tmp_path):
    marker = "elastic-" + uuid.uuid4().hex[:8]
    names = [n.name for n in cluster.fc.nodes[:2]]
    y = tmp_path / "job.yaml"
    y.write_text("name: elastic\nnodes: 2\ngpus_per_node: 4\nretries: 1\n"
                 "include_nodes: %s\nelastic: {min_nodes: 1}\ncommand: [%s, -c, %s, %s]\n"
                 % (",".join(names), PY, json_str(NODE_KILL), marker))
    job = cluster.submit(str(y))
    i, victim, stopped_after, j = kill_and_wait_restart(cluster, job)
    try:
        assert stopped_after < 5, "the surviving rank lived %.1f s after NODE_FAIL" % stopped_after
        assert j["state"] == "COMPLETED", j
        assert [x["node"] for x in j["placement"]] == [n for n in names if n != victim], j
        assert j["world_size"] == 4 and j["nodes"] == 1 and j["restarts"] == 1, j
        logs = cluster.logs(job)
        assert "rank 0 resumed from step-7.ckpt: step 7 (world 4)" in logs, logs
    finally:
        cluster.start_agent(i)
        cluster.wait_nodes_up()
    wait_no_procs(marker, 10)


def json_str(s):
    """A YAML flow scalar for s (JSON's string syntax is YAML's double-quoted one)."""
    import json
    return json.dumps(s)
