"""The fake cluster itself (tests/cluster/fakecluster): logins with the real OpenSSH client
and a password, per-node hostname, home, /tmp and host key, the shared dir, name resolution,
clean teardown, and the loopback fallback.  Tests of dtctl build on these guarantees."""

import os
import pwd
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FAKECLUSTER, askpass_env

NODE_RE = re.compile(r"^dtnode\d+$")


# --------------------------------------------------------------------------- helpers

def password_ssh(node, user, password, tmp_path, command, known_hosts=None):
    """Log in to node with the real ssh client, answering the password prompt through
    SSH_ASKPASS (no sshpass), trusting the host key on first use into a per-test
    known_hosts.  Returns the CompletedProcess."""
    askpass = tmp_path / "askpass.sh"
    askpass.write_text("#!/bin/sh\nprintf '%%s\\n' '%s'\n" % password.replace("'", "'\\''"))
    askpass.chmod(0o700)
    known_hosts = known_hosts or tmp_path / "known_hosts"
    argv = ["ssh", "-F", "/dev/null",
            "-o", "UserKnownHostsFile=%s" % known_hosts,
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=accept-new",
            "-o", "BatchMode=no",
            "-o", "PubkeyAuthentication=no",
            "-o", "PreferredAuthentications=password",
            "-o", "NumberOfPasswordPrompts=1",
            "-o", "ConnectTimeout=5",
            "-p", str(node.port), "%s@%s" % (user, node.addr), command]
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=30, env=askpass_env(str(askpass)))


def known_host_keys(path):
    """{host field: key} of an OpenSSH known_hosts file."""
    keys = {}
    for line in Path(path).read_text().splitlines():
        f = line.split()
        if len(f) >= 3 and not line.startswith("#"):
            keys[f[0]] = (f[1], f[2])
    return keys


def same_pid_ns(pid):
    """A fake cluster of another root (make check-fresh: new pid namespace, same state
    path) is visible from here; its processes are not our leftovers."""
    try:
        return os.readlink("/proc/%d/ns/pid" % pid) == os.readlink("/proc/self/ns/pid")
    except OSError:
        return False


def leftovers(state: Path):
    """Everything a fake cluster could leave behind on the host, as readable strings."""
    left = []
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left += ["netns " + l.split()[0] for l in out.splitlines()
             if l.split() and NODE_RE.match(l.split()[0])]
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for l in out.splitlines():
        name = l.split(":", 2)[1].strip().split("@")[0]
        if name == "dtbr0" or name.startswith("dtveth"):
            left.append("link " + name)
    needle = str(state) + "/"
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path("/proc/%s/cmdline" % d).read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if needle in cmd and same_pid_ns(int(d)):
                left.append("process %s: %s" % (d, cmd))
    if "# BEGIN dtctl-fakecluster" in Path("/etc/hosts").read_text():
        left.append("/etc/hosts block")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mp = line.split()[4]
        if mp == str(state) or mp.startswith(needle):
            left.append("mount " + mp)
    return left


def wait_gone(pid, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            stat = Path("/proc/%d/stat" % pid).read_text()
        except OSError:
            return True
        if stat[stat.rindex(")") + 2] == "Z":
            return True
        time.sleep(0.05)
    return False


needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="netns fake cluster needs root (loopback tests still run)")


@pytest.fixture(scope="module")
def fc3(fake_cluster):
    c = fake_cluster(3)
    if c.mode != "netns":
        pytest.skip("fake cluster fell back to loopback mode (%s): per-node hostname, home "
                    "and /tmp cannot be tested" % c.why)
    return c


# --------------------------------------------------------------------------- netns mode

@needs_root
def test_password_login_hostnames_and_host_keys(fc3, tmp_path):
    for node in fc3.nodes:
        p = password_ssh(node, fc3.user, fc3.password, tmp_path, "hostname; id -un")
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == [node.name, fc3.user]
        assert node.addr == "10.88.0.%d" % (10 + node.index) and node.port == 22
    keys = known_host_keys(tmp_path / "known_hosts")   # learnt through accept-new
    assert set(keys) == {n.addr for n in fc3.nodes}
    assert len(set(keys.values())) == 3, "host keys must differ per node"
    pinned = known_host_keys(fc3.known_hosts)           # what fakecluster publishes
    for n in fc3.nodes:
        assert pinned["%s,%s" % (n.name, n.addr)] == keys[n.addr]


