"""The main dtctl CLI paths under valgrind memcheck: any invalid read or write, use of
an uninitialised value, bad free, or definite/indirect leak fails the case that ran it.

Two groups:
  - no cluster: --help, --version, run/sweep --help, validate on every template, on a
    cluster.yaml with --json and on bad files (exit 2, file:line:col);
  - a real one-node local cluster (`host: local`, reached by direct exec, no sshd) with
    dtsched and the local dtagent started normally, not under valgrind: nodes, run, ps,
    show, logs, cancel (error path), a 2-trial grid sweep and its status, best, export.

valgrind exits 99 (--error-exitcode) when it found something, so its verdict cannot be
mistaken for dtctl's own exit code (0-3, or a job's); its report goes to a log file per
case and is quoted in the assertion message.  Only errors and definite/indirect leaks
count: "still reachable" blocks (dt_home()'s cached path, OpenSSL's global tables) are
what a program that exits may keep.  tests/valgrind.supp, when present, is passed too:
it may hold leaks proven to be inside third-party libraries, never dtctl's own.

Skips, with the reason, when valgrind is not installed (make deps installs it) or when
DTCTL_BIN holds a sanitizer build (ASan and valgrind cannot run the same process)."""

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, LocalCluster

TEMPLATES = REPO / "templates"
SUPP = REPO / "tests" / "valgrind.supp"
VALGRIND = shutil.which("valgrind")
VG_EXIT = 99            # valgrind's exit code when it found an error or a counted leak
VG_TIMEOUT = 180        # seconds per command: valgrind costs 20-50x CPU

if not VALGRIND:
    pytest.skip("valgrind not installed (Debian package valgrind; run make deps)",
                allow_module_level=True)


def vg_exe(dtctl_bin: Path) -> Path:
    """the dtctl to run under memcheck: dtctl-full, the same sources as the static front
    (bin/dtctl, cli/front.c) linked dynamically, so that memcheck can replace malloc (in
    a static binary it sees no heap, and glibc's static start reads as errors)"""
    exe = dtctl_bin / "dtctl-full"
    if not exe.exists():
        exe = dtctl_bin / "dtctl"
    if not os.access(exe, os.X_OK):
        pytest.fail("%s is not built (run make, or set DTCTL_BIN)" % exe)
    if b"__asan_init" in exe.read_bytes():
        pytest.skip("%s is an ASan build: valgrind needs the developer build (make)" % exe)
    return exe


@pytest.fixture(scope="module")
def vg_dtctl(dtctl_bin):
    return vg_exe(dtctl_bin)


def vg_argv(exe: Path, log: Path) -> list:
    argv = [VALGRIND, "--quiet", "--error-exitcode=%d" % VG_EXIT, "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect",
            "--show-leak-kinds=definite,indirect", "--track-fds=no",
            "--child-silent-after-fork=yes", "--log-file=%s" % log]
    if SUPP.exists():
        argv.append("--suppressions=%s" % SUPP)
    return argv + [str(exe)]


def run_vg(exe: Path, logdir: Path, args, env=None, want_rc=0) -> subprocess.CompletedProcess:
    """Run `dtctl args` under memcheck; fail, naming the command, on a valgrind finding
    or an exit code other than want_rc."""
    args = [str(a) for a in args]
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / ("vg-%d.log" % len(list(logdir.glob("vg-*.log"))))
    cmd = "dtctl " + " ".join(args)
    p = subprocess.run(vg_argv(exe, log) + args, capture_output=True, text=True,
                       timeout=VG_TIMEOUT, env=env, stdin=subprocess.DEVNULL)
    report = log.read_text(errors="replace") if log.exists() else ""
    if p.returncode == VG_EXIT or report.strip():
        pytest.fail("valgrind found errors in `%s` (exit %d):\n%s\n--- stderr:\n%s"
                    % (cmd, p.returncode, report, p.stderr), pytrace=False)
    if p.returncode != want_rc:
        pytest.fail("`%s` exited %d, expected %d\n--- stdout:\n%s\n--- stderr:\n%s"
                    % (cmd, p.returncode, want_rc, p.stdout, p.stderr), pytrace=False)
    return p


