"""dtctl logs: merged, prefixed, filtered and followed rank logs from the shared dir.

The job directories here are written by the test in the layout of docs/architecture.md, the
way the agents write them (one writer per file, timestamped lines)."""
import json
import os
import subprocess
import threading
import time
from datetime import datetime, timezone, timedelta

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DTCTL = os.path.join(os.environ.get("DTCTL_BIN", os.path.join(REPO, "bin")), "dtctl")
BASE = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)


def ts(sec):
    t = BASE + timedelta(seconds=sec)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}Z"


def logs(*args, timeout=20, env=None, **kw):
    env = dict(env or os.environ, NO_COLOR="1")
    return subprocess.run([DTCTL, "logs", *args], capture_output=True, timeout=timeout,
                          env=env, **kw)


@pytest.fixture
def job(tmp_path):
    shared = tmp_path / "shared"
    jd = shared / "jobs" / "j-000001"
    (jd / "logs").mkdir(parents=True)
    (jd / "placement.json").write_text(json.dumps(
        {"ranks": [{"rank": 0, "node": "n1"}, {"rank": 1, "node": "n1"},
                   {"rank": 2, "node": "n2"}]}))

    def write(rank, lines, mode="w"):
        with open(jd / "logs" / f"{rank}.log", mode + "b") as f:
            for sec, stream, text in lines:
                if isinstance(text, str):
                    text = text.encode()
                f.write(f"{ts(sec)} {stream} ".encode() + text + b"\n")
    return shared, jd, write


def test_merged_in_time_order_with_prefix(job):
    shared, jd, write = job
    write(0, [(1, "O", "r0 first"), (4, "O", "r0 second")])
    write(1, [(2, "O", "r1 first"), (3, "E", "r1 error")])
    write(2, [(0.5, "O", "r2 first")])
    r = logs("--shared-dir", str(shared), "j-000001")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines() == [
        "[n2 2] r2 first", "[n1 0] r0 first", "[n1 1] r1 first", "[n1 1] r1 error",
        "[n1 0] r0 second"]


def test_filters_rank_node_grep_tail_since(job):
    shared, jd, write = job
    write(0, [(i, "O", f"r0 step {i}") for i in range(10)])
    write(2, [(i + 0.5, "O", f"r2 step {i}") for i in range(10)])
    base = ["--shared-dir", str(shared)]
    out = logs(*base, "--rank", "2", "j-000001").stdout.decode().splitlines()
    assert len(out) == 10 and all(l.startswith("[n2 2]") for l in out)
    out = logs(*base, "--node", "n1", "j-000001").stdout.decode().splitlines()
    assert len(out) == 10 and all(l.startswith("[n1 0]") for l in out)
    out = logs(*base, "--grep", "step [78]$", "j-000001").stdout.decode().splitlines()
    assert out == ["[n1 0] r0 step 7", "[n2 2] r2 step 7", "[n1 0] r0 step 8",
                   "[n2 2] r2 step 8"]
    out = logs(*base, "--tail", "3", "j-000001").stdout.decode().splitlines()
    assert out == ["[n2 2] r2 step 8", "[n1 0] r0 step 9", "[n2 2] r2 step 9"]
    out = logs(*base, "--since", ts(8.2), "j-000001").stdout.decode().splitlines()
    assert out == ["[n2 2] r2 step 8", "[n1 0] r0 step 9", "[n2 2] r2 step 9"]


def test_dedup_folds_identical_lines(job):
    shared, jd, write = job
    write(0, [(1.00, "O", "epoch 1"), (1.1, "O", "loss 0.5")])
    write(1, [(1.01, "O", "epoch 1"), (1.2, "O", "loss 0.6")])
    write(2, [(1.02, "O", "epoch 1")])
    out = logs("--shared-dir", str(shared), "--dedup", "j-000001").stdout.decode().splitlines()
    assert out == ["[ranks 0-2] epoch 1", "[n1 0] loss 0.5", "[n1 1] loss 0.6"]


