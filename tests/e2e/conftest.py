"""Shared fixtures of dtctl's end-to-end tests (run with /usr/bin/python3 -m pytest).

Fixtures
  dtctl_bin     Path of the folder holding the built programs: $DTCTL_BIN, else <repo>/bin.
  tmp_home      a fresh, empty DTCTL_HOME (set in os.environ for the test); its Path.
  dtctl         dtctl(*args, **kw) -> CompletedProcess: runs the real <dtctl_bin>/dtctl with
                text output captured and a timeout.  Uses tmp_home, so no test ever touches
                the real ~/.dtctl.
  fake_cluster  factory: fake_cluster(n, mode=None, fresh=False) -> FakeCluster, a cluster of
                n fake nodes from tests/cluster/fakecluster (see tests/cluster/README.md).
                Module-scoped: the cluster is torn down at the end of the module (or when the
                same module asks for another size or mode), even when tests fail.  Only one
                fake cluster exists at a time on a machine.  Skips, with the reason, when the
                machine cannot run one (no sshd, no ssh client).
  slurm_cluster factory: slurm_cluster(n, gpus=4) -> SlurmCluster, a real Slurm (slurmctld
                and munged on the host, one slurmd per fake node) on a fake cluster of n
                nodes, from tests/cluster/fakeslurm.  Module-scoped, torn down before the
                fake cluster, even when tests fail.  Skips when Slurm is not installed or
                the fake cluster cannot run in netns mode.

Helpers other test modules can import: REPO, FAKECLUSTER, FakeCluster, Node, askpass_env(),
free_ports(), LocalCluster (a one-node cluster with host: local, no fake cluster needed).

Programs run as the fake cluster's test user (dtagent, and the dtshim and dttrain it
starts) must be reachable by that user.  A clone under /root (0700 on Debian) or any
other private directory is not: then, as root, the session copies the programs once to
a fresh 0755 directory under /var/tmp (visible inside the nodes, unlike /tmp), points
DTCTL_BIN at it for every test, and removes it at the end.  If that cannot be done the
session stops at once with one line saying why.  Nothing else the test user reads comes
from the checkout (setup templates and job files are read by dtctl, which runs as you).
"""

import contextlib
import json
import os
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Union

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKECLUSTER = REPO / "tests" / "cluster" / "fakecluster"
FAKESLURM = REPO / "tests" / "cluster" / "fakeslurm"
SSHD = os.environ.get("FAKECLUSTER_SSHD") or "/usr/sbin/sshd"

Argv = Union[str, Sequence[str]]


def _default_stdin(kw: dict) -> None:
    """subprocess.run keyword arguments: stdin is /dev/null unless input or stdin is given
    (a test must never hang reading the terminal)."""
    if "input" not in kw and "stdin" not in kw:
        kw["stdin"] = subprocess.DEVNULL


# --------------------------------------------------------------------------- programs

# dtctl-full: what the static front dtctl execs for SSH and NSS commands (cli/front.c)
PROGRAMS = ("dtctl", "dtctl-full", "dtagent", "dtshim", "dtsched", "dttrain")
_STAGED: List[Path] = []


def others_cannot_reach(path: Path) -> Optional[str]:
    """Why a user that is neither the owner nor in the group cannot run the programs in
    directory `path` (the first directory on the way without o+x), or None."""
    p = path.resolve()
    for d in [p] + list(p.parents):
        try:
            mode = d.stat().st_mode
        except OSError as e:
            return "%s: %s" % (d, e.strerror)
        if not mode & stat.S_IXOTH:
            return "%s is mode %04o" % (d, stat.S_IMODE(mode))
    for name in PROGRAMS:
        f = p / name
        if f.exists() and (f.stat().st_mode & 0o005) != 0o005:
            return "%s is mode %04o" % (f, stat.S_IMODE(f.stat().st_mode))
    return None


def stage_programs(bin_dir: Path) -> Path:
    """Copy the built programs of bin_dir to a new root-owned 0755 directory under
    /var/tmp (the nodes share it; their /tmp is private); returns its bin/."""
    top = Path(tempfile.mkdtemp(prefix="dtctl-e2e-", dir="/var/tmp"))
    _STAGED.append(top)
    os.chmod(top, 0o755)
    out = top / "bin"
    out.mkdir(mode=0o755)
    os.chmod(out, 0o755)
    for name in PROGRAMS:
        if (bin_dir / name).exists():
            shutil.copy2(bin_dir / name, out / name)
            os.chmod(out / name, 0o755)
    # the built-in templates (builtin:setup-node.sh, dtagent.service) are found beside
    # the programs, at bin/../templates, as in the checkout and an install
    shutil.copytree(REPO / "templates", top / "templates")
    for dirpath, dirnames, filenames in os.walk(top / "templates"):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o644 if not f.endswith(".sh") else 0o755)
    return out


