"""dtctl's conventions across commands (issue 14, items 3 and 4): one way to name the
cluster (-c/--cluster FILE, $DTCTL_CLUSTER) set up once by the command table; read-only
commands never start a head; `head start` restarts dtsched when head.port changed; one
JSON schema (docs/json.md: "schema": 1, one name per concept, errors as JSON with the
exit code) and one table of exit codes.

One-node `host: local` clusters (conftest.LocalCluster): no fake cluster, no lock.
"""
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import LocalCluster, free_ports, stop_home_daemons

NOT_SET_UP = "no cluster set up here: run 'dtctl init -c cluster.yaml'"


def bare_env(home: Path) -> dict:
    env = dict(os.environ, DTCTL_HOME=str(home), DTCTL_NO_SYSTEMD="1", NO_COLOR="1")
    env.pop("DTCTL_CLUSTER", None)
    env.pop("DTCTL_SHARED_DIR", None)
    return env


def run(exe, env, *args, timeout=60):
    return subprocess.run([str(exe)] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def dtsched_pids(home: Path) -> list:
    """dtsched processes whose environment names this home."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if not (d / "cmdline").read_bytes().split(b"\0")[0].endswith(b"dtsched"):
                continue
            if ("DTCTL_HOME=%s" % home).encode() in (d / "environ").read_bytes().split(b"\0"):
                pids.append(int(d.name))
        except OSError:
            pass
    return pids


# --------------------------------------------------------------------------- before init

@pytest.mark.parametrize("args", [("ps",), ("ps", "--json"), ("nodes",), ("show", "j-000001"),
                                  ("cancel", "j-000001"), ("sweep", "list"),
                                  ("sweep", "status", "s-000001"), ("logs", "j-000001"),
                                  ("drain", "local"), ("agents", "status")])
def test_read_only_before_init_says_so_and_starts_nothing(dtctl_bin, tmp_path, args):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = bare_env(home)
    try:
        p = run(dtctl_bin / "dtctl", env, *args)
        assert p.returncode == 3, "dtctl %s before init: exit %d (want 3)\n%s%s" % (
            " ".join(args), p.returncode, p.stdout, p.stderr)
        assert NOT_SET_UP in p.stderr, p.stderr
        assert not (home / "dtsched.pid").exists(), "dtctl %s started dtsched" % " ".join(args)
        assert not dtsched_pids(home), "dtctl %s left a dtsched running" % " ".join(args)
    finally:
        stop_home_daemons(home)


def test_read_only_with_cluster_file_but_no_head_starts_none(dtctl_bin, tmp_path):
    """A cluster file (as init leaves it) but dtsched stopped: ps says it cannot reach
    dtsched (exit 3) rather than starting one with whatever settings it finds."""
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path)
    try:
        assert c.dtctl("head", "start").returncode == 0
        assert c.dtctl("head", "stop").returncode == 0
        p = c.dtctl("ps")
        assert p.returncode == 3, p.stdout + p.stderr
        assert "cannot reach dtsched" in p.stderr and "dtctl head start" in p.stderr, p.stderr
        assert not dtsched_pids(c.home)
    finally:
        c.stop()


# --------------------------------------------------------------------------- -c everywhere

@pytest.fixture(scope="module")
def two(dtctl_bin, tmp_path_factory):
    a = LocalCluster(dtctl_bin / "dtctl", tmp_path_factory.mktemp("ca"), name="ca")
    b = LocalCluster(dtctl_bin / "dtctl", tmp_path_factory.mktemp("cb"), name="cb")
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()


def test_cluster_option_everywhere_two_clusters(dtctl_bin, tmp_path, two):
    """From a home with no cluster of its own, -c (before or after the command) and
    $DTCTL_CLUSTER pick the cluster: its head port, secret and shared dir."""
    a, b = two
    home = tmp_path / "elsewhere"
    home.mkdir(mode=0o700)
    try:
        check_two_clusters(dtctl_bin, home, a, b)
    finally:
        stop_home_daemons(home)   # a dtctl that ignored -c would have started one here


def check_two_clusters(dtctl_bin, home, a, b):
    env = bare_env(home)
    exe = dtctl_bin / "dtctl"
    ca, cb = a.home / "cluster.yaml", b.home / "cluster.yaml"

    p = run(exe, env, "run", "-c", ca, "--name", "only-on-a", "-p", "1", "--", "true")
    assert p.returncode == 0, p.stdout + p.stderr
    assert (a.shared / "jobs").is_dir() and list((a.shared / "jobs").iterdir()), \
        "the job did not use cluster A's shared dir"
    assert not (b.shared / "jobs").exists() or not list((b.shared / "jobs").iterdir())

    def names(*args, extra_env=None):
        p = run(exe, dict(env, **(extra_env or {})), *args)
        assert p.returncode == 0, "dtctl %s: %s" % (" ".join(map(str, args)), p.stderr)
        return [j["name"] for j in json.loads(p.stdout)["jobs"]]

    assert "only-on-a" in names("ps", "--all", "--json", "-c", ca)
    assert "only-on-a" in names("-c", ca, "ps", "--all", "--json")
    assert "only-on-a" in names("ps", "--all", "--json", "--cluster=%s" % ca)
    assert "only-on-a" not in names("ps", "--all", "--json", "-c", cb)
    assert "only-on-a" in names("ps", "--all", "--json", extra_env={"DTCTL_CLUSTER": str(ca)})
    assert "only-on-a" not in names("ps", "--all", "--json",
                                    extra_env={"DTCTL_CLUSTER": str(cb)})
    jid = a.job_id("only-on-a")
    for args in (("show", jid), ("logs", jid), ("nodes",), ("head", "status"),
                 ("sweep", "list"), ("agents", "status"), ("validate",)):
        pa = run(exe, env, *args, "-c", ca)
        assert pa.returncode == 0, "dtctl %s -c A: %s%s" % (" ".join(args), pa.stdout, pa.stderr)
    assert "port %s" % a_port(a) in run(exe, env, "head", "status", "-c", ca).stdout
    assert "port %s" % a_port(b) in run(exe, env, "head", "status", "-c", cb).stdout
    # the job is A's only: B's head does not know it
    p = run(exe, env, "show", jid, "-c", cb)
    assert p.returncode == 2, p.stdout + p.stderr
    assert not (home / "dtsched.pid").exists(), "a dtsched was started in the unrelated home"


def a_port(c: LocalCluster) -> str:
    return re.search(r"head: \{port: (\d+)\}", (c.home / "cluster.yaml").read_text()).group(1)


def test_head_start_restarts_when_the_port_changed(dtctl_bin, tmp_path):
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path)
    try:
        assert c.dtctl("head", "start").returncode == 0
        old = a_port(c)
        new, = free_ports(1)
        f = c.home / "cluster.yaml"
        f.write_text(f.read_text().replace("head: {port: %s}" % old, "head: {port: %d}" % new))
        p = c.dtctl("head", "start")
        assert p.returncode == 0, p.stdout + p.stderr
        p = c.dtctl("head", "status")
        assert p.returncode == 0 and "port %d" % new in p.stdout, p.stdout + p.stderr
        p = c.dtctl("ps")
        assert p.returncode == 0, p.stdout + p.stderr
        assert len(dtsched_pids(c.home)) == 1, "the old dtsched is still running"
    finally:
        c.stop()


# --------------------------------------------------------------------------- JSON and exit codes

@pytest.fixture(scope="module")
def one(dtctl_bin, tmp_path_factory):
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path_factory.mktemp("one"))
    try:
        c.start()
        p = c.dtctl("run", "--name", "schema-job", "-p", "1", "--", "echo", "hello")
        assert p.returncode == 0, p.stderr
        f = c.tmp / "sweep.yaml"
        f.write_text("name: schema-sweep\nmethod: grid\nmetric: {name: loss, goal: minimize}\n"
                     "parameters:\n  x: {values: [1, 2]}\n"
                     "job:\n  name: trial\n  procs_per_node: 1\n  launcher: agent\n"
                     "  command: [sh, -c, 'echo \"DTCTL_METRIC {\\\"loss\\\": {x}}\"']\n")
        p = c.dtctl("sweep", f, timeout=120)
        assert p.returncode == 0, p.stderr
        yield c
    finally:
        c.stop()


BAD_NAMES = {"exit", "host", "seconds", "source"}


def check_names(obj, where, allowed=()):
    """No second name for a concept anywhere in the document (docs/json.md)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            assert k not in BAD_NAMES or k in allowed, "%s: key '%s' (docs/json.md names it otherwise)" % (where, k)
            if k.endswith("_ms"):
                assert v is None or isinstance(v, int), "%s: %s=%r is not integer ms" % (where, k, v)
            check_names(v, where, allowed)
    elif isinstance(obj, list):
        for v in obj:
            check_names(v, where, allowed)


def test_every_json_output_follows_the_schema(one):
    jid = one.job_id("schema-job")
    sid = json.loads(one.dtctl("sweep", "list", "--json").stdout)["sweeps"][0]["id"]
    cases = [("ps", "--all", "--json"), ("show", "--json", jid), ("nodes", "--json"),
             ("sweep", "list", "--json"), ("sweep", "status", "--json", sid),
             ("sweep", "best", "--json", sid), ("sweep", "export", "--json", sid),
             ("validate", "--json", one.home / "cluster.yaml"), ("agents", "status", "--json"),
             ("head", "status", "--json"), ("version", "--json"), ("image", "list", "--json"),
             ("whoami", "--json"), ("user", "list", "--json"),
             ("run", "--dry-run", "--json", "-p", "1", "--", "true"),
             ("acct", "--json"), ("share", "--json"), ("why", "--json", jid)]
    for args in cases:
        p = one.dtctl(*args)
        what = "dtctl " + " ".join(map(str, args))
        assert p.returncode == 0, "%s: %s%s" % (what, p.stdout, p.stderr)
        doc = json.loads(p.stdout)
        assert isinstance(doc, dict) and doc.get("schema") == 1, "%s: %s" % (what, p.stdout[:300])
        # validate prints the file as resolved, with the file's own keys (nodes' host:)
        check_names(doc, what, ("host",) if args[0] == "validate" else ())
    lines = one.dtctl("logs", "--json", jid).stdout.splitlines()
    assert lines
    for line in lines:
        l = json.loads(line)
        assert l["schema"] == 1 and l["node"] == "local" and l["rank"] == 0, l
        check_names(l, "dtctl logs --json")
    show = json.loads(one.dtctl("show", "--json", jid).stdout)["job"]
    text = one.dtctl("show", jid).stdout
    assert "(attempt %d)" % show["attempt"] in text, text


def test_json_errors_are_json_with_the_exit_code(one, dtctl_bin, tmp_path):
    home = tmp_path / "h"
    home.mkdir(mode=0o700)
    cases = [(one.env, ("show", "--json", "j-999999"), 2),
             (one.env, ("logs", "--json", "j-999999"), 2),
             (one.env, ("sweep", "status", "--json", "s-999999"), 2),
             (one.env, ("ps", "--json", "--no-such-option"), 2),
             (bare_env(home), ("ps", "--json"), 3),
             (bare_env(home), ("nodes", "--json"), 3)]
    for env, args, code in cases:
        p = run(dtctl_bin / "dtctl", env, *args)
        what = "dtctl " + " ".join(args)
        assert p.returncode == code, "%s: exit %d (want %d)" % (what, p.returncode, code)
        doc = json.loads(p.stdout)
        assert doc["schema"] == 1 and doc["error"]["exit_code"] == code, (what, doc)
        assert doc["error"]["message"], (what, doc)


def test_unknown_ids_and_repeats_exit_the_same_everywhere(one):
    for args in (("logs", "j-999999"), ("show", "j-999999"), ("cancel", "j-999999"),
                 ("sweep", "status", "s-999999"), ("sweep", "stop", "s-999999")):
        p = one.dtctl(*args)
        assert p.returncode == 2, "dtctl %s: exit %d, want 2 (unknown id)\n%s" % (
            " ".join(args), p.returncode, p.stderr)
    p = one.dtctl("run", "-d", "--name", "to-cancel", "-p", "1", "--", "sleep", "60")
    assert p.returncode == 0, p.stderr
    jid = p.stdout.strip()
    codes = [one.dtctl("cancel", jid).returncode for _ in range(2)]
    assert codes == [0, 0], "cancel twice: %s" % codes
    f = one.tmp / "slow.yaml"
    f.write_text("name: slow\nmethod: grid\nmetric: {name: loss, goal: minimize}\n"
                 "parameters:\n  x: {values: [1, 2, 3]}\n"
                 "job:\n  name: t\n  procs_per_node: 1\n  launcher: agent\n"
                 "  command: [sleep, '30']\n")
    p = one.dtctl("sweep", "-d", f)
    assert p.returncode == 0, p.stderr
    sid = p.stdout.strip()
    for verb in ("pause", "stop"):
        rs = [one.dtctl("sweep", verb, sid) for _ in range(2)]
        assert [r.returncode for r in rs] == [0, 0], "sweep %s twice: %s" % (
            verb, [(r.returncode, r.stderr) for r in rs])


COMMANDS = ["acct", "agents", "api", "cancel", "debug", "doctor", "drain", "exec", "head", "hosts", "init", "logs", "nodes", "ps", "push", "resume", "run", "share", "show", "sweep", "user", "validate", "version", "whoami", "why"]


def test_short_options_mean_one_thing(dtctl_bin, tmp_path):
    """Across every command's --help, a short letter stands for one long option, and
    every command lists -c/--cluster."""
    env = bare_env(tmp_path)
    seen = {}
    for cmd in COMMANDS:
        p = run(dtctl_bin / "dtctl", env, cmd, "--help")
        assert p.returncode == 0, "dtctl %s --help: %s" % (cmd, p.stderr)
        pairs = re.findall(r"^\s+-(\w), --([\w-]+)", p.stdout, re.M)
        assert ("c", "cluster") in pairs, "dtctl %s --help lists no -c/--cluster" % cmd
        for short, long in pairs:
            if short == "h":
                continue
            seen.setdefault(short, {}).setdefault(long, []).append(cmd)
    clashes = {s: l for s, l in seen.items() if len(l) > 1}
    assert not clashes, "short options with several meanings: %s" % clashes


def test_every_list_is_oldest_first(one):
    """Issue 27, item 12: `ps --all` and `sweep list` (text and --json) both list the oldest
    first, the newest last, by submission and creation time (docs/json.md, "Lists")."""
    f = one.tmp / "order-sweep.yaml"
    f.write_text("name: order-sweep\nmethod: grid\nmetric: {name: loss, goal: minimize}\n"
                 "parameters:\n  x: {values: [1]}\n"
                 "job:\n  name: trial\n  procs_per_node: 1\n  launcher: agent\n"
                 "  command: [sh, -c, 'echo \"DTCTL_METRIC {\\\"loss\\\": {x}}\"']\n")
    for name in ("order-a", "order-b"):
        p = one.dtctl("run", "--name", name, "-p", "1", "--", "true")
        assert p.returncode == 0, p.stderr
        p = one.dtctl("sweep", f, timeout=120)
        assert p.returncode == 0, p.stderr
    jobs = json.loads(one.dtctl("ps", "--all", "--json").stdout)["jobs"]
    sweeps = json.loads(one.dtctl("sweep", "list", "--json").stdout)["sweeps"]
    assert len(jobs) >= 4 and len(sweeps) >= 3, (jobs, sweeps)
    for what, rows, key in (("ps --all --json", jobs, "submitted_at"),
                            ("sweep list --json", sweeps, "created_at")):
        times = [r[key] for r in rows]
        assert times == sorted(times), (what, times)
    # the text views in the same order as their JSON
    ids = [l.split()[0] for l in one.dtctl("ps", "--all").stdout.splitlines()[1:]]
    assert ids == [j["id"] for j in jobs], ids
    ids = [l.split()[0] for l in one.dtctl("sweep", "list").stdout.splitlines()[1:]]
    assert ids == [s["id"] for s in sweeps], ids
    assert [j["name"] for j in jobs].index("order-a") < [j["name"] for j in jobs].index("order-b")
