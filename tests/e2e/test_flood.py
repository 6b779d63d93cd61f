"""Connection floods: thousands of idle TCP connections (no request, no key needed) to
dtagent's or dtsched's port must not lock the signed API out (lib/httpd.c: connections
that sent no complete request are closed after a short timeout, and the oldest of them
are evicted when a peer, or all peers together, hold too many).

A one-node local cluster (`host: local`, direct exec, no sshd, so no fake cluster):
  - 2000 idle connections to the agent while `dtctl run -- echo hi` completes;
  - 5000 idle connections to dtsched (over its 4096 connection limit) while `dtctl ps`
    and `dtctl nodes` answer, and the agent's heartbeats keep the node UP;
  - idle connections are closed after the short timeout (5 s), not MHD's 30/60 s one;
  - the evictions are counted in /metrics.
The attacker connects from 127.0.0.1, like dtsched and the CLI: a per-address refusal
would lock them out too.  Every loop here is bounded in time and count."""

import json
import os
import resource
import selectors
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import free_ports, stop_home_daemons

FLOOD = 2000                # idle connections to the agent
HEAD_FLOOD = 5000           # to dtsched: more than its conn_limit (4096)
RUN_TIMEOUT = 20            # seconds: `dtctl run -- echo hi` under a flood
FRESH_TIMEOUT_S = 5         # lib/httpd.c DT_HTTPD_FRESH_TIMEOUT_MS


def raise_nofile(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip("RLIMIT_NOFILE hard limit %d < %d: cannot open the flood" % (hard, want))
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


class Flood:
    """n idle TCP connections to 127.0.0.1:port: connected, then silent."""

    def __init__(self, port: int, n: int = FLOOD, timeout: float = 30):
        self.socks = []
        sel = selectors.DefaultSelector()
        try:
            for _ in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                self.socks.append(s)
                err = s.connect_ex(("127.0.0.1", port))
                if err not in (0, 115):      # 115: EINPROGRESS
                    raise AssertionError("connect to port %d: errno %d" % (port, err))
                if err:
                    sel.register(s, selectors.EVENT_WRITE)
            # the kernel completes the handshake whether or not the server accepted
            deadline = time.monotonic() + timeout
            while sel.get_map() and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=1):
                    sel.unregister(key.fileobj)
            assert not sel.get_map(), "%d of %d connections to port %d still pending" % (
                len(sel.get_map()), n, port)
        except BaseException:
            self.close()
            raise
        finally:
            sel.close()

    def closed_by_server(self) -> int:
        """How many of the connections the server has closed (EOF or reset)."""
        n = 0
        for s in self.socks:
            try:
                if s.recv(1) == b"":
                    n += 1
            except BlockingIOError:
                pass
            except OSError:
                n += 1
        return n

    def close(self) -> None:
        for s in self.socks:
            s.close()
        self.socks = []


class Local:
    """A one-node local cluster: DTCTL_HOME, shared dir, dtsched and the local agent."""

    def __init__(self, bin_dir: Path, tmp: Path):
        self.exe = bin_dir / "dtctl"
        self.home = tmp / "home"
        self.home.mkdir(mode=0o700)
        self.shared = tmp / "shared"
        self.shared.mkdir()
        self.env = dict(os.environ, DTCTL_HOME=str(self.home), DTCTL_NO_SYSTEMD="1",
                        NO_COLOR="1")
        self.env.pop("DTCTL_CLUSTER", None)
        self.env.pop("DTCTL_SHARED_DIR", None)
        self.agent_port, self.head_port = free_ports(2)
        (self.home / "cluster.yaml").write_text(
            "cluster: flood\nshared_dir: %s\nnodes:\n  - {host: local, gpus: 0, slots: 2}\n"
            "agent: {port: %d, heartbeat: 500ms, dead_after: 5s}\nhead: {port: %d}\n"
            % (self.shared, self.agent_port, self.head_port))

    def dtctl(self, *args, timeout=60):
        return subprocess.run([str(self.exe)] + [str(a) for a in args], capture_output=True,
                              text=True, timeout=timeout, env=self.env,
                              stdin=subprocess.DEVNULL)

    def log(self, name):
        try:
            return (self.home / name).read_text(errors="replace")[-3000:]
        except OSError:
            return "(none)"

    def logs(self):
        return "\ndtsched.log:\n%s\nagent.log:\n%s" % (self.log("dtsched.log"),
                                                       self.log("agent.log"))

    def wait_up(self, timeout=20):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.dtctl("nodes", "--json", timeout=10)
            if last.returncode == 0 and any(n.get("name") == "local" and n.get("state") == "UP"
                                            for n in json.loads(last.stdout)["nodes"]):
                return
            time.sleep(0.2)
        pytest.fail("node 'local' not UP after %ds: %s%s%s"
                    % (timeout, last.stdout, last.stderr, self.logs()))

    def metrics(self, port):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            return r.read().decode()