def pytest_configure(config):
    """As root, make the programs reachable by the fake cluster's test user (see the top
    of this file), before any test module reads DTCTL_BIN."""
    if os.geteuid() != 0:
        return      # the fake cluster's user is you (loopback mode): nothing to do
    bin_dir = Path(os.environ.get("DTCTL_BIN") or REPO / "bin").resolve()
    why = others_cannot_reach(bin_dir)
    if why is None:
        return
    try:
        staged = stage_programs(bin_dir)
    except OSError as e:
        sys.stderr.write("e2e: cannot run: the fake cluster's test user cannot reach %s (%s) "
                         "and copying the programs to /var/tmp failed (%s): clone the repo "
                         "under a world-readable directory such as /srv or /opt\n"
                         % (bin_dir, why, e))
        pytest.exit("programs unreachable by the test user", returncode=3)
    os.environ["DTCTL_BIN"] = str(staged)
    print("e2e: %s is not reachable by the fake cluster's test user (%s): running the "
          "copies in %s" % (bin_dir, why, staged))


# One hung test must not eat CI's 90 minutes (and a whole session's work with them): each
# phase of a test (setup, call, teardown) gets DT_TEST_TIMEOUT seconds (600 by default, ~10x
# the slowest test under load), then fails with where it was.  A test blocked in a read
# (an `events -f` waiting for an event that never comes) is interrupted by SIGALRM.
TEST_TIMEOUT = int(os.environ.get("DT_TEST_TIMEOUT", "600"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    with _watchdog(item, "setup"):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with _watchdog(item, "call"):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    with _watchdog(item, "teardown"):
        yield


@contextlib.contextmanager
def _watchdog(item, phase):
    import signal
    import traceback

    if TEST_TIMEOUT <= 0:
        yield
        return

    def expired(signum, frame):
        where = "".join(traceback.format_stack(frame, limit=6))
        pytest.fail("%s: %s took over %d s (DT_TEST_TIMEOUT); it was at:\n%s"
                    % (item.nodeid, phase, TEST_TIMEOUT, where), pytrace=False)

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def pytest_unconfigure(config):
    for top in _STAGED:
        shutil.rmtree(top, ignore_errors=True)
    _STAGED.clear()


# --------------------------------------------------------------------------- dtctl

@pytest.fixture(scope="session")
def dtctl_bin() -> Path:
    return Path(os.environ.get("DTCTL_BIN") or REPO / "bin").resolve()


@pytest.fixture
def tmp_home(tmp_path, monkeypatch) -> Path:
    """A fresh DTCTL_HOME; daemons started with it (dtsched, a local dtagent) are
    stopped at the end, whatever the test did."""
    home = tmp_path / "dtctl-home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("DTCTL_HOME", str(home))
    yield home
    stop_home_daemons(home)


def stop_home_daemons(home: Path) -> None:
    """TERM, then KILL, every daemon whose pid file is in `home`."""
    import signal
    import time
    pids = []
    for name in ("dtsched.pid", "agent.pid"):
        try:
            pids.append(int((home / name).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except OSError:
                pass
        if not alive:
            return
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and any(_alive(p) for p in alive):
            time.sleep(0.05)
        pids = [p for p in alive if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


@pytest.fixture
def dtctl(dtctl_bin, tmp_home):
    """dtctl("run", "job.yaml", timeout=60, input=None, env={...}, cwd=None, check=False)."""
    exe = dtctl_bin / "dtctl"

    def run(*args, timeout: float = 60, env: Optional[dict] = None, check: bool = False,
            **kw) -> subprocess.CompletedProcess:
        if not os.access(exe, os.X_OK):
            pytest.fail("%s is not built (run make, or set DTCTL_BIN)" % exe)
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        _default_stdin(kw)
        return subprocess.run([str(exe)] + [str(a) for a in args], capture_output=True,
                              text=True, timeout=timeout, env=full_env, check=check, **kw)
    return run


# --------------------------------------------------------------------------- local cluster

def free_ports(n: int) -> list:
    """n distinct free TCP ports (all bound at once, so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class LocalCluster:
    """A one-node cluster on this machine (host: local; gpus: a number, or "auto" for
    the real NVML inventory): its own DTCTL_HOME, shared dir
    and free ports, so it needs no fake cluster.  start() runs dtsched and the agent and
    waits for the node to be UP; stop() ends them whatever happened."""

    def __init__(self, exe: Path, tmp: Path, name: str = "local", gpus: str = "0"):
        self.exe, self.tmp = exe, tmp
        self.home = tmp / "home"
        self.home.mkdir(mode=0o700)
        self.shared = tmp / "shared"
        self.shared.mkdir()
        self.env = dict(os.environ, DTCTL_HOME=str(self.home), DTCTL_NO_SYSTEMD="1",
                        NO_COLOR="1")
        self.env.pop("DTCTL_CLUSTER", None)
        self.env.pop("DTCTL_SHARED_DIR", None)
        agent_port, head_port = free_ports(2)
        (self.home / "cluster.yaml").write_text(
            "cluster: %s\nshared_dir: %s\nnodes:\n  - {host: local, gpus: %s, slots: 2}\n"
            "agent: {port: %d, heartbeat: 500ms, dead_after: 5s}\nhead: {port: %d}\n"
            % (name, self.shared, gpus, agent_port, head_port))

    def dtctl(self, *args, timeout=60, text=True):
        """Plain dtctl; text=False keeps stdout and stderr as bytes."""
        return subprocess.run([str(self.exe)] + [str(a) for a in args], capture_output=True,
                              text=text, timeout=timeout, env=self.env,
                              stdin=subprocess.DEVNULL)

    def start(self):
        for what in (("head", "start"), ("agents", "start")):
            p = self.dtctl(*what)
            assert p.returncode == 0, "dtctl %s: %s%s\ndtsched.log:\n%s\nagent.log:\n%s" % (
                " ".join(what), p.stdout, p.stderr, self.log("dtsched.log"),
                self.log("agent.log"))
        self.wait_up()

    def __enter__(self):
        """`with LocalCluster(...) as c:` starts it and stops it whatever happens."""
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self.dtctl("agents", "stop")
        self.dtctl("head", "stop")
        stop_home_daemons(self.home)

    def node_json(self):
        """The node as `dtctl nodes --json` shows it."""
        p = self.dtctl("nodes", "--json")
        assert p.returncode == 0, p.stderr
        return [n for n in json.loads(p.stdout)["nodes"] if n["name"] == "local"][0]

    def wait_up(self, timeout=20):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.dtctl("nodes", "--json")
            if last.returncode == 0 and any(n.get("name") == "local" and n.get("state") == "UP"
                                            for n in json.loads(last.stdout)["nodes"]):
                return
            time.sleep(0.2)
        pytest.fail("node 'local' not UP after %ds: %s%s\nagent.log:\n%s"
                    % (timeout, last.stdout, last.stderr, self.log("agent.log")))

    def log(self, name):
        try:
            return (self.home / name).read_text(errors="replace")[-4000:]
        except OSError:
            return "(none)"

    def key_user(self, name, keydir: Path) -> dict:
        """A user of the cluster with their own ed25519 key (`dtctl user add NAME --key`,
        docs/team.md): the environment dtctl runs as them in (dtsched's key pinned)."""
        key = keydir / name
        p = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f",
                            str(key)], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        p = self.dtctl("user", "add", name, "--key", "%s.pub" % key)
        assert p.returncode == 0, p.stderr
        return dict(self.env, DTCTL_USER_KEY=str(key), DTCTL_USER=name,
                    DTCTL_HEAD_KEY=json.loads(self.dtctl("whoami", "--json").stdout)["head_key"])

    def job_id(self, name):
        """The id of the newest job called name, from `dtctl ps --all --json`."""
        p = self.dtctl("ps", "--all", "--json")
        assert p.returncode == 0, "dtctl ps --all --json: %s" % p.stderr
        ids = [j["id"] for j in json.loads(p.stdout)["jobs"] if j["name"] == name]
        assert ids, "no job '%s' in dtctl ps --all (the run case must pass first)" % name
        return max(ids)


# --------------------------------------------------------------------------- fake cluster

@dataclass
class Node:
    index: int          # 1-based
    name: str           # dtnode<index>: hostname (netns mode) and /etc/hosts name
    addr: str           # 10.88.0.(10+index) (netns) or 127.0.0.(10+index) (loopback)
    port: int           # 22 (netns) or 22000+index (loopback)


def askpass_env(askpass: str, base: Optional[dict] = None) -> dict:
    """Environment making OpenSSH's client read its password from the askpass program."""
    env = dict(os.environ if base is None else base)
    env.update(SSH_ASKPASS=askpass, SSH_ASKPASS_REQUIRE="force")
    env.setdefault("DISPLAY", ":0")
    return env


@dataclass
class FakeCluster:
    mode: str                   # "netns" or "loopback"
    why: str                    # why that mode ("root", "no root: ...", ...)
    nodes: List[Node]
    user: str                   # test user on the nodes (dttest; loopback non-root: you)
    password: str               # its password ("" in non-root loopback: use key)
    key: str                    # private key path (non-root loopback only), else ""
    shared: Path                # the "NFS" dir: same path on the host and on all nodes
    state: Path                 # fakecluster's state dir
    host_addr: str              # the host as the nodes see it (10.88.0.1 / 127.0.0.1)
    ssh_config: Path            # ssh -F file: Host dtnode<I> entries, pinned host keys
    known_hosts: Path           # the nodes' real host keys
    askpass: Path               # prints the password (SSH_ASKPASS)
    hostnames_distinct: bool    # False in loopback mode
    raw: dict = field(repr=False, default_factory=dict)

    @classmethod
    def from_env(cls, env: dict = None) -> "FakeCluster":
        p = subprocess.run([str(FAKECLUSTER), "env", "--json"], capture_output=True,
                           text=True, timeout=30, env=env)
        if p.returncode != 0:
            raise RuntimeError("fakecluster env: %s" % p.stderr.strip())
        c = json.loads(p.stdout)
        return cls(mode=c["mode"], why=c["why"],
                   nodes=[Node(n["index"], n["name"], n["addr"], n["port"])
                          for n in c["nodes"]],
                   user=c["user"], password=c["password"], key=c["key"],
                   shared=Path(c["shared"]), state=Path(c["state"]),
                   host_addr=c["host_addr"], ssh_config=Path(c["ssh_config"]),
                   known_hosts=Path(c["known_hosts"]), askpass=Path(c["askpass"]),
                   hostnames_distinct=c["hostnames_distinct"], raw=c)

    @property
    def n(self) -> int:
        return len(self.nodes)

    def node(self, i: int) -> Node:
        return self.nodes[i - 1]

    def exec(self, i: int, argv: Argv, user: bool = False, timeout: float = 60,
             check: bool = False, **kw) -> subprocess.CompletedProcess:
        """Run argv (a list, or a str for /bin/sh -c) inside node i's namespaces, as root,
        or as the test user with user=True.  Text output captured."""
        if isinstance(argv, str):
            argv = ["/bin/sh", "-c", argv]
        cmd = [str(FAKECLUSTER), "exec"] + (["--user"] if user else []) + [str(i)] + list(argv)
        _default_stdin(kw)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=check, env=self._env(), **kw)

    def ssh_argv(self, i: int, argv: Argv = ()) -> List[str]:
        """OpenSSH client command line to node i as the test user (pinned host keys)."""
        if not isinstance(argv, str):
            argv = shlex.join(argv)
        return ["ssh", "-F", str(self.ssh_config), self.node(i).name] + ([argv] if argv else [])

    def ssh(self, i: int, argv: Argv, timeout: float = 60, check: bool = False,
            **kw) -> subprocess.CompletedProcess:
        """Run argv on node i over real ssh as the test user, logging in with the password
        (or the key in non-root loopback mode).  A str argv is a remote shell command; a
        list is quoted so that it arrives as that argv."""
        _default_stdin(kw)
        return subprocess.run(self.ssh_argv(i, argv), capture_output=True, text=True,
                              timeout=timeout, check=check,
                              env=askpass_env(str(self.askpass)), **kw)

    def down(self) -> subprocess.CompletedProcess:
        return subprocess.run([str(FAKECLUSTER), "down"], capture_output=True, text=True,
                              timeout=120, env=self._env())

    def _env(self) -> dict:
        return dict(os.environ, FAKECLUSTER_STATE=str(self.state))


def have_python_module(name: str) -> bool:
    """Whether this Python imports `name` (python3-torch for the torchrun tests)."""
    return subprocess.run([sys.executable, "-c", "import " + name],
                          capture_output=True).returncode == 0


def gpu_required() -> bool:
    """DT_REQUIRE_GPU set (not "" or "0"): a GPU test that would skip fails instead.
    `make trainer-gpu-test` sets it where nvidia-smi lists a GPU."""
    return os.environ.get("DT_REQUIRE_GPU", "") not in ("", "0")


def gpu_skip(reason: str) -> None:
    """Skip a test for want of a GPU (or a CUDA build), or fail under DT_REQUIRE_GPU,
    where such a skip would be a pass that tested nothing."""
    if gpu_required():
        pytest.fail("DT_REQUIRE_GPU is set, but: " + reason)
    pytest.skip(reason)


def fake_cluster_unavailable() -> Optional[str]:
    """Why no fake cluster can run here, or None."""
    if not os.access(SSHD, os.X_OK):
        return "fake cluster: %s not found (Debian package openssh-server)" % SSHD
    if not shutil.which("ssh"):
        return "fake cluster: ssh client not found (Debian package openssh-client)"
    if not shutil.which("ssh-keygen"):
        return "fake cluster: ssh-keygen not found (Debian package openssh-client)"
    return None


@pytest.fixture(scope="module")
def fake_cluster(request):
    """Factory: fake_cluster(n, mode=None, fresh=False) -> FakeCluster.

    mode None lets fakecluster pick (netns as root, else loopback); "loopback" or "netns"
    forces one.  The same module asking again for the same n and mode gets the running
    cluster unless fresh=True.  Torn down at the end of the module, always."""
    reason = fake_cluster_unavailable()
    current = {}

    def teardown():
        if current.get("up"):
            current.pop("up")
            p = subprocess.run([str(FAKECLUSTER), "down"], capture_output=True, text=True,
                               timeout=120)
            if p.returncode != 0:
                raise RuntimeError("fakecluster down failed: %s" % p.stderr.strip())

    request.addfinalizer(teardown)

    def make(n: int, mode: Optional[str] = None, fresh: bool = False) -> FakeCluster:
        if reason:
            pytest.skip(reason)
        key = (n, mode)
        if current.get("up") and current.get("key") == key and not fresh:
            return current["cluster"]
        env = dict(os.environ)
        env.pop("FAKECLUSTER_MODE", None)
        if mode:
            env["FAKECLUSTER_MODE"] = mode
        current["up"] = True            # from here on the finalizer runs down
        p = subprocess.run([str(FAKECLUSTER), "up", str(n)], capture_output=True, text=True,
                           timeout=120, env=env)
        if p.returncode != 0:
            pytest.fail("fakecluster up %d failed (rc %d):\n%s" % (n, p.returncode, p.stderr))
        cluster = FakeCluster.from_env()
        current.update(key=key, cluster=cluster)
        # visible in -rs / -v output: which mode the e2e tests ran on
        print("fakecluster: %d nodes, mode %s (%s)" % (n, cluster.mode, cluster.why))
        return cluster

    return make


# --------------------------------------------------------------------------- slurm

@dataclass
class SlurmCluster:
    fc: FakeCluster
    conf: Path                  # slurm.conf: SLURM_CONF for every client
    state: Path                 # the instance dir (logs/, spool/, munge/ ...)
    partition: str
    gpus: int                   # fake GRES GPUs per node
    bringup_s: float            # how long `fakeslurm up` took

    def env(self, base: Optional[dict] = None) -> dict:
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        return env

    def run(self, argv: Argv, user: bool = False, timeout: float = 60, env: Optional[dict] = None,
            **kw) -> subprocess.CompletedProcess:
        """A Slurm client (srun, sbatch, squeue ...) on the host side, as root or as the
        fake cluster's test user (user=True), with SLURM_CONF set; text output captured."""
        if isinstance(argv, str):
            argv = ["/bin/sh", "-c", argv]
        argv = list(argv)
        e = self.env(env)
        if user:
            import pwd
            pw = pwd.getpwnam(self.fc.user)
            argv = ["setpriv", "--reuid", str(pw.pw_uid), "--regid", str(pw.pw_gid),
                    "--init-groups", "--"] + argv
            e.update(HOME=pw.pw_dir, USER=self.fc.user, LOGNAME=self.fc.user)
            kw.setdefault("cwd", "/")
        _default_stdin(kw)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=e, **kw)

    def log(self, name: str, n: int = 40) -> str:
        try:
            return "\n".join((self.state / "logs" / name).read_text(errors="replace")
                             .splitlines()[-n:])
        except OSError:
            return "(no %s)" % name

    def wait_job_gone(self, jobid: str, timeout: float = 30) -> str:
        """Poll `scontrol show job` until the job has ended; returns its final JobState."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            p = self.run(["scontrol", "-o", "show", "job", jobid])
            for f in p.stdout.split():
                if f.startswith("JobState="):
                    state = f.split("=", 1)[1]
            if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING",
                                       "SUSPENDED"):
                return state
            time.sleep(0.1)
        raise AssertionError("slurm job %s still %s after %ss" % (jobid, state, timeout))


def slurm_unavailable() -> Optional[str]:
    for prog in ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged"):
        if not os.access(prog, os.X_OK):
            return ("slurm: %s not found (Debian packages slurmctld slurmd slurm-client "
                    "munge: scripts/deps.sh)" % prog)
    if not shutil.which("srun"):
        return "slurm: srun not found (Debian package slurm-client)"
    if os.geteuid() != 0:
        return "slurm: the fake Slurm needs root (one slurmd per fake node, jobs as their user)"
    return None


@pytest.fixture(scope="module")
def slurm_cluster(fake_cluster):
    """Factory: slurm_cluster(n, gpus=4) -> SlurmCluster on a fake cluster of n nodes.
    Torn down at the end of the module (before the fake cluster), always."""
    current = {}

    def down():
        if current.pop("up", None):
            p = subprocess.run([str(FAKESLURM), "down"], capture_output=True, text=True,
                               timeout=120)
            if p.returncode != 0:
                raise RuntimeError("fakeslurm down failed: %s" % p.stderr.strip())

    def make(n: int, gpus: int = 4) -> SlurmCluster:
        why = slurm_unavailable()
        if why:
            pytest.skip(why)
        if current.get("up") and current.get("key") == (n, gpus):
            return current["cluster"]
        down()
        fc = fake_cluster(n)
        if fc.mode != "netns":
            pytest.skip("slurm: the fake cluster is in %s mode (%s); one slurmd per node "
                        "needs netns" % (fc.mode, fc.why))
        current["up"] = True
        t0 = time.monotonic()
        p = subprocess.run([str(FAKESLURM), "up", "--gpus", str(gpus)], capture_output=True,
                           text=True, timeout=120)
        if p.returncode != 0:
            pytest.fail("fakeslurm up failed (rc %d):\n%s" % (p.returncode, p.stderr))
        inst = json.loads(subprocess.run([str(FAKESLURM), "env", "--json"], capture_output=True,
                                         text=True, timeout=30, check=True).stdout)
        sc = SlurmCluster(fc=fc, conf=Path(inst["conf"]), state=Path(inst["state"]),
                          partition=inst["partition"], gpus=gpus,
                          bringup_s=time.monotonic() - t0)
        current.update(key=(n, gpus), cluster=sc)
        print("fakeslurm: %d nodes, %d GPUs each, up in %.1f s" % (n, gpus, sc.bringup_s))
        return sc

    yield make
    down()


# --------------------------------------------------------------------------- head + agents

class HeadCluster:
    """dtsched on the host and one dtagent per fake node (as the cluster user), for the
    run and sweep tests.  Subclasses add what their tests need."""

    def __init__(self, fc, bin_dir, tmp, head_port, agent_port, gpus, tag, dead_after_ms,
                 dtctl_timeout=90):
        """A private DTCTL_HOME under tmp with a cluster.yaml naming every fake node
        (gpus GPUs and 2 CPU slots each, 300 ms heartbeats)."""
        self.fc, self.bin, self.tmp = fc, Path(bin_dir), tmp
        self.head_port, self.agent_port, self.gpus, self.tag = head_port, agent_port, gpus, tag
        self.dtctl_timeout = dtctl_timeout
        self.home = tmp / "home"
        self.home.mkdir(mode=0o700)
        self.env = dict(os.environ, DTCTL_HOME=str(self.home), DTCTL_NO_SYSTEMD="1",
                        NO_COLOR="1")
        self.env.pop("DTCTL_SHARED_DIR", None)
        self.env.pop("DTCTL_CLUSTER", None)
        nodes = "\n".join("  - {host: %s, name: %s, gpus: %d, slots: 2}" % (n.addr, n.name, gpus)
                          for n in fc.nodes)
        (self.home / "cluster.yaml").write_text(
            "cluster: t\nshared_dir: %s\nnodes:\n%s\nagent: {port: %d, heartbeat: 300ms, "
            "dead_after: %dms}\nhead: {address: %s, port: %d}\n"
            % (fc.shared, nodes, agent_port, dead_after_ms, fc.host_addr, head_port))

    def dtctl(self, *args, timeout=None, **kw):
        kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run([str(self.bin / "dtctl")] + [str(a) for a in args],
                              capture_output=True, text=True, env=self.env,
                              timeout=timeout or self.dtctl_timeout, **kw)

    def popen(self, *args):
        return subprocess.Popen([str(self.bin / "dtctl")] + [str(a) for a in args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env, stdin=subprocess.DEVNULL)

    def shared_file(self, subdir, name, text):
        """A file every node can read, the shared dir's <subdir>/<name>."""
        d = self.fc.shared / subdir
        d.mkdir(exist_ok=True)
        os.chmod(d, 0o777)
        p = d / name
        p.write_text(text)
        os.chmod(p, 0o644)
        return p

    def agent_home(self, i):
        return "/tmp/dtagent-%s-%d" % (self.tag, i)

    def port(self, i):
        return self.agent_port + 10 * i

    def start_agent(self, i):
        n = self.fc.node(i)
        p = self.fc.exec(i, [str(self.bin / "dtagent"), "--home", self.agent_home(i), "--daemon",
                             "--name", n.name, "--bind", n.addr, "--port", str(self.port(i)),
                             "--gpus", str(self.gpus), "--heartbeat-ms", "300",
                             "--head", "%s:%d" % (self.fc.host_addr, self.head_port)], user=True)
        assert p.returncode == 0, "agent on %s: %s" % (n.name, p.stderr)

    def stop_agent(self, i):
        self.fc.exec(i, [str(self.bin / "dtagent"), "--home", self.agent_home(i), "--stop"],
                     user=True)

    def give_secret(self, i, extra=""):
        """Node i's agent home with the cluster secret (`dtctl head start` made it), as
        init leaves it; extra: more shell run there as the cluster user."""
        secret = (self.home / "secret").read_text().strip()
        h = self.agent_home(i)
        p = self.fc.exec(i, "mkdir -p -m 700 %s && umask 077 && printf '%%s\\n' %s > %s/secret%s"
                         % (h, secret, h, " && " + extra if extra else ""), user=True)
        assert p.returncode == 0, p.stderr

    def show(self, job):
        """`dtctl show --json job`, parsed."""
        p = self.dtctl("show", "--json", job)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["job"]

    def wait_job(self, job, states, timeout=60):
        """`dtctl show --json job` once its state is one of states."""
        import time
        deadline = time.time() + timeout
        while True:
            j = self.show(job)
            if j["state"] in states:
                return j
            assert time.time() < deadline, "job %s not %s after %ss: %s" % (job, states,
                                                                           timeout, j)
            time.sleep(0.2)

    def shutdown(self):
        """Cancel what still runs, stop the agents and dtsched."""
        for j in self.jobs():
            if j["state"] in ("PENDING", "RUNNING"):
                self.dtctl("cancel", j["id"])
        for i in range(1, self.fc.n + 1):
            self.stop_agent(i)
        self.dtctl("head", "stop")

    @contextlib.contextmanager
    def running(self):
        """dtsched, the secret and an agent on every node; then everything stopped,
        whatever the tests did (for a module-scoped fixture: `with ctx.running(): yield ctx`)."""
        try:
            assert self.dtctl("head", "start").returncode == 0
            for i in range(1, self.fc.n + 1):
                self.give_secret(i)
                self.start_agent(i)
            self.wait_nodes_up()
            yield self
            self.shutdown()
        finally:
            stop_home_daemons(self.home)

    def nodes(self):
        p = self.dtctl("nodes", "--json")
        assert p.returncode == 0, p.stderr
        return {n["name"]: n for n in json.loads(p.stdout)["nodes"]}

    def wait_nodes_up(self, timeout=20):
        import time
        deadline = time.time() + timeout
        while time.time() < deadline:
            nodes = self.nodes()
            if all(nodes.get(n.name, {}).get("state") == "UP" for n in self.fc.nodes):
                return
            time.sleep(0.2)
        raise AssertionError("nodes not UP: %s" % self.nodes())

    def jobs(self):
        p = self.dtctl("ps", "--all", "--json")
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["jobs"]