# --------------------------------------------------------------------------- no cluster

@pytest.fixture
def no_cluster_env(tmp_home):
    env = dict(os.environ, NO_COLOR="1")
    env.pop("DTCTL_CLUSTER", None)
    env.pop("DTCTL_SHARED_DIR", None)
    return env


@pytest.mark.parametrize("args,want", [
    (["--help"], "usage: dtctl"),
    (["--version"], "dtctl "),
    (["run", "--help"], "usage: dtctl run"),
    (["sweep", "--help"], "usage: dtctl sweep"),
], ids=["help", "version", "run-help", "sweep-help"])
def test_help(vg_dtctl, no_cluster_env, tmp_path, args, want):
    p = run_vg(vg_dtctl, tmp_path, args, env=no_cluster_env)
    assert want in p.stdout, "`dtctl %s` printed:\n%s" % (" ".join(args), p.stdout)


@pytest.mark.parametrize("name", sorted(p.name for p in TEMPLATES.glob("*.yaml")))
def test_validate_template(vg_dtctl, no_cluster_env, tmp_path, name):
    p = run_vg(vg_dtctl, tmp_path, ["validate", TEMPLATES / name], env=no_cluster_env)
    assert "file, valid" in p.stdout, p.stdout


def test_validate_json(vg_dtctl, no_cluster_env, tmp_path):
    f = tmp_path / "cluster.yaml"
    f.write_text("shared_dir: /mnt/nfs\nuser: alice\nnodes:\n  - host: gpu[01-03]\n"
                 "  - {host: local, gpus: 0}\nssh: {port: 2222}\n")
    p = run_vg(vg_dtctl, tmp_path, ["validate", "--json", f], env=no_cluster_env)
    c = json.loads(p.stdout)["files"][0]
    assert c["kind"] == "cluster"
    assert [n["name"] for n in c["nodes"]] == ["gpu01", "gpu02", "gpu03", "local"]


@pytest.mark.parametrize("name,text,want", [
    ("syntax.yaml", "shared_dir: /n\nnodes: [local\n", "invalid YAML"),
    ("unknown.yaml", "shared_dir: /n\nnodes: [local]\nssh: {fanot: 3}\n",
     "unknown key 'ssh.fanot'"),
    ("sweep.yaml", "method: random\nmetric: {name: loss}\nparameters:\n"
     "  lr: {min: 0.5, max: 0.1}\njob: {command: [x]}\n", "is greater than max"),
], ids=["syntax-error", "unknown-key", "sweep-min-above-max"])
def test_validate_bad(vg_dtctl, no_cluster_env, tmp_path, name, text, want):
    f = tmp_path / name
    f.write_text(text)
    p = run_vg(vg_dtctl, tmp_path / "vg", ["validate", f], env=no_cluster_env, want_rc=2)
    assert p.stdout == ""
    assert re.match(r"dtctl: error: %s:\d+:\d+: " % re.escape(str(f)), p.stderr), p.stderr
    assert want in p.stderr, p.stderr


# --------------------------------------------------------------------------- local cluster

JOB_NAME = "vg-hello"
SWEEP_NAME = "vg-sweep"


class Local(LocalCluster):
    """The one-node local cluster with a job and a sweep file; vg() runs dtctl under
    memcheck."""

    def __init__(self, exe: Path, tmp: Path):
        super().__init__(exe, tmp, "vg")
        self.job = tmp / "job.yaml"
        self.job.write_text(
            "name: %s\nnodes: 1\nprocs_per_node: 2\nlauncher: agent\n"
            "command: [sh, -c, \"echo hello; echo err >&2\"]\n" % JOB_NAME)
        self.sweep = tmp / "sweep.yaml"
        self.sweep.write_text(
            "name: %s\nmethod: grid\nmetric: {name: loss, goal: minimize}\n"
            "parameters:\n  x: {values: [1, 2]}\n"
            "job:\n  name: vg-trial\n  procs_per_node: 1\n  launcher: agent\n"
            "  command: [sh, -c, 'echo \"DTCTL_METRIC {\\\"loss\\\": {x}}\"']\n" % SWEEP_NAME)

    def vg(self, args, want_rc=0):
        return run_vg(self.exe, self.tmp / "vg", args, env=self.env, want_rc=want_rc)