@pytest.fixture(scope="module")
def local(dtctl_bin, tmp_path_factory):
    c = Local(dtctl_bin, tmp_path_factory.mktemp("flood"))
    try:
        for what in (("head", "start"), ("agents", "start")):
            p = c.dtctl(*what)
            assert p.returncode == 0, "dtctl %s: %s%s%s" % (" ".join(what), p.stdout,
                                                             p.stderr, c.logs())
        c.wait_up()
        # only now: the daemons keep the limits a real start gives them
        raise_nofile(FLOOD + HEAD_FLOOD + 512)
        yield c
    finally:
        c.dtctl("agents", "stop")
        c.dtctl("head", "stop")
        stop_home_daemons(c.home)


def run_hi(c):
    try:
        p = c.dtctl("run", "--name", "flood-hi", "--", "echo", "hi", timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail("`dtctl run -- echo hi` did not finish within %ds%s"
                    % (RUN_TIMEOUT, c.logs()))
    assert p.returncode == 0, "dtctl run: %s%s%s" % (p.stdout, p.stderr, c.logs())
    assert p.stdout.splitlines() == ["[local 0] hi"], p.stdout
    assert "COMPLETED" in p.stderr, p.stderr


def test_run_while_agent_flooded(local):
    flood = Flood(local.agent_port)
    try:
        run_hi(local)
        # evicted down to the agent's limit of idle connections per address (32)
        assert flood.closed_by_server() >= FLOOD - 256
    finally:
        flood.close()


def test_ps_and_nodes_while_sched_flooded(local):
    flood = Flood(local.head_port, n=HEAD_FLOOD)
    try:
        for args in (("ps", "--all"), ("nodes",)):
            try:
                p = local.dtctl(*args, timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                pytest.fail("`dtctl %s` did not answer within %ds%s"
                            % (" ".join(args), RUN_TIMEOUT, local.logs()))
            assert p.returncode == 0, "dtctl %s: %s%s" % (" ".join(args), p.stderr,
                                                         local.logs())
        p = local.dtctl("nodes", "--json", timeout=RUN_TIMEOUT)
        assert [n["state"] for n in json.loads(p.stdout)["nodes"]] == ["UP"], p.stdout
    finally:
        flood.close()


def test_run_while_both_flooded(local):
    floods = []
    try:
        floods.append(Flood(local.agent_port))
        floods.append(Flood(local.head_port, n=HEAD_FLOOD))
        run_hi(local)
    finally:
        for f in floods:
            f.close()


def test_idle_connection_closed_after_short_timeout(local):
    for port in (local.agent_port, local.head_port):
        flood = Flood(port, n=3)
        try:
            deadline = time.monotonic() + FRESH_TIMEOUT_S + 5
            while flood.closed_by_server() < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert flood.closed_by_server() == 3, \
                "idle connections to port %d open after %ds" % (port, FRESH_TIMEOUT_S + 5)
        finally:
            flood.close()


def closed_by_flood(metrics: str, name: str) -> int:
    for l in metrics.splitlines():
        if l.startswith(name + "{") and 'reason="flood"' in l:
            return int(l.split()[-1])
    raise AssertionError("no %s{reason=\"flood\"} in /metrics:\n%s" % (name, metrics))


def test_evictions_counted_in_metrics(local):
    # over the limits of idle connections per address: 32 for the agent, 512 for dtsched
    for port, n, name in ((local.agent_port, 600, "dtagent_connections_closed_total"),
                          (local.head_port, 2200, "dtsched_connections_closed_total")):
        before = closed_by_flood(local.metrics(port), name)
        flood = Flood(port, n=n)
        try:
            deadline = time.monotonic() + 10
            while flood.closed_by_server() < n // 4 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert flood.closed_by_server() >= n // 4
        finally:
            flood.close()
        assert closed_by_flood(local.metrics(port), name) - before >= n // 4
