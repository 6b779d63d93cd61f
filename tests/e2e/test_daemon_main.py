"""The daemon skeleton dtagent and dtsched share (lib/daemon.h daemon_main): the same
--daemon / --status / --stop life cycle, the same pid and log files in the home, the
same messages and exit codes, for both programs (no fake cluster needed)."""

import os
import subprocess
from pathlib import Path

import pytest

from conftest import free_ports

# program, pid file, log file, what --status and --stop name, whether --stop says so
DAEMONS = [
    ("dtagent", "agent.pid", "agent.log", "dtagent on this node", True),
    ("dtsched", "dtsched.pid", "dtsched.log", "dtsched", False),
]


def make_home(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    secret = path / "secret"
    secret.write_text(os.urandom(32).hex() + "\n")
    secret.chmod(0o600)
    return path


@pytest.mark.parametrize("prog,pidfile,logfile,label,says_stopped", DAEMONS)
def test_daemon_life_cycle(dtctl_bin, tmp_path, prog, pidfile, logfile, label, says_stopped):
    exe = str(dtctl_bin / prog)
    home = make_home(tmp_path / "home")
    port = free_ports(1)[0]

    def run(*args):
        return subprocess.run([exe, "--home", str(home)] + list(args), capture_output=True,
                              text=True, timeout=30)

    p = run("--status")
    assert (p.returncode, p.stdout) == (1, "%s: not running\n" % label), p
    p = run("--daemon", "--port", str(port))
    assert p.returncode == 0, "%s --daemon failed: %s" % (prog, p.stderr)
    try:
        pid = int((home / pidfile).read_text())
        assert (home / logfile).exists(), "no %s in the home" % logfile
        p = run("--status")
        assert (p.returncode, p.stdout) == (0, "%s: running (pid %d)\n" % (label, pid)), p
        # a second one: --daemon says so and succeeds, in the foreground it fails
        p = run("--daemon", "--port", str(port))
        assert (p.returncode, p.stdout) == (0, "%s: already running (pid %d)\n" % (prog, pid)), p
        p = run("--port", str(port))
        assert (p.returncode, p.stdout) == (1, "%s: already running (pid %d)\n" % (prog, pid)), p
    finally:
        p = run("--stop")
    assert p.returncode == 0, p
    assert p.stdout == ("%s: stopped\n" % label if says_stopped else ""), p
    p = run("--status")
    assert (p.returncode, p.stdout) == (1, "%s: not running\n" % label), p
    p = run("--stop")     # nothing to stop is no error
    assert p.returncode == 0, p


@pytest.mark.parametrize("prog", [d[0] for d in DAEMONS])
def test_usage_names_stop_and_status(dtctl_bin, prog):
    p = subprocess.run([str(dtctl_bin / prog), "--help"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 0
    assert "or: %s --stop | --status" % prog in p.stdout, p.stdout
    for opt in ("--daemon", "--stop", "--status", "--port", "--bind", "--home", "--version"):
        assert opt in p.stdout, "%s --help lacks %s" % (prog, opt)
    p = subprocess.run([str(dtctl_bin / prog), "--port", "0"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 2 and "bad --port" in p.stderr, p


@pytest.mark.parametrize("prog,pidfile", [d[:2] for d in DAEMONS])
def test_daemon_keeps_no_descriptor_of_its_starter(dtctl_bin, tmp_path, prog, pidfile):
    """A daemon outlives whoever started it: a descriptor it inherited (here a pipe's
    write end and a flock(1)-style locked file, as `flock LOCK dtsched --daemon` passes)
    would hold the lock and keep the pipe open for the daemon's whole life."""
    import fcntl

    exe = str(dtctl_bin / prog)
    home = make_home(tmp_path / "home")
    port = free_ports(1)[0]
    lock = tmp_path / "lock"
    lfd = os.open(str(lock), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lfd, fcntl.LOCK_EX)
    r, w = os.pipe()
    try:
        p = subprocess.run([exe, "--home", str(home), "--daemon", "--port", str(port)],
                           pass_fds=(lfd, w), capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        pid = int((home / pidfile).read_text())
        os.close(w)
        os.close(lfd)
        held = [os.readlink("/proc/%d/fd/%s" % (pid, fd)) for fd in os.listdir("/proc/%d/fd" % pid)]
        assert str(lock) not in held, held
        # the pipe's only writer left was the daemon: EOF now, not at its stop
        import select
        assert select.select([r], [], [], 5)[0], "the daemon keeps its starter's pipe open"
        assert os.read(r, 1) == b""
        other = os.open(str(lock), os.O_RDWR)
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)   # raises if the daemon holds it
        finally:
            os.close(other)
    finally:
        subprocess.run([exe, "--home", str(home), "--stop"], capture_output=True, timeout=30)
        os.close(r)
