"""Strings from users and ranks never reach the terminal raw (lib/term.h): a job name,
an argv word, a sweep name and a sweep parameter value holding terminal escapes (an OSC
title, a CSI clear, BEL, a C1 CSI in its UTF-8 form), and a rank that prints escapes,
on a one-node local cluster (no fake cluster).  The text output of run, ps, show, logs,
sweep (live), sweep status/best/list and validate is valid UTF-8 without control
characters and shows ESC as \\e; the --json outputs hold the exact strings."""

import json
import os
import re
import subprocess

import pytest

from conftest import LocalCluster

EVIL = "\x1b]2;x\x07\x1b[2J"                  # set the window title, clear the screen
JOB_NAME = "job" + EVIL + "\u009b1m\u00e9\u65e5\u672c"   # and a C1 CSI; é 日本 stay
ARG = "arg\x1b[1m"
SWEEP_NAME = "sw" + EVIL
TAG = "t\x1b[2Jv"


def assert_safe(out: bytes, what: str) -> str:
    """out is valid UTF-8 without C0 (but newline), DEL or C1 characters; returns it."""
    text = out.decode("utf-8")      # raises on a raw 0x9b or any invalid byte
    bad = [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f]
    assert not bad, "%s printed control characters %r:\n%r" % (what, bad, text)
    return text


