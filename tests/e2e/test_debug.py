"""Hang attribution (`dtctl debug`, docs/run.md "Hangs") on a 2-node fake cluster: dtsched
on the host, one dtagent per node, real mpirun and dttrain, real python3-torch gloo.

Covered: a 4-rank dttrain job (mpi launcher, 2 nodes x 2) whose rank 3 stops in data
loading at step 5 (--hang-rank 3:5:data): stall detection attributes it by itself
(events.log ATTRIBUTION line, `dtctl show`), and `dtctl debug` names rank 3, its node and
phase "data" while the others wait in the all-reduce; one whose rank 1 stops inside the
all-reduce (--hang-rank 1:5); one whose rank 1 is slow (--slow-rank), named slow, not hung;
a 2-rank Python gloo job whose rank 1 sleeps outside the collective: named, with its
Python frame; a shell job (no record: gdb's native stack); and `dtctl debug` of a job
that is not running (exit 1, clear message).
"""
import json
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import HeadCluster, have_python_module
from dtapi import DtApi, read_secret

HEAD_PORT = 18271
AGENT_PORT = 18270
TRAIN = ["--model=mlp", "--hidden=32", "--train-size=512", "--val-size=64", "--log-every=1",
         "--steps=100000", "--threads=1"]
SLEEPER = r'''
import os, time, torch, torch.distributed as dist

def load_batch():
    time.sleep(600)     # rank 1: stuck outside the collective

dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
print("first all-reduce done rank=%d" % dist.get_rank(), flush=True)
if dist.get_rank() == 1:
    load_batch()
dist.all_reduce(t)
'''


class Ctx(HeadCluster):
    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=0, tag="debug",
                         dead_after_ms=3000, dtctl_timeout=120)

    def show(self, job):
        p = self.dtctl("show", "--json", job)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["job"]

    def submit(self, *args):
        p = self.dtctl("run", "--detach", *args)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout.strip()

    def wait_for(self, job, pred, timeout, what):
        deadline = time.time() + timeout
        while True:
            j = self.show(job)
            if pred(j):
                return j
            assert j["state"] in ("PENDING", "RUNNING"), j
            if time.time() > deadline:
                raise AssertionError("job %s: no %s after %ss: %s" % (job, what, timeout, j))
            time.sleep(0.3)

    def debug(self, job):
        p = self.dtctl("debug", "--json", job)
        assert p.returncode == 0, p.stdout + p.stderr
        doc = json.loads(p.stdout)
        assert doc["schema"] == 1, doc
        return doc["hang"]

    def debug_until(self, job, pred, timeout=60):
        """`dtctl debug` again until its answer satisfies pred (ranks reach the hang at
        their own pace on a loaded machine); the last answer either way."""
        deadline = time.time() + timeout
        while True:
            h = self.debug(job)
            if pred(h) or time.time() > deadline:
                return h
            time.sleep(0.5)

    def cancel(self, job):
        self.dtctl("cancel", job)


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    fc = fake_cluster(2)
    if fc.mode != "netns":
        pytest.skip("mpirun across nodes needs distinct hostnames (fake cluster mode %s)"
                    % fc.mode)
    ctx = Ctx(fc, dtctl_bin, tmp_path_factory.mktemp("debug"))
    with ctx.running():
        yield ctx


def ranks_started(j, n):
    """every rank's record file exists (dttrain armed its SIGUSR2 dump)"""
    d = Path(j["job_dir"]) / "debug"
    return len(list(d.glob("*.dttrain"))) == n if d.is_dir() else False