@needs_root
def test_wrong_password_is_refused(fc3, tmp_path):
    p = password_ssh(fc3.node(1), fc3.user, "not-" + fc3.password, tmp_path, "true")
    assert p.returncode == 255
    assert "Permission denied" in p.stderr


@needs_root
def test_private_home(fc3):
    assert fc3.ssh(1, "echo one > ~/only-on-node1").returncode == 0
    assert fc3.ssh(1, ["cat", "/home/%s/only-on-node1" % fc3.user]).stdout == "one\n"
    p = fc3.ssh(2, "ls -a ~; test ! -e ~/only-on-node1")
    assert p.returncode == 0, "node 2 sees node 1's home: %s" % p.stdout
    host_home = Path(pwd.getpwnam(fc3.user).pw_dir)
    assert not (host_home / "only-on-node1").exists()


@needs_root
def test_private_tmp(fc3):
    assert fc3.ssh(1, "echo t > /tmp/fc-tmp-probe").returncode == 0
    assert fc3.exec(1, ["cat", "/tmp/fc-tmp-probe"]).stdout == "t\n"
    assert fc3.ssh(2, "test ! -e /tmp/fc-tmp-probe").returncode == 0
    assert not Path("/tmp/fc-tmp-probe").exists()
    assert fc3.exec(2, "test ! -e /dev/shm/fc-shm-probe && touch /dev/shm/fc-shm-probe"
                    ).returncode == 0
    assert fc3.exec(3, "test ! -e /dev/shm/fc-shm-probe").returncode == 0


@needs_root
def test_shared_dir_is_shared(fc3):
    f = fc3.shared / "from-node1"
    assert fc3.ssh(1, "echo shared > %s" % f).returncode == 0
    p = fc3.ssh(3, ["cat", str(f)])
    assert (p.returncode, p.stdout) == (0, "shared\n")
    assert f.read_text() == "shared\n"
    assert f.stat().st_uid == pwd.getpwnam(fc3.user).pw_uid