def test_binary_long_lines_and_progress_bars(job):
    shared, jd, write = job
    write(0, [(1, "O", b"bin\x00\x01\xff ok"), (2, "O", b"10%\r50%\r100%"),
              (3, "O", "x" * 200000)])
    r = logs("--shared-dir", str(shared), "j-000001")
    assert r.returncode == 0
    lines = r.stdout.decode("utf-8").splitlines()
    assert lines[0] == "[n1 0] bin\\x00\\x01\\xff ok"
    assert lines[1] == "[n1 0] 100%"
    # a 200 kB line is split into 64 KiB pieces, nothing lost
    rest = "".join(l[len("[n1 0] "):] for l in lines[2:])
    assert rest == "x" * 200000


def test_json_output(job):
    shared, jd, write = job
    write(1, [(1, "E", 'say "hi"')])
    r = logs("--shared-dir", str(shared), "--json", "j-000001")
    rec = json.loads(r.stdout)
    assert rec == {"schema": 1, "node": "n1", "rank": 1, "ranks": [1], "stream": "stderr",
                   "text": 'say "hi"', "time": ts(1)}


def test_follow_until_job_ends(job):
    shared, jd, write = job
    write(0, [(1, "O", "start")])
    p = subprocess.Popen([DTCTL, "logs", "-f", "--interval", "50", "--shared-dir",
                          str(shared), "j-000001"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=dict(os.environ, NO_COLOR="1"))
    try:
        time.sleep(0.5)
        # a partial line is not shown until its newline arrives
        with open(jd / "logs" / "0.log", "ab") as f:
            f.write(f"{ts(2)} O half".encode())
            f.flush()
            time.sleep(0.3)
            f.write(b" line\n")
        # a rank that starts late is picked up
        write(2, [(3, "O", "late rank")])
        time.sleep(0.5)
        assert p.poll() is None, "logs -f ended before the job did"
        (jd / "state").write_text("FAILED\n")
        out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    assert out.decode().splitlines() == ["[n1 0] start", "[n1 0] half line",
                                         "[n2 2] late rank"]
    assert p.returncode == 1
    assert b"FAILED" in err


def test_follow_latency_under_500ms(job):
    shared, jd, write = job
    write(0, [])
    p = subprocess.Popen([DTCTL, "logs", "-f", "--shared-dir", str(shared), "j-000001"],
                         stdout=subprocess.PIPE, env=dict(os.environ, NO_COLOR="1"))
    try:
        time.sleep(0.3)
        seen = []
        def reader():
            seen.append((p.stdout.readline(), time.monotonic()))
        t = threading.Thread(target=reader)
        t.start()
        t0 = time.monotonic()
        write(0, [(1, "O", "ping")], mode="a")
        t.join(5)
        assert seen and seen[0][0] == b"[n1 0] ping\n"
        # polling every 200 ms: generous bound for a loaded machine
        assert seen[0][1] - t0 < 2.0
        (jd / "state").write_text("COMPLETED\n")
        p.wait(timeout=5)
        assert p.returncode == 0
    finally:
        if p.poll() is None:
            p.kill()


def test_errors(job, tmp_path):
    shared, jd, write = job
    r = logs("--shared-dir", str(shared), "j-999999")
    # an unknown job is a usage error (2), as in show and cancel (docs/json.md)
    assert r.returncode == 2 and b"no job 'j-999999'" in r.stderr
    r = logs("--shared-dir", str(shared), "--rank", "3-1", "j-000001")
    assert r.returncode == 2 and b"bad rank range" in r.stderr
    r = logs("--shared-dir", str(shared), "--grep", "(", "j-000001")
    assert r.returncode == 2 and b"--grep" in r.stderr
    r = logs("--shared-dir", str(shared), "--since", "yesterday", "j-000001")
    assert r.returncode == 2
    r = logs("j-000001", env=dict(os.environ, DTCTL_HOME=str(tmp_path / "nohome"),
                                  DTCTL_CLUSTER=""))
    # no cluster set up: the same exit 3 and message as every command
    assert r.returncode == 3 and b"no cluster set up here" in r.stderr
    r = logs()
    assert r.returncode == 2 and b"usage: dtctl logs" in r.stderr