def test_dttrain_rank_hung_in_data_loading(cluster):
    job = cluster.submit("-n", 2, "-p", 2, "--launcher", "mpi", "--stall-after", "4s",
                         "--name", "hang-data", "--trainer", "--", *TRAIN,
                         "--hang-rank=3:5:data")
    try:
        # stall detection attributes it by itself
        # (a stall while the ranks start up, on a loaded machine or under ASan, names
        # nobody: dtsched tries again while the stall lasts)
        j = cluster.wait_for(job, lambda j: (j.get("hang") or {}).get("culprits"), 90,
                             "automatic attribution")
        h = j["hang"]
        node2 = j["placement"][1]["node"]
        assert h["auto"] and h["verdict"] == "hung", h
        assert [c["rank"] for c in h["culprits"]] == [3], h
        assert h["culprits"][0]["node"] == node2 and h["culprits"][0]["phase"] == "data", h
        assert "ranks 0-2 wait in all-reduce #" in h["text"], h["text"]
        assert "rank 3 on node %s is in data" % node2 in h["text"], h["text"]
        events = (Path(j["job_dir"]) / "events.log").read_text()
        assert re.search(r"ATTRIBUTION .*rank 3 on node %s is in data" % re.escape(node2),
                         events), events
        assert events.index("STALLED") < events.index("ATTRIBUTION"), events
        p = cluster.dtctl("show", job)
        assert "hang:" in p.stdout and "found at a stall" in p.stdout, p.stdout

        # on demand: the same answer, and the evidence of every rank
        h = cluster.debug(job)
        assert not h["auto"] and [c["rank"] for c in h["culprits"]] == [3], h
        by_rank = {r["rank"]: r for r in h["ranks"]}
        assert sorted(by_rank) == [0, 1, 2, 3], h
        assert all(r["source"] == "dttrain" for r in h["ranks"]), h
        assert by_rank[3]["phase"] == "data" and by_rank[3]["step"] == 5, by_rank[3]
        assert by_rank[3]["node"] == node2 and by_rank[3]["cpu_pct"] < 5, by_rank[3]
        seqs = {by_rank[r]["seq"] for r in (0, 1, 2)}
        assert len(seqs) == 1 and by_rank[3]["seq"] < seqs.pop(), h
        p = cluster.dtctl("debug", job)
        assert p.returncode == 0 and "rank 3 on node %s" % node2 in p.stdout, p.stdout
        assert "RANK" in p.stdout and "all-reduce" in p.stdout, p.stdout
    finally:
        cluster.cancel(job)


def test_dttrain_rank_hung_inside_allreduce(cluster):
    job = cluster.submit("-n", 2, "-p", 2, "--launcher", "mpi", "--name", "hang-ar",
                         "--trainer", "--", *TRAIN, "--hang-rank=1:5")
    try:
        j = cluster.wait_for(job, lambda j: ranks_started(j, 4), 60, "ranks")
        # until rank 1 reached its hang at step 5 and the others wait for it
        h = cluster.debug_until(job, lambda h: h["verdict"] == "hung" and any(
            r["rank"] == 1 and r.get("step") == 5 for r in h["ranks"]))
        assert h["verdict"] == "hung" and [c["rank"] for c in h["culprits"]] == [1], \
            json.dumps(h, indent=1)
        c = h["culprits"][0]
        assert c["node"] == j["placement"][0]["node"], (c, j["placement"])
        r1 = next(r for r in h["ranks"] if r["rank"] == 1)
        assert r1["step"] == 5 and r1["phase"] == "all-reduce" and r1["cpu_pct"] < 5, r1
    finally:
        cluster.cancel(job)


def test_dttrain_slow_rank_is_slow_not_hung(cluster):
    job = cluster.submit("-n", 2, "-p", 2, "--launcher", "mpi", "--name", "slow",
                         "--trainer", "--", *TRAIN, "--slow-rank=2:300")
    try:
        j = cluster.wait_for(job, lambda j: ranks_started(j, 4), 60, "ranks")
        # until the others have waited for rank 2 a while
        h = cluster.debug_until(job, lambda h: h["verdict"] == "slow")
        assert h["verdict"] == "slow", h
        assert [c["rank"] for c in h["culprits"]] == [2], h
        assert h["culprits"][0]["node"] == j["placement"][1]["node"], h
        assert "no hang" in h["text"] and "rank 2 on node" in h["text"], h["text"]
    finally:
        cluster.cancel(job)


@pytest.mark.skipif(not have_python_module("torch.distributed"),
                    reason="python3-torch not installed (make deps)")
def test_python_gloo_rank_sleeping_outside_collective(cluster):
    script = cluster.shared_file("debug", "sleeper.py", SLEEPER)
    job = cluster.submit("-n", 2, "-p", 1, "--name", "gloo-sleep", "--",
                         "/usr/bin/python3", script)
    try:
        j = cluster.wait_for(job, lambda j: j["state"] == "RUNNING" and (
            Path(j["job_dir"]) / "logs" / "1.log").exists() and "first all-reduce done" in
            (Path(j["job_dir"]) / "logs" / "1.log").read_text(), 90, "first all-reduce")
        # until rank 0 waits in the second all-reduce
        h = cluster.debug_until(job, lambda h: any(
            r["rank"] == 0 and r.get("in_collective") for r in h["ranks"]))
        assert h["verdict"] == "hung" and [c["rank"] for c in h["culprits"]] == [1], h
        c = h["culprits"][0]
        assert c["node"] == j["placement"][1]["node"], (c, j["placement"])
        assert c["frames"][0] == "load_batch (debug/sleeper.py:5)", c
        r0 = next(r for r in h["ranks"] if r["rank"] == 0)
        assert r0["source"] == "python" and r0["in_collective"], r0
        assert r0["phase"] == "all_reduce", r0
        p = cluster.dtctl("debug", job)
        assert "load_batch (debug/sleeper.py:5)" in p.stdout, p.stdout
    finally:
        cluster.cancel(job)