@pytest.fixture(scope="module")
def local(vg_dtctl, tmp_path_factory):
    c = Local(vg_dtctl, tmp_path_factory.mktemp("vg-local"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


# Order matters: the cases after "run" and "sweep" read what those made.
def case_nodes(c):
    p = c.vg(["nodes"])
    assert re.search(r"^local +UP", p.stdout, re.M), p.stdout


def case_nodes_json(c):
    p = c.vg(["nodes", "--json"])
    assert [n["state"] for n in json.loads(p.stdout)["nodes"]] == ["UP"], p.stdout


def case_run(c):
    p = c.vg(["run", c.job])
    assert p.stdout.count("hello") == 2, "dtctl run %s printed:\n%s" % (c.job, p.stdout)
    assert "COMPLETED" in p.stderr, p.stderr


def case_ps_all(c):
    p = c.vg(["ps", "--all"])
    assert JOB_NAME in p.stdout and "COMPLETED" in p.stdout, p.stdout


def case_ps_json(c):
    p = c.vg(["ps", "--json"])
    assert "jobs" in json.loads(p.stdout), p.stdout


def case_show(c):
    job = c.job_id(JOB_NAME)
    p = c.vg(["show", job])
    assert job in p.stdout and "COMPLETED" in p.stdout, p.stdout


def case_logs(c):
    job = c.job_id(JOB_NAME)
    p = c.vg(["logs", job])
    lines = p.stdout.splitlines()
    assert sorted(lines) == ["[local 0] err", "[local 0] hello", "[local 1] err",
                             "[local 1] hello"], p.stdout


def case_cancel_missing(c):
    p = c.vg(["cancel", "j-999999"], want_rc=2)
    assert "no job 'j-999999'" in p.stderr, p.stderr


def case_agents_status(c):
    p = c.vg(["agents", "status"])
    assert re.search(r"^local +running", p.stdout, re.M), p.stdout


def case_agents_unknown_node(c):
    p = c.vg(["agents", "status", "--nodes", "nosuch"], want_rc=2)
    assert "no node 'nosuch'" in p.stderr, p.stderr


def case_sweep(c):
    p = c.vg(["sweep", c.sweep])
    assert "COMPLETED" in p.stderr, p.stderr
    assert "best: trial 1" in p.stdout, p.stdout


def case_sweep_status(c):
    p = c.vg(["sweep", "status", SWEEP_NAME])
    assert "COMPLETED" in p.stdout and "2/2 done" in p.stdout, p.stdout


def case_sweep_best(c):
    p = c.vg(["sweep", "best", SWEEP_NAME])
    assert re.search(r"^x: 1$", p.stdout, re.M), p.stdout


def case_sweep_export_json(c):
    p = c.vg(["sweep", "export", "--json", SWEEP_NAME])
    e = json.loads(p.stdout)
    assert e["sweep"]["state"] == "COMPLETED", p.stdout
    assert [t["value"] for t in e["trials"]] == [1, 2], p.stdout
    assert e["best"]["trial"] == 1, p.stdout


LIVE = [case_nodes, case_nodes_json, case_run, case_ps_all, case_ps_json, case_show,
        case_logs, case_cancel_missing, case_agents_status, case_agents_unknown_node,
        case_sweep, case_sweep_status, case_sweep_best, case_sweep_export_json]


@pytest.mark.parametrize("case", LIVE, ids=[f.__name__[5:].replace("_", "-") for f in LIVE])
def test_live(local, case):
    case(local)
