#!/usr/bin/python3
"""bench_agent.py - short tasks through dtagent vs `ssh node true` vs pdsh.

On a 4-node fake cluster (tests/cluster/fakecluster): start one dtagent per node,
then run --tasks short tasks (`true`) spread evenly over the nodes, one client
stream per node (start, then wait for the exit code), and the same through
`ssh node true` (OpenSSH, one connection per command, like a launcher script) and
`pdsh -w node true` when pdsh is installed.  Prints tasks/s and the ratio.

    bench/bench_agent.py [--bin build/dev-agent/bin] [--tasks 1000] [--ssh-tasks 80]
"""
import argparse
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from conftest import FakeCluster, FAKECLUSTER, askpass_env  # noqa: E402
from dtapi import DtApi  # noqa: E402

PORT = 17870


def run_streams(n_nodes, total, fn):
    """fn(node_index, count) per node in parallel; returns wall seconds."""
    per = [total // n_nodes + (1 if i < total % n_nodes else 0) for i in range(n_nodes)]
    errs = []

    def worker(i):
        try:
            fn(i + 1, per[i])
        except Exception as e:  # noqa: BLE001
            errs.append(e)
    th = [threading.Thread(target=worker, args=(i,)) for i in range(n_nodes)]
    t0 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    if errs:
        raise errs[0]
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--ssh-tasks", type=int, default=80)
    ap.add_argument("--nodes", type=int, default=4)
    a = ap.parse_args()
    b = Path(a.bin).resolve()
    subprocess.run([str(FAKECLUSTER), "up", str(a.nodes)], check=True, capture_output=True)
    fc = FakeCluster.from_env()
    secret = secrets.token_hex(32)
    res = {"nodes": a.nodes, "mode": fc.mode}
    try:
        for i in range(1, a.nodes + 1):
            n = fc.node(i)
            fc.exec(i, "mkdir -p -m 700 /tmp/bh && umask 077 && echo %s > /tmp/bh/secret" % secret,
                    check=True)
            p = fc.exec(i, [str(b / "dtagent"), "--daemon", "--home", "/tmp/bh", "--bind", n.addr,
                            "--port", str(PORT + i), "--name", n.name])
            assert p.returncode == 0, p.stderr

        def agent_stream(i, count):
            api = DtApi(fc.node(i).addr, PORT + i, secret)
            ids = []
            for _ in range(count):
                st, body = api.request("POST", "/v1/tasks", {"argv": ["true"]})
                assert st == 201, body
                ids.append(body["task"]["id"])
            for t in ids:
                assert api.wait_task(t, timeout=60)["exit_code"] == 0

        wall = run_streams(a.nodes, a.tasks, agent_stream)
        res["agent_tasks"] = a.tasks
        res["agent_tasks_per_s"] = round(a.tasks / wall, 1)

        env = askpass_env(str(fc.askpass))

        def ssh_stream(i, count):
            for _ in range(count):
                subprocess.run(fc.ssh_argv(i, "true"), env=env, check=True,
                               stdin=subprocess.DEVNULL, capture_output=True)
        wall = run_streams(a.nodes, a.ssh_tasks, ssh_stream)
        res["ssh_tasks"] = a.ssh_tasks
        res["ssh_tasks_per_s"] = round(a.ssh_tasks / wall, 1)
        res["agent_vs_ssh"] = round(res["agent_tasks_per_s"] / res["ssh_tasks_per_s"], 1)

        pdsh = subprocess.run(["sh", "-c", "command -v pdsh"], capture_output=True, text=True).stdout.strip()
        if pdsh:
            hosts = ",".join(n.name for n in fc.nodes)
            penv = dict(env, PDSH_RCMD_TYPE="ssh", PDSH_SSH_ARGS="-F %s" % fc.ssh_config)
            rounds = max(1, a.ssh_tasks // a.nodes)
            t0 = time.perf_counter()
            for _ in range(rounds):
                subprocess.run([pdsh, "-w", hosts, "true"], env=penv, check=True,
                               stdin=subprocess.DEVNULL, capture_output=True)
            wall = time.perf_counter() - t0
            res["pdsh_tasks_per_s"] = round(rounds * a.nodes / wall, 1)
            res["agent_vs_pdsh"] = round(res["agent_tasks_per_s"] / res["pdsh_tasks_per_s"], 1)
        else:
            res["pdsh"] = "not installed"
        print(json.dumps(res, indent=2))
    finally:
        for i in range(1, a.nodes + 1):
            fc.exec(i, [str(b / "dtagent"), "--stop", "--home", "/tmp/bh"])
        subprocess.run([str(FAKECLUSTER), "down"], capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
