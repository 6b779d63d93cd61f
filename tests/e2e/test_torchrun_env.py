"""The agent launcher's rank environment against torchrun's own, for 2 nodes x 2 ranks.

torchrun (torch.distributed.run from Debian's python3-torch) starts the same script with
the same shape: two launchers with a static rendezvous on this machine (--nnodes 2,
--node_rank 0/1).  Every variable torchrun adds to a worker's environment must be in
dtctl's rank environment with the same value, except the documented ones (docs/run.md):
MASTER_ADDR/MASTER_PORT (another address and a free port), TORCHELASTIC_RUN_ID (the job
id; torchrun's default is "none"), TORCHELASTIC_ERROR_FILE (a path of each launcher's
own), TORCHELASTIC_USE_AGENT_STORE (torchrun's agent hosts the TCPStore; under dtctl rank
0 does, so it must not be set).
"""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import HeadCluster, free_ports, have_python_module

HEAD_PORT = 18071
AGENT_PORT = 18070
EXCEPT = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE",
          "TORCHELASTIC_USE_AGENT_STORE"}
DUMP = r'''
import json, os, sys
base = set(json.loads(os.environ.get("BASE_KEYS", "[]")) + ["BASE_KEYS"])
print("ENV " + json.dumps({k: v for k, v in os.environ.items() if k not in base}, sort_keys=True), flush=True)
'''


def have_torch():
    return have_python_module("torch.distributed.run")


def torchrun_envs(script, tmp):
    """{rank: env added by torchrun} for 2 nodes x 2 processes, both launchers here."""
    base = json.dumps(list(os.environ))
    port = free_ports(1)[0]
    procs = []
    for node in (0, 1):
        # Debian's torch 1.13 on Python 3.11 cannot parse --redirects 0 (Std.NONE is no
        # longer iterated): redirect to a log dir and tee stdout, which works
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                "--node_rank", str(node), "--nproc_per_node", "2", "--master_addr",
                "127.0.0.1", "--master_port", str(port), "--redirects", "1", "--tee", "1",
                "--log_dir", str(tmp / ("tr%d" % node)), str(script)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True, env=dict(os.environ, BASE_KEYS=base)))
    out = ""
    for p in procs:
        o, _ = p.communicate(timeout=120)
        assert p.returncode == 0, o
        out += o
    envs = {}
    for m in re.finditer(r"ENV (\{.*\})", out):
        e = json.loads(m.group(1))
        envs[int(e["RANK"])] = e
    assert sorted(envs) == [0, 1, 2, 3], out
    return envs


class Ctx(HeadCluster):
    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=0, tag="torchrun",
                         dead_after_ms=3000)


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    fc = fake_cluster(2)
    ctx = Ctx(fc, dtctl_bin, tmp_path_factory.mktemp("torchrun"))
    with ctx.running():
        yield ctx


@pytest.mark.skipif(not have_torch(), reason="python3-torch not installed (make deps)")
def test_rank_env_matches_torchrun(cluster, tmp_path):
    script = cluster.shared_file("torchrun-env", "dump.py", DUMP)
    want = torchrun_envs(script, tmp_path)

    # dtctl: the rank's whole environment (extra variables are fine: DT_*, the agent's)
    p = cluster.dtctl("run", "-n", 2, "-p", 2, "--name", "torchrun-env", "--",
                      "/usr/bin/python3", script, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    got = {}
    for m in re.finditer(r"ENV (\{.*\})", p.stdout):
        e = json.loads(m.group(1))
        got[int(e["RANK"])] = e
    assert sorted(got) == [0, 1, 2, 3], p.stdout
    job = re.search(r"job (j-\d+)", p.stderr).group(1)
    for r in range(4):
        missing = sorted(set(want[r]) - set(got[r]) - EXCEPT)
        assert not missing, "rank %d: torchrun sets %s, dtctl does not" % (r, missing)
        differ = {k: (want[r][k], got[r][k]) for k in set(want[r]) - EXCEPT
                  if want[r][k] != got[r][k]}
        assert not differ, "rank %d: (torchrun, dtctl) differ: %s" % (r, differ)
        assert "TORCHELASTIC_USE_AGENT_STORE" not in got[r]
        assert got[r]["TORCHELASTIC_RUN_ID"] == job
        # DeepSpeed's launcher's own three (deepspeed/launcher/launch.py: node rank,
        # node count, ranks on this node), rank r on node r // 2
        assert (got[r]["CROSS_RANK"], got[r]["CROSS_SIZE"], got[r]["LOCAL_SIZE"]) == \
            (str(r // 2), "2", "2"), got[r]
        assert got[r]["TORCHELASTIC_ERROR_FILE"].endswith("/jobs/%s/ranks/%d.error.json" % (job, r))
