"""Protocol versions are checked, never silently mixed (lib/protocol.h, "Versions").

A dtagent and a dtsched built with another DT_PROTOCOL_VERSION (99, built here with
-DDT_PROTOCOL_VERSION=99) meet this build's dtctl and dtsched on a one-node `host: local`
cluster (conftest.LocalCluster: no fake cluster, no lock):

  - dtsched refuses the old agent's heartbeats and says so: `dtctl nodes` lists it
    REFUSED with both versions and the fix; a job that cannot be placed names the
    refused agent and the fix; the agent logs the refusal with the fix;
  - the agent refuses a request of this build (426, both versions, the fix);
  - `dtctl init` (the fix it names) puts this build's agent back and the node comes UP;
  - a dtsched of another version: read-only commands stop with exit 3 and the fix, and
    `dtctl head start` restarts it as this build's.
"""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PROGRAMS, REPO, LocalCluster, stop_home_daemons

OTHER = 99
FIX = "run 'dtctl init'"


def dtctl_bin() -> Path:
    """This build's programs (conftest's dtctl_bin fixture, read at call time)."""
    return Path(os.environ.get("DTCTL_BIN") or REPO / "bin").resolve()


@pytest.fixture(scope="module")
def other_build():
    """dtagent, dtsched and dtshim of protocol 99 (-O0: only the number matters)."""
    out = REPO / "build" / "proto99" / "bin"
    env = dict(os.environ, CFLAGS="-DDT_PROTOCOL_VERSION=%d -O0" % OTHER)
    targets = ["build/proto99/bin/%s" % p for p in ("dtagent", "dtsched", "dtshim")]
    p = subprocess.run(["make", "--no-print-directory", "-j2", "BUILD=proto99"] + targets,
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, "building the protocol-%d programs failed:\n%s%s" % (
        OTHER, p.stdout[-3000:], p.stderr[-3000:])
    return out


def bin_dir(tmp: Path, agent_from: Path, sched_from: Path) -> Path:
    """A program folder as an install has it: this build's dtctl, dttrain and dtshim,
    dtagent and dtsched from the folders named, templates beside."""
    d = tmp / "inst" / "bin"
    d.mkdir(parents=True, exist_ok=True)
    src = {"dtagent": agent_from, "dtsched": sched_from}
    for name in PROGRAMS:
        if not (src.get(name, dtctl_bin()) / name).exists():
            continue            # dtctl-full of a build without the static front
        # a copy and a rename: the program may be running (ETXTBSY on a write)
        shutil.copy2(src.get(name, dtctl_bin()) / name, d / (name + ".new"))
        os.replace(d / (name + ".new"), d / name)
    if not (d.parent / "templates").exists():
        shutil.copytree(REPO / "templates", d.parent / "templates")
    return d


def nodes_json(c):
    p = c.dtctl("nodes", "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def wait_refused(c, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = nodes_json(c).get("refused", [])
        if r:
            return r
        time.sleep(0.2)
    pytest.fail("dtsched never listed the protocol-%d agent as refused: %s\nagent.log:\n%s\n"
                "dtsched.log:\n%s" % (OTHER, nodes_json(c), c.log("agent.log"),
                                     c.log("dtsched.log")))


def test_old_agent_refused_then_init_fixes_it(other_build, tmp_path):
    d = bin_dir(tmp_path, other_build, dtctl_bin())
    c = LocalCluster(d / "dtctl", tmp_path)
    try:
        for what in (("head", "start"), ("agents", "start")):
            p = c.dtctl(*what)
            assert p.returncode == 0, "dtctl %s: %s%s" % (" ".join(what), p.stdout, p.stderr)
        # dtsched refuses the agent's heartbeats, remembers it, and says why
        (r,) = wait_refused(c)
        assert r["name"] == "local" and r["protocol"] == OTHER, r
        assert not [n for n in nodes_json(c)["nodes"] if n["state"] == "UP"]
        p = c.dtctl("nodes")
        assert p.returncode == 0, p.stderr
        line = [l for l in p.stdout.splitlines() if l.startswith("local ")]
        assert line and "REFUSED" in line[0] and "protocol %d" % OTHER in line[0], p.stdout
        assert FIX in p.stdout, p.stdout
        # the agent's log says the same
        log = c.log("agent.log")
        assert "heartbeat to dtsched failed" in log and "protocol" in log and FIX in log, log

        # a job cannot be placed, and the reason names the refused agent and the fix
        p = c.dtctl("run", "-n", "1", "--detach", "--", "true")
        out = p.stdout + p.stderr
        if p.returncode == 0:      # queued: the pending reason says it
            job = json.loads(c.dtctl("ps", "--all", "--json").stdout)["jobs"][0]
            out = job.get("reason") or ""
            c.dtctl("cancel", job["id"])
        assert "refused for another protocol version" in out and "local: %d" % OTHER in out, out
        assert FIX in out, out

        # the agent refuses a request of this build (426: both versions and the fix)
        port = int([l for l in (c.home / "cluster.yaml").read_text().split("agent: {port: ")
                    if l][1].split(",")[0])
        p = c.dtctl("api", "--status", "--agent", "127.0.0.1:%d" % port, "GET", "/v1/tasks")
        assert p.returncode == 1, p.stdout + p.stderr
        assert p.stdout.startswith("426"), p.stdout
        assert "dtagent speaks dtctl protocol %d" % OTHER in p.stdout and FIX in p.stdout, p.stdout

        # the fix it names: init with this build's programs re-pushes the agent
        bin_dir(tmp_path, dtctl_bin(), dtctl_bin())
        p = c.dtctl("init", c.home / "cluster.yaml", timeout=120)
        assert p.returncode == 0, "init: %s%s\nagent.log:\n%s" % (p.stdout, p.stderr,
                                                               c.log("agent.log"))
        c.wait_up()
        assert not nodes_json(c).get("refused"), nodes_json(c)
        p = c.dtctl("run", "-n", "1", "--", "true", timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        c.stop()
        stop_home_daemons(c.home)


def test_old_dtsched_refused_and_restarted(other_build, tmp_path):
    d = bin_dir(tmp_path, dtctl_bin(), other_build)
    c = LocalCluster(d / "dtctl", tmp_path)
    try:
        p = c.dtctl("head", "start")
        assert p.returncode == 0, p.stdout + p.stderr
        # read-only commands never restart the head: they stop with the fix
        p = c.dtctl("nodes")
        assert p.returncode == 3, p.stdout + p.stderr
        assert "protocol %d" % OTHER in p.stderr and FIX in p.stderr, p.stderr
        p = c.dtctl("nodes", "--json")
        assert p.returncode == 3 and FIX in p.stderr, p.stdout + p.stderr
        # `dtctl head start` restarts a dtsched of another build as this dtctl's
        bin_dir(tmp_path, dtctl_bin(), dtctl_bin())
        p = c.dtctl("head", "start")
        assert p.returncode == 0, p.stdout + p.stderr
        assert "speaks protocol %d" % OTHER in p.stderr and "restarting" in p.stderr, p.stderr
        p = c.dtctl("nodes", "--json")
        assert p.returncode == 0, p.stdout + p.stderr
        assert "nodes" in json.loads(p.stdout)
    finally:
        c.stop()
        stop_home_daemons(c.home)
