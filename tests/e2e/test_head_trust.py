"""The head is trusted only when it proves it (issue 26, B7): replies are signed.

A local user may bind the head port while dtsched is stopped.  On a one-node `host: local`
cluster (conftest.LocalCluster: no fake cluster, no lock), such an impostor:

  - answers `dtctl ps` with an unsigned "no jobs": dtctl exits 3 naming the problem;
  - answers it with a reply dtsched really signed, but for another request (captured
    earlier and relayed): refused the same way (the signature binds the request's nonce);
  - answers the agent's heartbeats 200: the agent does not count that as delivered, so it
    keeps sending its ended task, says why in agent.log, and hands the end to the real
    dtsched once that is back (the job ends COMPLETED).
"""

import errno
import http.server
import json
import os
import socketserver
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import LocalCluster
from dtapi import PROTOCOL, DtApi, read_secret


class Impostor(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """An HTTP server on the head port that answers every request 200 with `reply`
    (bytes) and the extra `headers`, and keeps the heartbeat bodies it was sent."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port):
        self.reply = json.dumps({"protocol": PROTOCOL, "jobs": []}).encode() + b"\n"
        self.headers = {}
        self.heartbeats = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.shutdown()
        self.server_close()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        srv = self.server
        if self.path == "/v1/heartbeat":
            with srv.lock:
                srv.heartbeats.append(json.loads(body))
            out = json.dumps({"protocol": PROTOCOL}).encode()
            extra = {}
        else:
            out, extra = srv.reply, srv.headers
        self.send_response(200)
        for k, v in extra.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_DELETE = _answer


def head_port(c):
    return int(str((c.home / "cluster.yaml").read_text()).split("head: {port: ")[1].split("}")[0])


def final_beats(imp, task_id):
    """How many heartbeats the impostor got that carry task_id as ended."""
    with imp.lock:
        return sum(1 for hb in imp.heartbeats for t in hb.get("tasks", [])
                   if t.get("id") == task_id and t.get("state") in ("exited", "failed", "lost"))


def test_impostor_on_head_port(dtctl_bin, tmp_path):
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path)
    port = head_port(c)
    imp = None
    with c:
        # a reply dtsched signed, for a request of ours: what a relaying impostor replays
        api = DtApi("127.0.0.1", port, read_secret(str(c.home)))
        path = "/v1/jobs"
        conn_status, text, headers = api.raw("GET", path, b"", api.signed_headers("GET", path))
        assert conn_status == 200 and headers.get("X-DT-Signature"), (conn_status, headers)
        captured, captured_sig = text.encode(), headers["X-DT-Signature"]

        p = c.dtctl("run", "--detach", "--json", "--", "sleep", "2")
        assert p.returncode == 0, p.stderr
        job = json.loads(p.stdout)["job"]["id"]
        deadline = time.monotonic() + 20
        while True:
            j = json.loads(c.dtctl("show", "--json", job).stdout)["job"]
            if j["state"] == "RUNNING":
                break
            assert time.monotonic() < deadline, j
            time.sleep(0.1)
        task = j["tasks"][0]["id"] if j.get("tasks") else None

        assert c.dtctl("head", "stop").returncode == 0
        # the agent first finds nobody on the port (its sleep ends, a heartbeat is due):
        # a failure it has already logged must not hide the impostor's, a new cause
        deadline = time.monotonic() + 30
        while "heartbeat to dtsched failed" not in c.log("agent.log"):
            assert time.monotonic() < deadline, c.log("agent.log")
            time.sleep(0.1)
        try:
            imp = Impostor(port)
            want = ("reply from 127.0.0.1:%d is not signed by this cluster "
                    "(another program on the head port?)" % port)
            p = c.dtctl("ps")
            assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
            assert want in p.stderr, p.stderr
            assert "jobs" not in p.stdout.lower() or p.stdout == "", p.stdout

            # a signed reply, but to another request: the nonce does not match
            imp.reply, imp.headers = captured, {"X-DT-Signature": captured_sig}
            p = c.dtctl("ps", "--json")
            assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
            assert want in p.stderr or want in p.stdout, (p.stdout, p.stderr)

            # the agent keeps handing the ended task to the "head": never acknowledged
            deadline = time.monotonic() + 30
            tid = task
            while True:
                with imp.lock:
                    ended = [t["id"] for hb in imp.heartbeats for t in hb.get("tasks", [])
                             if t.get("state") in ("exited", "failed", "lost")]
                if ended:
                    tid = tid or ended[0]
                    if final_beats(imp, tid) >= 4:
                        break
                assert time.monotonic() < deadline, (
                    "the agent stopped sending its ended task %s to the impostor after %d "
                    "heartbeats (it took an unsigned 200 as delivered)\nagent.log:\n%s"
                    % (tid, final_beats(imp, tid) if tid else 0, c.log("agent.log")))
                time.sleep(0.1)
            assert "is not signed by this cluster" in c.log("agent.log"), c.log("agent.log")
        finally:
            if imp:
                imp.stop()

        # the real dtsched is back: the end is delivered
        assert c.dtctl("head", "start").returncode == 0
        deadline = time.monotonic() + 30
        while True:
            p = c.dtctl("show", "--json", job)
            if p.returncode == 0 and json.loads(p.stdout)["job"]["state"] == "COMPLETED":
                break
            assert time.monotonic() < deadline, (p.stdout, p.stderr, c.log("dtsched.log"))
            time.sleep(0.2)


def agent_tasks(c):
    """The tasks the local agent knows, from its own GET /v1/tasks."""
    port = int((c.home / "cluster.yaml").read_text().split("agent: {port: ")[1].split(",")[0])
    st, body = DtApi("127.0.0.1", port, read_secret(str(c.home))).request("GET", "/v1/tasks")
    assert st == 200, body
    return body["tasks"]


def fill(path):
    """Write zeros to path until the file system is full."""
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC, e


def test_submit_on_full_head_disk(dtctl_bin, tmp_path):
    """A2: the disk of the head's state.db full (dtsched --db on a tiny tmpfs, the agent's
    home elsewhere so that the node stays healthy): the submit is refused with exit 1 and
    the reason, nothing of the job runs or stays (not after a restart either), and the
    next submit once there is room runs as usual."""
    if os.geteuid() != 0:
        pytest.skip("a tmpfs for the head's state needs root")
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path)
    port = head_port(c)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "dthead", str(state)],
                   check=True)

    def start_head():
        assert c.dtctl("head", "stop").returncode == 0
        p = subprocess.run([str(dtctl_bin / "dtsched"), "--daemon", "--port=%d" % port,
                            "--heartbeat-ms=500", "--dead-after-ms=5000",
                            "--db=%s" % (state / "state.db")], env=c.env,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        c.wait_up()

    try:
        with c:
            start_head()
            marker = tmp_path / "ran"
            fill(state / "filler")
            p = c.dtctl("run", "--detach", "--", "touch", str(marker))
            os.unlink(state / "filler")
            assert p.returncode == 1, (p.returncode, p.stdout, p.stderr, c.log("dtsched.log"))
            assert "the head cannot record the job: database or disk is full" in p.stderr, p.stderr
            assert p.stdout == "", p.stdout

            # room again: the next job is recorded and runs; the refused one never did
            p = c.dtctl("run", "--", "true")
            assert p.returncode == 0, (p.stdout, p.stderr)
            jobs = json.loads(c.dtctl("ps", "--all", "--json").stdout)["jobs"]
            assert [j["state"] for j in jobs] == ["COMPLETED"], jobs
            assert not marker.exists()
            assert len(agent_tasks(c)) <= 1, agent_tasks(c)
            assert sorted(os.listdir(c.shared / "jobs")) == [jobs[0]["id"]]

            # and a restarted dtsched knows just as much
            start_head()
            jobs2 = json.loads(c.dtctl("ps", "--all", "--json").stdout)["jobs"]
            assert [j["id"] for j in jobs2] == [jobs[0]["id"]], jobs2
    finally:
        c.stop()
        subprocess.run(["umount", "-l", str(state)])


OTHER_USER = "dtt-other"


@pytest.fixture
def other_user():
    """A second local Unix user (not in the cluster user's group), removed afterwards."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("a second Unix user needs root and useradd")
    subprocess.run(["userdel", OTHER_USER], capture_output=True)
    p = subprocess.run(["useradd", "--no-create-home", "--user-group", OTHER_USER],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    try:
        yield OTHER_USER
    finally:
        subprocess.run(["userdel", OTHER_USER], capture_output=True)


def as_other(user, *argv):
    return subprocess.run(["runuser", "-u", user, "--"] + list(argv), capture_output=True,
                          text=True, timeout=30)


def test_job_files_not_world_readable(dtctl_bin, tmp_path, other_user):
    """B7: another local user reads no job file (logs, state, placement, events, a rank's
    checkpoint) by default: EACCES; cluster.yaml's `job_files: world` makes the next
    job's files readable to everyone."""
    # the shared dir where any user could reach it (pytest's tmp dirs are 0700)
    shared = Path(tempfile.mkdtemp(prefix="dtt-shared-", dir="/var/tmp"))
    os.chmod(shared, 0o755)
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path)
    conf = (c.home / "cluster.yaml").read_text().replace(str(c.shared), str(shared))
    (c.home / "cluster.yaml").write_text(conf)
    c.shared = shared
    rank = "echo secret-line; mkdir -p $DT_JOB_DIR/ckpt && echo w > $DT_JOB_DIR/ckpt/latest"
    try:
        with c:
            p = c.dtctl("run", "--json", "--", "sh", "-c", rank)
            assert p.returncode == 0, (p.stdout, p.stderr)
            job = json.loads(c.dtctl("ps", "--all", "--json").stdout)["jobs"][0]["id"]
            jd = shared / "jobs" / job
            files = [jd / "logs" / "0.log", jd / "ckpt" / "latest"] + \
                [jd / n for n in ("state", "placement.json", "hostfile", "events.log")
                 if (jd / n).exists()]
            assert len(files) >= 4, os.listdir(jd)
            for f in files:
                assert f.stat().st_mode & 0o007 == 0, "%s is mode %o" % (f, f.stat().st_mode)
                r = as_other(other_user, "cat", str(f))
                assert r.returncode != 0 and "Permission denied" in r.stderr, (f, r)
            for d in (shared / "jobs", jd, jd / "logs", jd / "ckpt"):
                assert d.stat().st_mode & 0o007 == 0, "%s is mode %o" % (d, d.stat().st_mode)

            # the switch: readable by everyone (dtsched re-reads cluster.yaml)
            (c.home / "cluster.yaml").write_text(conf + "job_files: world\n")
            deadline = time.monotonic() + 20
            while True:
                p = c.dtctl("run", "--dry-run", "--json", "--", "true")
                assert p.returncode == 0, p.stderr
                if json.loads(p.stdout)["plan"]["tasks"][0].get("umask") == 0o22:
                    break
                assert time.monotonic() < deadline, p.stdout
                time.sleep(0.2)
            p = c.dtctl("run", "--", "sh", "-c", rank)
            assert p.returncode == 0, (p.stdout, p.stderr)
            job2 = max(j["id"] for j in json.loads(c.dtctl("ps", "--all", "--json").stdout)["jobs"])
            assert job2 != job
            jd2 = shared / "jobs" / job2
            for f in (jd2 / "logs" / "0.log", jd2 / "ckpt" / "latest"):
                r = as_other(other_user, "cat", str(f))
                assert r.returncode == 0, (f, r.stderr)
            assert "secret-line" in as_other(other_user, "cat", str(jd2 / "logs" / "0.log")).stdout
    finally:
        c.stop()
        shutil.rmtree(shared, ignore_errors=True)