@needs_root
def test_names_resolve_and_nodes_reach_each_other_and_the_host(fc3):
    for n in fc3.nodes:
        assert socket.gethostbyname(n.name) == n.addr
    p = fc3.exec(1, ["getent", "hosts", "dtnode3"])
    assert p.stdout.split() == ["10.88.0.13", "dtnode3"]
    # node 1 -> node 2 by name, as Open MPI's ssh launcher will do (password via askpass)
    p = fc3.exec(1, ["env", "SSH_ASKPASS=%s" % fc3.askpass, "SSH_ASKPASS_REQUIRE=force",
                     "ssh", "-o", "StrictHostKeyChecking=accept-new", "-o",
                     "PubkeyAuthentication=no", "dtnode2", "hostname"], user=True)
    assert (p.returncode, p.stdout) == (0, "dtnode2\n"), p.stderr
    # nodes reach the host (the head: dtsched) on the bridge address
    with socket.socket() as srv:
        srv.bind((fc3.host_addr, 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        p = fc3.exec(3, ["/usr/bin/python3", "-c",
                         "import socket; socket.create_connection(('%s', %d), 5)"
                         % (fc3.host_addr, port)], user=True)
        assert p.returncode == 0, p.stderr
    # no route out of the fake network
    p = fc3.exec(2, ["ip", "route", "show", "default"])
    assert p.stdout.strip() == ""


@needs_root
def test_exec_enters_the_node(fc3):
    p = fc3.exec(2, ["sh", "-c", "hostname; id -un; ip -4 -o addr show eth0"])
    lines = p.stdout.splitlines()
    assert lines[:2] == ["dtnode2", "root"]
    assert "10.88.0.12/24" in lines[2]
    p = fc3.exec(2, "id -un; echo $HOME; pwd", user=True)
    home = pwd.getpwnam(fc3.user).pw_dir
    assert p.stdout.split() == [fc3.user, home, home]
    assert fc3.exec(1, ["ip", "-o", "link", "show", "lo"]).stdout.count("UP") >= 1


@needs_root
def test_down_leaves_nothing_and_is_idempotent(fc3):
    # a stray process inside a node must not survive down
    p = fc3.exec(2, "sleep 300 >/dev/null 2>&1 & echo $!", user=True)
    stray = int(p.stdout.strip())
    ssh_session = subprocess.Popen(fc3.ssh_argv(1, "sleep 300"), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env=askpass_env(str(fc3.askpass)))
    try:
        time.sleep(0.5)
        p = fc3.down()
        assert p.returncode == 0, p.stderr
        assert leftovers(fc3.state) == []
        assert wait_gone(stray), "process %d in node 2 survived down" % stray
        ssh_session.wait(timeout=10)
    finally:
        if ssh_session.poll() is None:
            ssh_session.kill()
    p = fc3.down()
    assert p.returncode == 0, p.stderr
    assert leftovers(fc3.state) == []
    p = subprocess.run([str(FAKECLUSTER), "status"], capture_output=True, text=True)
    assert p.returncode == 1 and p.stdout.startswith("down")


def test_up_16_nodes_is_fast(fake_cluster):
    t0 = time.time()
    c = fake_cluster(16)
    took = time.time() - t0
    assert len(c.nodes) == 16 and took < 30, "16 nodes took %.1f s" % took
    assert c.ssh(16, "echo ok").stdout == "ok\n"
    p = subprocess.run([str(FAKECLUSTER), "status"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.count(" up\n") == 16, p.stdout


# --------------------------------------------------------------------------- loopback mode

def test_loopback_mode_password_login(fake_cluster, tmp_path):
    c = fake_cluster(2, mode="loopback")
    assert c.mode == "loopback" and not c.hostnames_distinct
    for node in c.nodes:
        assert node.addr == "127.0.0.%d" % (10 + node.index)
        assert node.port == 22000 + node.index
        if c.password:
            p = password_ssh(node, c.user, c.password, tmp_path, "id -un")
        else:                   # not root: the invoking user with fakecluster's key
            p = c.ssh(node.index, "id -un")
        assert (p.returncode, p.stdout) == (0, c.user + "\n"), p.stderr
    keys = known_host_keys(tmp_path / "known_hosts") if c.password else {}
    if keys:
        assert len(set(keys.values())) == 2
    assert c.ssh(2, "echo via-config").stdout == "via-config\n"
    p = c.down()
    assert p.returncode == 0, p.stderr
    assert leftovers(c.state) == []


@needs_root
def test_loopback_mode_without_root(tmp_path, fake_cluster):
    """The fallback a developer without root gets: run fakecluster as the test user."""
    fake_cluster(1, mode="loopback")            # makes sure the test user exists
    subprocess.run([str(FAKECLUSTER), "down"], capture_output=True, check=True)
    user = pwd.getpwnam("dttest")
    state = "/tmp/dtctl-fakecluster-nonroot-test"
    env = ["env", "FAKECLUSTER_STATE=" + state, "FAKECLUSTER_PORT_BASE=22100",
           "PATH=/usr/sbin:/usr/bin:/sbin:/bin"]

    def fc(*args):
        return subprocess.run(["runuser", "-u", user.pw_name, "--"] + env +
                              [str(FAKECLUSTER)] + list(args), capture_output=True,
                              text=True, timeout=60, cwd="/")
    if fc("status").returncode not in (0, 1):
        pytest.skip("the test user cannot run %s (repo not readable by it?)" % FAKECLUSTER)
    try:
        p = fc("up", "2")
        assert p.returncode == 0, p.stderr
        assert "mode loopback (no root" in p.stderr
        for i in (1, 2):
            p = fc("ssh", str(i), "id -un")
            assert (p.returncode, p.stdout) == (0, "dttest\n"), p.stderr
        p = fc("exec", "--user", "1", "id", "-un")
        assert p.stdout == "dttest\n"
    finally:
        p = fc("down")
    assert p.returncode == 0, p.stderr
    assert leftovers(Path(state)) == []
    shutil.rmtree(state, ignore_errors=True)
    Path(state + ".lock").unlink(missing_ok=True)
