"""UDP beacons (lib/protocol.h "Beacons", docs/agents.md) with local processes only: a
dtsched and a real dtagent on loopback, each with a scratch home (no fake cluster).

An idle agent keeps its node UP on beacons with few HTTP heartbeats; kill -9 of the agent
still takes the node DOWN within dead_after; a restarted dtsched resyncs the agent at
once; with every beacon dropped (DTSCHED_TEST_DROP_BEACONS=1: a firewall eating UDP) the
agent falls back to HTTP and the node never goes DOWN; a task's exit still reaches
dtsched within a second, and beacons resume after it."""

import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from dtapi import DtApi

HB_MS = 200


def free_port(taken=()):
    """A port free for TCP and UDP alike (dtsched takes both), none of `taken` (the kernel
    may hand out a port just closed again: the head's and the agent's were once the same)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port in taken:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                u.bind(("0.0.0.0", port))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port")


class Local:
    """One dtsched and one dtagent (node "n1") sharing a fresh secret."""

    def __init__(self, bin_dir, tmp, dead_after_ms):
        self.bin = Path(bin_dir)
        self.head_home, self.agent_home = tmp / "head", tmp / "agent"
        secret = os.urandom(32).hex() + "\n"
        for h in (self.head_home, self.agent_home):
            h.mkdir(mode=0o700)
            (h / "secret").write_text(secret)
            (h / "secret").chmod(0o600)
        self.secret = secret.strip()
        self.port = free_port()
        self.agent_port = free_port(taken=(self.port,))
        self.dead_after_ms = dead_after_ms
        self.head_env = None

    # --- dtsched
    def start_head(self, **env):
        self.head_env = dict(os.environ, DTCTL_HOME=str(self.head_home), **env)
        p = subprocess.run([str(self.bin / "dtsched"), "--daemon", "--port", str(self.port),
                            "--dead-after-ms", str(self.dead_after_ms), "--heartbeat-ms",
                            str(HB_MS)], env=self.head_env, capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 0, "dtsched --daemon failed: %s" % p.stderr

    def stop_head(self):
        subprocess.run([str(self.bin / "dtsched"), "--stop"], env=self.head_env,
                       capture_output=True, timeout=30)

    def head(self):
        return DtApi("127.0.0.1", self.port, self.secret)

    def metrics(self, port=None):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % (port or self.port),
                                    timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            m = re.match(r'^(\w+)(\{[^}]*\})? (\d+)$', line)
            if m:
                out[m.group(1) + (m.group(2) or "")] = int(m.group(3))
        return out

    def beacons(self, result="accepted"):
        return self.metrics().get('dtsched_beacons_total{result="%s"}' % result, 0)

    def http_heartbeats(self):
        return self.metrics()["dtsched_heartbeats_total"]

    def node(self):
        st, body = self.head().request("GET", "/v1/nodes/n1")
        return body["node"] if st == 200 else None

    # --- dtagent
    def start_agent(self):
        p = subprocess.run([str(self.bin / "dtagent"), "--daemon", "--home", str(self.agent_home),
                            "--port", str(self.agent_port), "--name", "n1", "--gpus", "2",
                            "--head", "127.0.0.1:%d" % self.port, "--heartbeat-ms", str(HB_MS)],
                           capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, DTAGENT_NO_CGROUP="1"))
        assert p.returncode == 0, "dtagent --daemon failed: %s" % p.stderr

    def agent_pid(self):
        return int((self.agent_home / "agent.pid").read_text().split()[0])

    def agent(self):
        return DtApi("127.0.0.1", self.agent_port, self.secret)

    def agent_metric(self, name):
        return self.metrics(self.agent_port).get(name, 0)

    def stop_agent(self):
        subprocess.run([str(self.bin / "dtagent"), "--stop", "--home", str(self.agent_home)],
                       capture_output=True, timeout=30)

    def wait(self, what, cond, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = cond()
            if v:
                return v
            time.sleep(0.05)
        pytest.fail("timed out after %.1f s waiting for %s" % (timeout, what))


@pytest.fixture
def local(dtctl_bin, tmp_path):
    made = []

    def make(dead_after_ms=3000, **head_env):
        lc = Local(dtctl_bin, tmp_path, dead_after_ms)
        lc.start_head(**head_env)
        lc.start_agent()
        made.append(lc)
        lc.wait("node n1 UP", lambda: (lc.node() or {}).get("state") == "UP", 10)
        return lc
    yield make
    for lc in made:
        lc.stop_agent()
        lc.stop_head()


def test_idle_agent_stays_up_on_beacons(local):
    """Idle: mostly beacons, an HTTP heartbeat at least every dead_after/2, never SUSPECT."""
    lc = local(dead_after_ms=3000)
    lc.wait("beacons accepted", lambda: lc.beacons() > 0, 5)
    b0, h0, t0 = lc.beacons(), lc.http_heartbeats(), time.time()
    states = set()
    while time.time() - t0 < 4:
        n = lc.node()
        states.add(n["state"])
        assert n["heartbeat_age_ms"] <= lc.dead_after_ms // 2, n
        time.sleep(0.1)
    beacons, http = lc.beacons() - b0, lc.http_heartbeats() - h0
    beats = 4000 / HB_MS
    assert states == {"UP"}, states
    assert beacons >= beats / 2, "only %d beacons accepted in %d beats" % (beacons, beats)
    assert 2 <= http <= beats / 3, "%d HTTP heartbeats in %d beats" % (http, beats)
    for why in ("bad_mac", "stale", "replay", "malformed", "mismatch", "node_down"):
        assert lc.beacons(why) == 0, why
    assert lc.node()["beacons"]["accepted"] >= beacons
    assert lc.agent_metric('dtagent_heartbeats_total{node="n1",result="beacon"}') >= beacons


def test_node_down_within_dead_after_when_agent_killed(local):
    lc = local(dead_after_ms=2000)
    lc.wait("beacons accepted", lambda: lc.beacons() > 0, 5)
    os.kill(lc.agent_pid(), signal.SIGKILL)
    t0 = time.time()
    lc.wait("node DOWN", lambda: lc.node()["state"] == "DOWN", lc.dead_after_ms / 1000 + 1.0)
    took = time.time() - t0
    assert took >= lc.dead_after_ms / 1000 - 0.5, "DOWN after %.2f s: too early" % took


def test_dtsched_restart_resyncs_agent(local):
    """After a restart dtsched knows nothing an agent's beacons can match: it answers with
    a resync and the agent sends its HTTP heartbeat at once, not dead_after/2 later.
    (dtsched is restarted just after an HTTP heartbeat, so the agent's next beat is a
    beacon; should a task event make it an HTTP one, the restart is tried again.)"""
    lc = local(dead_after_ms=10000)
    lc.wait("beacons accepted", lambda: lc.beacons() > 0, 8)
    resynced = 0
    for attempt in range(3):
        h = lc.http_heartbeats()
        lc.wait("an HTTP heartbeat", lambda: lc.http_heartbeats() > h, 8)
        lc.stop_head()
        lc.start_head()
        t0 = time.time()
        n = lc.wait("a heartbeat after the restart",
                    lambda: (lambda n: n if n and n["heartbeat_age_ms"] is not None
                             else None)(lc.node()), 3)
        took = time.time() - t0
        assert took < 1.5, "first heartbeat %.2f s after the restart (no resync?)" % took
        assert n["state"] == "UP", n
        assert n["gpus_total"] == 2 and n["mem_total"] > 0, n
        resynced = lc.metrics()["dtsched_beacon_resyncs_total"]
        if resynced:
            break
    assert resynced >= 1, "no resync in 3 restarts"
    assert lc.agent_metric('dtagent_beacon_resyncs_total{node="n1"}') >= 1
    # and beacons are taken again afterwards
    lc.wait("beacons accepted after the restart", lambda: lc.beacons() > 0, 8)
    assert lc.node()["state"] == "UP"


def test_dropped_beacons_fall_back_to_http(local):
    """A firewall eating UDP costs CPU, never a node: the agent notices that dtsched saw
    none of its beacons, warns once and sends HTTP heartbeats every beat."""
    lc = local(dead_after_ms=3000, DTSCHED_TEST_DROP_BEACONS="1")
    t0 = time.time()
    states = set()
    while time.time() - t0 < 5:
        states.add(lc.node()["state"])
        time.sleep(0.1)
    assert "DOWN" not in states, states
    assert lc.beacons("ignored") >= 3
    assert lc.beacons() == 0
    log = (lc.agent_home / "agent.log").read_text()
    assert log.count("received none of our last UDP beacons") == 1, log
    # HTTP every beat now
    h0 = lc.http_heartbeats()
    time.sleep(2)
    assert lc.http_heartbeats() - h0 >= 2000 / HB_MS * 0.6
    assert lc.node()["state"] == "UP"


def test_task_exit_reaches_dtsched_within_1s_and_beacons_resume(local):
    lc = local(dead_after_ms=10000)
    lc.wait("beacons accepted", lambda: lc.beacons() > 0, 5)
    st, body = lc.agent().request("POST", "/v1/tasks", {"id": "quick", "argv": ["sleep", "0.3"]})
    assert st == 201, body
    t0 = time.time()

    def at_head():
        st, body = lc.head().request("GET", "/v1/tasks")
        return [t for t in body["tasks"] if t["id"] == "quick" and t["state"] == "exited"]
    lc.wait("the task's exit at dtsched", at_head, 3)
    took = time.time() - t0
    assert took < 0.3 + 1.0, "exit reached dtsched %.2f s after the start" % took
    b0 = lc.beacons()
    lc.wait("beacons after the task", lambda: lc.beacons() > b0 + 2, 5)
    assert lc.beacons("mismatch") == 0