@pytest.mark.skipif(not shutil.which("gdb"), reason="gdb not installed (make deps)")
def test_native_rank_stack_from_gdb(cluster):
    """Ranks that arm nothing (a shell loop and sleep): the sleeping one is idle while the
    other spins; its native stack comes from gdb."""
    job = cluster.submit("-n", 2, "-p", 1, "--name", "native", "--", "sh", "-c",
                         'if [ "$RANK" = 1 ]; then exec sleep 600; fi; while :; do :; done')
    try:
        cluster.wait_for(job, lambda j: j["state"] == "RUNNING", 30, "start")
        # until rank 1 is in its sleep (not still the shell) and rank 0 spins
        h = cluster.debug_until(job, lambda h: [c["rank"] for c in h["culprits"]] == [1] and
                                any(r["rank"] == 1 and r.get("comm") == "sleep"
                                    for r in h["ranks"]))
        assert [c["rank"] for c in h["culprits"]] == [1], json.dumps(h, indent=1)
        r1 = next(r for r in h["ranks"] if r["rank"] == 1)
        assert r1["source"] == "native" and r1["comm"] == "sleep", json.dumps(r1)
        assert any("nanosleep" in f for f in r1["frames"]), r1
        assert "idle while the others spin" in h["text"], h["text"]
    finally:
        cluster.cancel(job)


def test_debug_of_a_job_not_running(cluster):
    p = cluster.dtctl("run", "-n", 1, "-p", 1, "--", "true")
    assert p.returncode == 0, p.stderr
    job = re.search(r"job (j-\d+) submitted", p.stderr).group(1)
    p = cluster.dtctl("debug", job)
    assert p.returncode == 1 and "not running" in p.stderr, (p.returncode, p.stderr)
    p = cluster.dtctl("debug", "j-999999")
    assert p.returncode == 2 and "no job" in p.stderr, (p.returncode, p.stderr)
    p = cluster.dtctl("debug", "--last", job)
    assert p.returncode == 1 and "no attribution" in p.stderr, p.stderr


def test_debug_of_120_processes_keeps_the_agent_answering(cluster):
    """A rank forks 120 processes with distinct RANK= (issue 26, B5).  Two debug samplings
    of the job asked at once: one runs, the other is refused (409, one at a time per job);
    the one that runs attaches gdb to at most 8 of them (the rest "not sampled"); and
    GET /v1/status of that agent answers in milliseconds while it runs."""
    job = cluster.submit("-n", 1, "-p", 1, "--name", "forker", "--", "sh", "-c",
                         'i=0; while [ $i -lt 120 ]; do RANK=$((1000+i)) sleep 6001 & '
                         'i=$((i+1)); done; wait')
    try:
        j = cluster.wait_for(job, lambda j: j["state"] == "RUNNING", 30, "start")
        name = j["placement"][0]["node"]
        i = next(k for k in range(1, cluster.fc.n + 1) if cluster.fc.node(k).name == name)
        api = DtApi(cluster.fc.node(i).addr, cluster.port(i), read_secret(str(cluster.home)),
                    timeout=60)
        deadline = time.time() + 30
        while len(subprocess.run(["pgrep", "-f", "sleep 6001"], capture_output=True,
                                 text=True).stdout.split()) < 120:
            assert time.time() < deadline
            time.sleep(0.2)
        out = []

        def sample():
            out.append(api.request("POST", "/v1/debug", {"job_id": job, "sample_ms": 1000}))

        threads = [threading.Thread(target=sample) for _ in range(2)]
        for t in threads:
            t.start()
        worst, n = api.timed_status(lambda: any(t.is_alive() for t in threads))
        for t in threads:
            t.join()
        assert sorted(st for st, _ in out) == [200, 409], out
        body = next(b for st, b in out if st == 200)
        refused = next(b for st, b in out if st == 409)
        assert "already running" in refused["error"], refused
        ranks = body["ranks"]
        assert len(ranks) >= 120, len(ranks)
        native = [r for r in ranks if r["source"] == "native" and r["frames"]]
        skipped = [r for r in ranks if "not sampled" in r.get("native_error", "")]
        assert len(native) <= 8 and len(skipped) >= len(ranks) - 8, (len(native), len(skipped))
        assert worst < 1.0, "GET /v1/status took %.3f s during the sampling (%d asked)" % (
            worst, n)
    finally:
        cluster.cancel(job)