@pytest.fixture(scope="module")
def local(dtctl_bin, tmp_path_factory):
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path_factory.mktemp("term"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def job(local):
    """A job with the evil name whose rank prints escapes; the attached run's output."""
    p = local.dtctl("run", "--name", JOB_NAME, "-p", "1", "--", "sh", "-c",
                    r'printf "\033[31mred\007 $0\n"', ARG, text=False)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return local.job_id(JOB_NAME), p


def test_run_attached(local, job):
    _, p = job
    out = assert_safe(p.stdout, "dtctl run (rank output)")
    err = assert_safe(p.stderr, "dtctl run (its notes)")
    assert "[local 0] \\e[31mred\\x07 arg\\e[1m" in out, out
    assert "job\\e]2;x\\x07\\e[2J\\xc2\\x9b1m\u00e9\u65e5\u672c" in err, err


def test_run_dry_run_command_line(local):
    p = local.dtctl("run", "--dry-run", "--name", JOB_NAME, "-p", "1", "--", "echo", ARG,
                    text=False)
    assert p.returncode == 0, p.stderr
    out = assert_safe(p.stdout, "dtctl run --dry-run")
    assert "arg\\e[1m" in out and "job\\e]2;x" in out, out


def test_ps_and_show(local, job):
    jid, _ = job
    out = assert_safe(local.dtctl("ps", "--all", text=False).stdout, "dtctl ps")
    row = [l for l in out.splitlines() if l.startswith(jid + " ")]
    assert row and "job\\e]2;x\\x07\\e" in row[0], out   # cut at 16 columns, escapes counted
    assert re.search(r" COMPLETED +\d", row[0]), row
    out = assert_safe(local.dtctl("show", jid, text=False).stdout, "dtctl show")
    assert "job:        %s (job\\e]2;x\\x07\\e[2J\\xc2\\x9b1m\u00e9\u65e5\u672c)" % jid in out, out


def test_ps_and_show_json_exact(local, job):
    jid, _ = job
    jobs = json.loads(local.dtctl("ps", "--all", "--json").stdout)["jobs"]
    assert [j["name"] for j in jobs if j["id"] == jid] == [JOB_NAME]
    shown = json.loads(local.dtctl("show", "--json", jid).stdout)["job"]
    assert shown["name"] == JOB_NAME
    assert shown["spec"]["command"][-1] == ARG, shown["spec"]


def parse_rows(text):
    """lib/rowfmt.h's rows: tab-separated, backslash escapes, \\N for a missing field."""
    esc = {"t": "\t", "n": "\n", "r": "\r"}
    return [[None if f == "\\N" else re.sub(r"\\(.)", lambda m: esc.get(m[1], m[1]), f)
             for f in line.split("\t")] for line in text.splitlines()]


def test_ps_rows_are_the_brief_list(local, job):
    """`dtctl ps` reads POST /v1/joblist as text rows (lib/rowfmt.h): field for field what
    the JSON brief list holds, a name with tabs, newlines and backslashes included, and the
    table prints that name on its job's one line, sanitised."""
    name = "t\tn\nb\\N\\"
    p = local.dtctl("run", "--detach", "--name", name, "-p", "1", "--", "true")
    assert p.returncode == 0, p.stderr
    jid = local.job_id(name)
    fields, *rows = parse_rows(local.dtctl("api", "POST", "/v1/joblist",
                                           '{"all": true, "format": "tsv"}').stdout)
    brief = json.loads(local.dtctl("api", "POST", "/v1/joblist", '{"all": true}').stdout)["jobs"]
    got = [dict(zip(fields, r)) for r in rows]
    assert [r["id"] for r in got] == [b["id"] for b in brief] and jid in [r["id"] for r in got]
    for r, b in zip(got, brief):
        for k in ("name", "user"):
            assert r[k] == b[k], (k, r, b)
        for k in ("nodes", "world_size", "log_lost_lines"):
            assert int(r[k]) == b[k], (k, r, b)
        if b["state"] == r["state"]:   # a job may have moved between the two calls
            assert r["reason"] == b["reason"], (r, b)
            assert r["nodelist"] == ",".join(p["node"] for p in b["placement"]), (r, b)
    assert [r["name"] for r in got if r["id"] == jid] == [name]
    out = assert_safe(local.dtctl("ps", "--all", text=False).stdout, "dtctl ps")
    row = [l for l in out.splitlines() if l.startswith(jid + " ")]
    assert len(row) == 1, out
    assert " t\\tn\\nb\\N\\ " in row[0], row   # term.h: \\t, \\n; a backslash is itself


def test_logs(local, job):
    jid, _ = job
    out = assert_safe(local.dtctl("logs", jid, text=False).stdout, "dtctl logs")
    assert out == "[local 0] \\e[31mred\\x07 arg\\e[1m\n", out
    lines = [json.loads(l) for l in local.dtctl("logs", "--json", jid).stdout.splitlines()]
    assert [l["text"] for l in lines] == ["\\e[31mred\\x07 arg\\e[1m"], lines


@pytest.fixture(scope="module")
def sweep(local):
    f = local.tmp / "sweep.yaml"
    f.write_text(
        'name: "sw\\e]2;x\\a\\e[2J"\nmethod: grid\nmetric: {name: loss, goal: minimize}\n'
        'parameters:\n  x: {values: [1, 2]}\n  tag: {value: "t\\e[2Jv"}\n'
        "job:\n  name: trial\n  procs_per_node: 1\n  launcher: agent\n"
        "  command: [sh, -c, 'echo \"DTCTL_METRIC {\\\"loss\\\": {x}}\"', '{tag}']\n")
    p = local.dtctl("sweep", f, text=False, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    sweeps = json.loads(local.dtctl("sweep", "list", "--json").stdout)["sweeps"]
    ids = [s["id"] for s in sweeps if s["name"] == SWEEP_NAME]
    assert ids, sweeps
    return ids[0], f, p


def test_sweep_live_and_validate(local, sweep):
    _, f, p = sweep
    out = assert_safe(p.stdout, "dtctl sweep (live)")
    assert "tag=t\\e[2Jv" in out, out
    assert_safe(p.stderr, "dtctl sweep (its notes)")
    out = assert_safe(local.dtctl("validate", f, text=False).stdout, "dtctl validate")
    assert "tag" in out, out


def test_sweep_views(local, sweep):
    sid, _, _ = sweep
    out = assert_safe(local.dtctl("sweep", "status", sid, text=False).stdout, "sweep status")
    assert "(sw\\e]2;x\\x07\\e[2J)" in out and "tag=t\\e[2Jv" in out, out
    out = assert_safe(local.dtctl("sweep", "best", sid, text=False).stdout, "sweep best")
    assert "# sweep %s (sw\\e]2;x\\x07\\e[2J)" % sid in out, out
    # the parameters are YAML, exact when read back: escaped by YAML's own rules
    assert 'tag: "t\\u001b[2Jv"' in out, out
    out = assert_safe(local.dtctl("sweep", "list", text=False).stdout, "sweep list")
    assert re.search(r"^%s +sw\\e\]2;x\\x07\\e\[2J" % sid, out, re.M), out


def test_sweep_json_exact(local, sweep):
    sid, _, _ = sweep
    ex = json.loads(local.dtctl("sweep", "status", "--json", sid).stdout)
    assert ex["sweep"]["name"] == SWEEP_NAME
    assert {t["params"]["tag"] for t in ex["trials"]} == {TAG}
    best = json.loads(local.dtctl("sweep", "best", "--json", sid).stdout)["best"]
    assert best["params"]["tag"] == TAG


def test_csv_exact_for_programs_escaped_on_a_terminal(local, sweep):
    sid, _, _ = sweep
    # a pipe: the bytes are exact, for programs
    out = local.dtctl("sweep", "export", "--csv", sid).stdout
    assert TAG in out, out
    # a terminal: made safe, as ls does with file names
    master, slave = os.openpty()
    try:
        p = subprocess.run([str(local.exe), "sweep", "export", "--csv", sid], stdout=slave,
                           stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=local.env,
                           timeout=60)
        os.close(slave)
        slave = -1
        assert p.returncode == 0, p.stderr
        raw = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:          # EIO: the writer is gone
                break
            if not chunk:
                break
            raw += chunk
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    out = assert_safe(raw.replace(b"\r\n", b"\n"), "sweep export --csv on a terminal")
    assert "t\\e[2Jv" in out, out


def test_error_quoting_a_name(local):
    p = local.dtctl("cancel", "j-nosuch" + EVIL, text=False)
    assert p.returncode != 0
    err = assert_safe(p.stderr, "dtctl cancel (error)")
    assert "\\e]2;x\\x07\\e[2J" in err, err
