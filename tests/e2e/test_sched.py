"""dtsched and dtagents on a 3-node fake cluster: `dtctl nodes` shows the nodes UP
with their fake GPUs, tasks started and stopped through the agents' API are seen by
dtsched, drain/resume, and the faults: a node's network going down or its agent being
killed makes it DOWN within dead_after (its tasks lost: NODE_FAIL), and a kill -9 of
dtsched loses nothing (nodes and tasks match reality after the restart)."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from dtapi import DtApi, read_secret

HEAD_PORT = 17571
AGENT_PORT = 17570
DEAD_AFTER_MS = 3000


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    fc = fake_cluster(3)
    home = tmp_path_factory.mktemp("sched") / "home"
    home.mkdir(mode=0o700)
    env = dict(os.environ, DTCTL_HOME=str(home), DTCTL_NO_SYSTEMD="1")
    nodes = "\n".join("  - {host: %s, name: %s, gpus: 4}" % (n.addr, n.name) for n in fc.nodes)
    (home / "cluster.yaml").write_text(
        "cluster: t\nshared_dir: %s\nnodes:\n%s\nagent: {port: %d, heartbeat: 300ms, "
        "dead_after: %dms}\nhead: {address: %s, port: %d}\n"
        % (fc.shared, nodes, AGENT_PORT, DEAD_AFTER_MS, fc.host_addr, HEAD_PORT))
    ctx = Ctx(fc, dtctl_bin, home, env)
    assert ctx.dtctl("head", "start").returncode == 0
    secret = read_secret(str(home))
    for i in range(1, fc.n + 1):
        ctx.start_agent(i, secret)
    yield ctx
    for i in range(1, fc.n + 1):
        ctx.agent_cmd(i, "--stop")
    ctx.dtctl("head", "stop")


class Ctx:
    def __init__(self, fc, bin_dir, home, env):
        self.fc, self.bin, self.home, self.env = fc, Path(bin_dir), home, env

    @property
    def head(self):
        """Signed client for dtsched (the secret exists once `dtctl head start` ran)."""
        return DtApi("127.0.0.1", HEAD_PORT, read_secret(str(self.home)))

    def dtctl(self, *args, timeout=60):
        return subprocess.run([str(self.bin / "dtctl")] + list(args), capture_output=True,
                              text=True, timeout=timeout, env=self.env, stdin=subprocess.DEVNULL)

    def agent_home(self, i):
        return "/tmp/dtagent-home-%d" % i      # the node's private /tmp

    def port(self, i):
        # distinct ports keep loopback mode (one shared network) working too
        return AGENT_PORT + 10 * i

    def agent_cmd(self, i, *args):
        n = self.fc.node(i)
        return self.fc.exec(i, [str(self.bin / "dtagent"), "--home", self.agent_home(i),
                                "--name", n.name] + list(args))

    def start_agent(self, i, secret):
        n = self.fc.node(i)
        p = self.fc.exec(i, "mkdir -p -m 700 %s && umask 077 && printf '%%s\\n' %s > %s/secret"
                         % (self.agent_home(i), secret, self.agent_home(i)))
        assert p.returncode == 0, p.stderr
        p = self.agent_cmd(i, "--daemon", "--bind", n.addr, "--port", str(self.port(i)),
                           "--gpus", "4", "--heartbeat-ms", "300",
                           "--head", "%s:%d" % (self.fc.host_addr, HEAD_PORT))
        assert p.returncode == 0, "agent on %s: %s" % (n.name, p.stderr)

    def agent_api(self, i):
        return DtApi(self.fc.node(i).addr, self.port(i), read_secret(str(self.home)))

    def agent_pid(self, i):
        return int(self.fc.exec(i, "cat %s/agent.pid" % self.agent_home(i)).stdout)

    def nodes(self):
        p = self.dtctl("nodes", "--json")
        assert p.returncode == 0, p.stderr
        return {n["name"]: n for n in json.loads(p.stdout)["nodes"]}

    def wait_state(self, name, states, timeout):
        deadline = time.time() + timeout
        while True:
            n = self.nodes().get(name)
            if n and n["state"] in states:
                return n
            if time.time() > deadline:
                i = [x.index for x in self.fc.nodes if x.name == name][0]
                log = self.fc.exec(i, "tail -5 %s/agent.log" % self.agent_home(i)).stdout
                raise AssertionError("node %s not %s after %ss: %s\nits agent.log:\n%s"
                                     % (name, states, timeout, n, log))
            time.sleep(0.2)


def test_nodes_up_with_fake_gpus(cluster):
    for n in cluster.fc.nodes:
        cluster.wait_state(n.name, ["UP"], 10)
    nodes = cluster.nodes()
    for n in cluster.fc.nodes:
        assert nodes[n.name]["gpus_total"] == 4 and nodes[n.name]["gpus_used"] == 0
        assert nodes[n.name]["heartbeat_age_ms"] < 2000
    p = cluster.dtctl("nodes")
    assert p.returncode == 0
    for n in cluster.fc.nodes:
        assert any(l.split()[:3] == [n.name, "UP", "0/4"] for l in p.stdout.splitlines()), p.stdout


def test_tasks_through_agents_reach_dtsched(cluster):
    api = cluster.agent_api(2)
    name = cluster.fc.node(2).name
    st, body = api.request("POST", "/v1/tasks", {"id": "s-1", "argv": ["sleep", "60"],
                                                 "cuda_visible_devices": "1,3"})
    assert st == 201, body
    deadline = time.time() + 5
    while cluster.nodes()[name]["tasks_running"] != 1 and time.time() < deadline:
        time.sleep(0.1)
    n = cluster.nodes()[name]
    assert n["tasks_running"] == 1 and n["gpus_used"] == 2, n
    t0 = time.time()
    st, body = api.request("DELETE", "/v1/tasks/s-1", {"grace_ms": 1000})
    assert st == 202
    # the exit reaches dtsched within about a second (immediate heartbeat on change)
    while True:
        st, body = cluster.head.request("GET", "/v1/tasks")
        t = [x for x in body["tasks"] if x["id"] == "s-1"]
        if t and t[0]["state"] == "exited":
            break
        assert time.time() - t0 < 3, t
        time.sleep(0.05)
    assert t[0]["exit_code"] == 143 and t[0]["node"] == name


def test_gpus_of_a_task_of_no_job_are_not_placed_on(cluster):
    """GPUs 1 and 3 of a node held by a task started through the agent API (no job's):
    a 3-GPU job on that node waits while the task lives and runs once it ended, as the
    head learns it from the heartbeats (nodes.c node_derive, the agents' gpus_taken)."""
    api = cluster.agent_api(2)
    name = cluster.fc.node(2).name
    cluster.wait_state(name, ["UP"], 10)
    st, body = api.request("POST", "/v1/tasks", {"id": "s-2", "argv": ["sleep", "60"],
                                                 "cuda_visible_devices": "1,3"})
    assert st == 201, body
    deadline = time.time() + 5
    while cluster.nodes()[name]["gpus_used"] != 2:
        assert time.time() < deadline, cluster.nodes()[name]
        time.sleep(0.1)
    p = cluster.dtctl("run", "--detach", "--nodes", name, "-g", "3", "--", "true")
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()

    def show():
        return json.loads(cluster.dtctl("show", "--json", job).stdout)["job"]

    deadline = time.time() + 10
    while not (show().get("reason") or "").startswith("waiting"):
        assert time.time() < deadline, show()
        time.sleep(0.1)
    assert show()["state"] == "PENDING"
    st, body = api.request("DELETE", "/v1/tasks/s-2", {"grace_ms": 1000})
    assert st == 202
    deadline = time.time() + 15
    while (j := show())["state"] in ("PENDING", "RUNNING"):
        assert time.time() < deadline, j
        time.sleep(0.1)
    assert j["state"] == "COMPLETED", j


def test_drain_and_resume(cluster):
    name = cluster.fc.node(1).name
    p = cluster.dtctl("drain", name)
    assert p.returncode == 0 and "DRAINED" in p.stdout, p.stdout + p.stderr
    assert cluster.nodes()[name]["state"] == "DRAINED"
    p = cluster.dtctl("resume", name)
    assert p.returncode == 0
    assert cluster.nodes()[name]["state"] == "UP"
    assert cluster.dtctl("drain", "nosuchnode").returncode == 2


def test_head_refuses_bad_requests(cluster):
    before = cluster.nodes()
    body = json.dumps({"node": "intruder", "port": 1, "tasks": []}).encode()
    assert cluster.head.raw("POST", "/v1/heartbeat", body, {})[0] == 401
    h = cluster.head.signed_headers("POST", "/v1/heartbeat", body, timestamp=int(time.time()) - 300)
    assert cluster.head.raw("POST", "/v1/heartbeat", body, h)[0] == 401
    assert cluster.head.request("POST", "/v1/heartbeat", body=b"{bad")[0] == 400
    assert cluster.head.request("POST", "/v1/heartbeat", {"node": "x/y", "port": 1})[0] == 400
    assert cluster.head.request("GET", "/v1/nope")[0] == 404
    assert "intruder" not in cluster.nodes() and set(cluster.nodes()) == set(before)


def test_network_down_marks_node_down(cluster):
    if cluster.fc.mode != "netns":
        pytest.skip("needs per-node network namespaces (fake cluster mode %s)" % cluster.fc.mode)
    name = cluster.fc.node(3).name
    api = cluster.agent_api(3)
    st, body = api.request("POST", "/v1/tasks", {"id": "net-1", "argv": ["sleep", "60"]})
    assert st == 201
    deadline = time.time() + 20     # dtsched knows it runs before the cut
    while not [x for x in cluster.head.request("GET", "/v1/tasks")[1]["tasks"]
               if x["id"] == "net-1" and x["state"] == "running"]:
        assert time.time() < deadline, "dtsched never saw task net-1 running"
        time.sleep(0.1)
    t0 = time.time()
    assert cluster.fc.exec(3, "ip link set eth0 down").returncode == 0
    try:
        cluster.wait_state(name, ["DOWN"], 10)
        assert time.time() - t0 < 10
        st, body = cluster.head.request("GET", "/v1/tasks")
        t = [x for x in body["tasks"] if x["id"] == "net-1"][0]
        assert t["state"] == "lost" and t["reason"] == "NODE_FAIL", t
    finally:
        cluster.fc.exec(3, "ip link set eth0 up")
    # back: UP again, and the task is reported as it really is (still running)
    cluster.wait_state(name, ["UP"], 10)
    deadline = time.time() + 5
    while True:
        st, body = cluster.head.request("GET", "/v1/tasks")
        t = [x for x in body["tasks"] if x["id"] == "net-1"][0]
        if t["state"] == "running" or time.time() > deadline:
            break
        time.sleep(0.1)
    assert t["state"] == "running", t
    api.request("DELETE", "/v1/tasks/net-1", {"grace_ms": 0})


def test_agent_killed_marks_node_down_and_restart_readopts(cluster):
    i = 1
    name = cluster.fc.node(i).name
    api = cluster.agent_api(i)
    st, body = api.request("POST", "/v1/tasks", {"id": "k-1", "argv": ["sh", "-c", "sleep 4; exit 5"]})
    assert st == 201
    time.sleep(0.5)
    t0 = time.time()
    os.kill(cluster.agent_pid(i), signal.SIGKILL)
    cluster.wait_state(name, ["DOWN"], 10)
    assert time.time() - t0 < 10
    cluster.start_agent(i, read_secret(str(cluster.home)))
    cluster.wait_state(name, ["UP"], 10)
    t = api.wait_task("k-1", timeout=15)
    assert t["state"] == "exited" and t["exit_code"] == 5, t


def test_agent_stopped_is_down_at_once_and_pending_says_why(cluster):
    """`dtagent --stop` (what `dtctl agents stop` runs) tells dtsched: the node is DOWN with
    "agent stopped" as soon as the stop returns, not dead_after later; a job that needs it
    waits with a reason counting the DOWN node; the job running there goes on, and ends
    COMPLETED once the restarted agent adopts its rank (an `agents restart`)."""
    i = 3
    name = cluster.fc.node(i).name
    for n in cluster.fc.nodes:
        cluster.wait_state(n.name, ["UP"], 10)

    def show(job):
        return json.loads(cluster.dtctl("show", "--json", job).stdout)["job"]

    def wait(job, what, timeout=15):
        deadline = time.time() + timeout
        while True:
            j = show(job)
            if what(j):
                return j
            assert time.time() < deadline, j
            time.sleep(0.1)

    # stopped: DOWN at once, and a job that needs the node says why it waits
    p = cluster.agent_cmd(i, "--stop")
    assert p.returncode == 0, p.stderr
    n = cluster.nodes()[name]
    assert n["state"] == "DOWN" and n["down_reason"] == "agent stopped", n
    p = cluster.dtctl("nodes")
    assert "(down: agent stopped)" in [l for l in p.stdout.splitlines() if l.startswith(name)][0]
    p = cluster.dtctl("run", "--detach", "-n", "3", "-p", "1", "--", "true")
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    try:
        j = wait(job, lambda j: "available now" in (j.get("reason") or ""))
        assert j["state"] == "PENDING", j
        assert j["reason"].startswith("waiting for 3 node(s) with 1 free slot(s); 2 available "
                                      "now; 1 DOWN"), j["reason"]
    finally:
        cluster.dtctl("cancel", job)
    cluster.start_agent(i, read_secret(str(cluster.home)))
    n = cluster.wait_state(name, ["UP"], 10)
    assert n["down_reason"] is None, n

    # restarted (stop, start) under a running job: the job goes on and COMPLETES.  Apart
    # from the check above, which takes seconds on a loaded machine: a stopped node's
    # tasks are lost after dead_after (3 s here), as they should be
    release = Path(cluster.fc.shared) / ("stopped-%d" % os.getpid())
    p = cluster.dtctl("run", "--detach", "--nodes", name, "-p", "1", "--", "sh", "-c",
                      'while [ ! -e "$1" ]; do sleep 0.1; done', "sh", str(release))
    assert p.returncode == 0, p.stderr
    running = p.stdout.strip()
    wait(running, lambda j: j["state"] == "RUNNING")
    p = cluster.agent_cmd(i, "--stop")
    assert p.returncode == 0, p.stderr
    cluster.start_agent(i, read_secret(str(cluster.home)))
    cluster.wait_state(name, ["UP"], 10)
    assert show(running)["state"] == "RUNNING"
    release.write_text("")
    j = wait(running, lambda j: j["state"] not in ("PENDING", "RUNNING"))
    release.unlink()
    assert j["state"] == "COMPLETED", j


def test_dtsched_kill9_restart_matches_reality(cluster):
    api = cluster.agent_api(2)
    st, body = api.request("POST", "/v1/tasks", {"id": "r-1", "argv": ["sleep", "60"]})
    st, body = api.request("POST", "/v1/tasks", {"id": "r-2", "argv": ["sleep", "1"]})
    time.sleep(1)
    pid = int((cluster.home / "dtsched.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    time.sleep(1.5)      # r-2 ends while dtsched is down
    # read-only commands never start dtsched: `head start` does (docs/json.md, exit 3)
    p = cluster.dtctl("nodes")
    assert p.returncode == 3 and "cannot reach dtsched" in p.stderr, p.stdout + p.stderr
    assert cluster.dtctl("head", "start").returncode == 0
    nodes = cluster.nodes()
    assert set(n.name for n in cluster.fc.nodes) <= set(nodes)
    for n in cluster.fc.nodes:
        cluster.wait_state(n.name, ["UP"], 10)
    deadline = time.time() + 5
    while True:
        st, body = cluster.head.request("GET", "/v1/tasks")
        tasks = {t["id"]: t for t in body["tasks"]}
        if (tasks.get("r-1", {}).get("state") == "running" and
                tasks.get("r-2", {}).get("state") == "exited") or time.time() > deadline:
            break
        time.sleep(0.1)
    assert tasks["r-1"]["state"] == "running" and tasks["r-2"]["state"] == "exited", tasks
    assert tasks["r-2"]["exit_code"] == 0
    api.request("DELETE", "/v1/tasks/r-1", {"grace_ms": 0})


def test_no_ghost_task_after_a_network_cut(cluster):
    """A node cut off and restored (issue 26, A1), as its agent's heartbeats reach dtsched:
    seq 1 says task g-1 runs; then nothing (the cut) until the node is DOWN (g-1 lost,
    NODE_FAIL); back, seq 3 says g-1 ended during the cut, and dtsched asks for the whole
    table (want_full); then seq 2, sent before the cut and given up by the agent, arrives
    late (TCP delivered it after the cut): its "running" is the past and is not taken,
    so GET /v1/tasks never lists g-1 running again although nothing of it runs."""
    head = cluster.head
    base = {"node": "ghost", "port": 9, "agent_pid": 1, "version": "x",
            "agent_started_at": "2026-01-01T00:00:00.000000Z"}
    running = {"id": "g-1", "state": "running", "exit_code": None}
    ended = {"id": "g-1", "state": "exited", "exit_code": 0,
             "ended_at": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())}

    def beat(seq, tasks, full=False):
        st, body = head.request("POST", "/v1/heartbeat",
                                dict(base, seq=seq, tasks=tasks, full=full))
        assert st == 200, body
        return body

    def task():
        st, body = head.request("GET", "/v1/tasks")
        assert st == 200, body
        return [t for t in body["tasks"] if t["id"] == "g-1"][0]

    beat(1, [running], full=True)
    assert task()["state"] == "running"
    cluster.wait_state("ghost", ["DOWN"], 15)
    assert task()["state"] == "lost" and task()["reason"] == "NODE_FAIL", task()
    reply = beat(3, [ended])
    assert reply["want_full"] is True, reply
    assert task()["state"] == "exited", task()
    beat(2, [running])            # the delayed one
    assert task()["state"] == "exited", task()
    reply = beat(4, [ended], full=True)
    assert reply["want_full"] is False, reply
    assert task()["state"] == "exited", task()
    beat(5, [])
    assert task()["state"] == "exited", task()
