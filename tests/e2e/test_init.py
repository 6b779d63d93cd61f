"""dtctl init on the fake cluster: password-only first contact -> key login for libssh2 and
OpenSSH, idempotent re-run, setup template, binaries, secret; then exec on the result."""

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

N = 4


def write_cluster(path: Path, c, extra: str = "", nodes: str = None) -> Path:
    if nodes is None:
        nodes = "".join("  - {host: %s, name: %s, port: %d, gpus: 2}\n" % (n.addr, n.name, n.port)
                        for n in c.nodes)
    path.write_text("cluster: fake\nuser: %s\nshared_dir: %s\nnodes:\n%s%s"
                    % (c.user, c.shared, nodes, extra))
    return path


def home_of(c, i) -> Path:
    """The test user's home inside node i, as seen from the host."""
    return c.state / ("node%d" % i) / "home"


@pytest.fixture(scope="module")
def cluster(fake_cluster):
    c = fake_cluster(N)
    if not c.password:
        pytest.skip("fake cluster without password login (non-root loopback mode)")
    return c


def test_init_password_then_keys(cluster, dtctl, tmp_home, tmp_path):
    c = cluster
    cfg = write_cluster(tmp_path / "cluster.yaml", c,
                        extra="setup:\n  template: %s\n  env: {NCCL_SOCKET_IFNAME: eth0, ODD: \"it's $x\"}\n"
                        % (REPO / "templates" / "setup-node.sh"))
    pw = tmp_path / "pw"
    pw.write_text(c.password + "\n")
    p = dtctl("init", "--accept-new-hosts", "--password-file", pw, cfg, timeout=120)
    assert p.returncode == 0, "init failed:\n%s\n%s" % (p.stdout, p.stderr)
    for n in c.nodes:
        assert "%s: setting up %s" % (n.name, n.name) in p.stdout, p.stdout
        assert n.name in p.stdout and "changed" in p.stdout

    # keys and files on the head
    for name, mode in [("id_ed25519", 0o600), ("secret", 0o600), ("known_hosts", 0o600),
                       ("ssh_config", 0o600)]:
        st = (tmp_home / name).stat()
        assert st.st_mode & 0o777 == mode, "%s has mode %o" % (name, st.st_mode & 0o777)
    assert (tmp_home / "id_ed25519.pub").read_text().startswith("ssh-ed25519 ")
    assert (tmp_home / "id_ed25519.pub").read_text().rstrip().endswith("dtctl@fake")
    assert len((tmp_home / "secret").read_text().strip()) == 64
    assert oct(tmp_home.stat().st_mode & 0o777) == oct(0o700)

    # every node: OpenSSH with the written config, BatchMode (no password possible)
    env = dict(os.environ)
    env.pop("SSH_AUTH_SOCK", None)
    for n in c.nodes:
        r = subprocess.run(["ssh", "-F", str(tmp_home / "ssh_config"), n.name, "true"],
                           capture_output=True, text=True, timeout=30, env=env,
                           stdin=subprocess.DEVNULL)
        assert r.returncode == 0, "OpenSSH to %s failed: %s" % (n.name, r.stderr)

    # and dtctl exec (libssh2, key only: no password in the environment)
    env = {"DTCTL_PASSWORD": ""}
    p = dtctl("exec", "--cluster", cfg, "--", "sh", "-c", "echo $NCCL_SOCKET_IFNAME/$ODD",
              timeout=60)
    assert p.returncode == 0, p.stderr
    for n in c.nodes:
        assert "%s: eth0/it's $x" % n.name in p.stdout, p.stdout

    # node side: modes, secret identical, binaries checksummed, setup log on the shared dir
    secret = (tmp_home / "secret").read_bytes()
    bin_dir = Path(os.environ.get("DTCTL_BIN") or REPO / "bin")
    for i, n in enumerate(c.nodes, 1):
        h = home_of(c, i)
        if c.mode == "netns":
            assert (h / ".ssh").stat().st_mode & 0o777 == 0o700
            assert (h / ".ssh" / "authorized_keys").stat().st_mode & 0o777 == 0o600
            assert (h / ".dtctl" / "secret").read_bytes() == secret
            assert (h / ".dtctl" / "secret").stat().st_mode & 0o777 == 0o600
            for b in ("dtagent", "dtshim", "dttrain"):
                if (bin_dir / b).exists():
                    assert hashlib.sha256((h / ".dtctl/bin" / b).read_bytes()).digest() == \
                        hashlib.sha256((bin_dir / b).read_bytes()).digest()
            assert not list(h.rglob("*.dtctl-tmp.*")), "temp files left behind"
        log = c.shared / "init" / ("%s.log" % n.name)
        assert log.exists() and " O setting up %s" % n.name in log.read_text()


def test_second_init_changes_nothing(cluster, dtctl, tmp_home, tmp_path):
    c = cluster
    cfg = write_cluster(tmp_path / "cluster.yaml", c,
                        extra="setup: {template: %s}\n" % (REPO / "templates" / "setup-node.sh"))
    p = dtctl("init", "--accept-new-hosts", cfg, env={"DTCTL_PASSWORD": c.password}, timeout=120)
    assert p.returncode == 0, p.stderr
    if c.mode != "netns":
        pytest.skip("loopback mode: homes are shared, byte-identity per node not meaningful")
    before = {i: (home_of(c, i) / ".ssh/authorized_keys").read_bytes() for i in range(1, N + 1)}
    stamps = {i: (home_of(c, i) / ".dtctl/setup.sh").stat().st_mtime_ns for i in range(1, N + 1)}
    # no password this time: the key must do
    p = dtctl("init", cfg, env={"DTCTL_PASSWORD": ""}, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "setting up" not in p.stdout, "setup ran again:\n" + p.stdout
    for n in c.nodes:
        line = [l for l in p.stdout.splitlines() if l.startswith(n.name + " ")][0]
        assert "unchanged" in line and "known" in line, line
    for i in range(1, N + 1):
        assert (home_of(c, i) / ".ssh/authorized_keys").read_bytes() == before[i]
        blob = (tmp_home / "id_ed25519.pub").read_bytes().split()[1]
        assert before[i].count(blob) == 1, "cluster key not exactly once in authorized_keys"
        assert (home_of(c, i) / ".dtctl/setup.sh").stat().st_mtime_ns == stamps[i]


def test_init_json_and_exit_codes(cluster, dtctl, tmp_home, tmp_path):
    import json
    c = cluster
    cfg = write_cluster(tmp_path / "cluster.yaml", c)
    p = dtctl("init", "--accept-new-hosts", "--json", cfg, env={"DTCTL_PASSWORD": c.password},
              timeout=120)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)["nodes"]
    assert [r["node"] for r in res] == [n.name for n in c.nodes]
    assert all(r["ok"] and r["fingerprint"].startswith("SHA256:") for r in res)
    assert all(r["facts"].get("hostname") for r in res)


def test_wrong_password(cluster, dtctl, tmp_home, tmp_path):
    cfg = write_cluster(tmp_path / "cluster.yaml", cluster)
    p = dtctl("init", "--accept-new-hosts", cfg, env={"DTCTL_PASSWORD": "not-" + cluster.password},
              timeout=120)
    assert p.returncode == 3, p.stdout + p.stderr
    for n in cluster.nodes:
        assert "%s: cannot log in" % n.name in p.stderr and "wrong password" in p.stderr


def test_new_host_key_without_tty_is_refused(cluster, dtctl, tmp_home, tmp_path):
    cfg = write_cluster(tmp_path / "cluster.yaml", cluster)
    p = dtctl("init", cfg, env={"DTCTL_PASSWORD": cluster.password}, timeout=120)
    assert p.returncode == 3
    assert "SHA256:" in p.stderr and "--accept-new-hosts" in p.stderr
    assert not (tmp_home / "known_hosts").exists() or \
        (tmp_home / "known_hosts").read_text().strip() == ""


def test_strict_policy_and_import(cluster, dtctl, tmp_home, tmp_path):
    c = cluster
    cfg = write_cluster(tmp_path / "cluster.yaml", c, extra="ssh: {host_key_policy: strict}\n")
    env = {"DTCTL_PASSWORD": c.password}
    p = dtctl("init", "--accept-new-hosts", cfg, env=env, timeout=120)
    assert p.returncode == 3 and "strict" in p.stderr, p.stderr
    # import from an OpenSSH known_hosts with hashed entries (ssh-keygen -H)
    kh = tmp_path / "user_known_hosts"
    lines = []
    for line in c.known_hosts.read_text().splitlines():
        names, rest = line.split(" ", 1)
        for n in c.nodes:   # file it under the address the cluster file uses
            if n.name in names.split(","):
                lines.append("%s %s" % (n.addr if n.port == 22 else "[%s]:%d" % (n.addr, n.port), rest))
    kh.write_text("\n".join(lines) + "\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(kh)], check=True, capture_output=True)
    assert "|1|" in kh.read_text()
    p = dtctl("hosts", "import", "--from", kh, "--cluster", cfg)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "imported %d keys" % N in p.stdout
    p = dtctl("init", cfg, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    p = dtctl("hosts", "list", "--cluster", cfg)
    assert p.returncode == 0 and p.stdout.count("SHA256:") == N


def test_duplicate_and_empty_nodes_are_usage_errors(cluster, dtctl, tmp_home, tmp_path):
    n = cluster.nodes[0]
    dup = write_cluster(tmp_path / "dup.yaml", cluster,
                        nodes="  - {host: %s, port: %d}\n  - {host: %s, port: %d}\n"
                        % (n.addr, n.port, n.addr, n.port))
    p = dtctl("init", "--accept-new-hosts", dup)
    assert p.returncode == 2, p.stderr
    empty = write_cluster(tmp_path / "empty.yaml", cluster, nodes="")
    empty.write_text(empty.read_text().replace("nodes:\n", "nodes: []\n"))
    p = dtctl("init", "--accept-new-hosts", empty)
    assert p.returncode == 2, p.stderr
    assert not (tmp_home / "id_ed25519").exists(), "init wrote a key despite a bad config"


def test_init_starts_agents_and_head(cluster, dtctl, tmp_home, tmp_path):
    """After init, dtsched runs on the head and every node's agent heartbeats to it: the
    nodes are UP with the GPU counts of cluster.yaml (faked with gpus: 2)."""
    import json
    import time
    c = cluster
    cfg = write_cluster(tmp_path / "cluster.yaml", c,
                        extra="agent: {heartbeat: 500ms, dead_after: 5s}\nhead: {address: %s}\n"
                        % c.host_addr)
    pw = tmp_path / "pw"
    pw.write_text(c.password + "\n")
    p = dtctl("init", "--accept-new-hosts", "--password-file", pw, cfg, timeout=120)
    assert p.returncode == 0, "init failed:\n%s\n%s" % (p.stdout, p.stderr)
    deadline = time.monotonic() + 20
    while True:
        r = dtctl("nodes", "--json", timeout=30)
        nodes = json.loads(r.stdout)["nodes"] if r.returncode == 0 else []
        up = sorted(n["name"] for n in nodes if n["state"] == "UP")
        if up == sorted(n.name for n in c.nodes) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert up == sorted(n.name for n in c.nodes), (r.stdout, r.stderr)
    assert all(n["gpus_total"] == 2 for n in nodes), nodes
    # stop them again: the fixture's teardown would also, but this is the command users run
    r = dtctl("agents", "stop", timeout=60)
    assert r.returncode == 0, r.stderr


def test_init_sets_up_node_to_node_ssh(cluster, dtctl, tmp_home, tmp_path):
    """mpirun on one node logs in to the others: init pushes the cluster key, the
    cluster's known_hosts and an ssh_config, so node 1 reaches node 2 by name and by
    address with host keys verified and no password; a re-run pushes nothing."""
    c = cluster
    cfg = write_cluster(tmp_path / "cluster.yaml", c)
    p = dtctl("init", "--no-agents", "--accept-new-hosts", cfg,
              env={"DTCTL_PASSWORD": c.password}, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    n2 = c.nodes[1]
    for target in (n2.name, n2.addr):
        r = c.exec(1, ["ssh", "-F", ".dtctl/ssh_config", target, "hostname"], user=True)
        assert r.returncode == 0 and r.stdout.strip() == n2.name, (target, r.stdout, r.stderr)
    key = home_of(c, 2) / ".dtctl" / "id_ed25519"
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.read_bytes() == (tmp_home / "id_ed25519").read_bytes()
    # a node with a forged key for node 2 is refused (checking is on, never "accept-new")
    kh = home_of(c, 1) / ".dtctl" / "known_hosts"
    good = kh.read_text()
    forged = good.replace(n2.addr + " ", n2.addr + "-gone ")
    kh.write_text(forged)
    r = c.exec(1, ["ssh", "-F", ".dtctl/ssh_config", n2.addr, "true"], user=True)
    assert r.returncode != 0 and "verification failed" in r.stderr, r.stderr
    kh.write_text(good)
    # re-run: nothing to push
    p = dtctl("init", "--no-agents", cfg, env={"DTCTL_PASSWORD": ""}, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "node-to-node ssh" not in p.stdout, p.stdout


def test_init_then_run_at_once(cluster, dtctl, tmp_home, tmp_path):
    """`dtctl init && dtctl run ...` works (issue 14): init returns only once every agent it
    started is UP in dtsched, says it started dtsched and how many agents are up in its last
    line, and its GPUS column reads like `dtctl nodes` (used/total, not `none`)."""
    from conftest import free_ports
    c = cluster
    port = free_ports(1)[0]
    cfg = write_cluster(tmp_path / "cluster.yaml", c,
                        extra="head: {address: %s, port: %d}\n" % (c.host_addr, port))
    p = dtctl("init", "--accept-new-hosts", cfg, env={"DTCTL_PASSWORD": c.password}, timeout=120)
    try:
        assert p.returncode == 0, p.stdout + p.stderr
        # at once, no waiting: every node is there for the scheduler
        r = dtctl("run", "-n", N, "--", "true", timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "started dtsched on :%d" % port in p.stdout, p.stdout
        assert p.stdout.splitlines()[-1] == "dtsched on :%d, %d agents up" % (port, N), p.stdout
        for n in c.nodes:
            line = [l for l in p.stdout.splitlines() if l.startswith(n.name + " ")][0]
            assert line.split()[5] == "0/2", line   # NODE ADDRESS RESULT HOST KEY(2) GPUS
        r = dtctl("nodes", timeout=30)
        assert all(" 0/2 " in l for l in r.stdout.splitlines()[1:]), r.stdout
    finally:
        dtctl("agents", "stop", timeout=60)


def pty_init(dtctl_bin, args, env, answers, timeout=120, password=None, on_output=None):
    """Run dtctl init on a pseudo-terminal (its controlling terminal, so /dev/tty is the pty):
    answer host key questions with `answers` in turn ('n' once they run out), and the
    password question with `password`; on_output(text so far) after each read.  Returns
    (exit code, everything written to the terminal)."""
    import fcntl
    import select
    import termios
    import time
    master, slave = os.openpty()
    proc = subprocess.Popen([str(dtctl_bin / "dtctl"), "init"] + [str(a) for a in args],
                            stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True,
                            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(slave)
    out, asked, pw_sent, deadline = b"", 0, False, time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 0.5)
        if r:
            try:
                chunk = os.read(master, 4096)
            except OSError:   # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
            if on_output:
                on_output(out.decode(errors="replace"))
            if out.count(b"accept and remember it in") > asked:
                os.write(master, (answers[asked] if asked < len(answers) else "n").encode() + b"\n")
                asked += 1
            if password and not pw_sent and b"password for the cluster's nodes" in out:
                os.write(master, password.encode() + b"\n")
                pw_sent = True
        elif proc.poll() is not None:
            break
    try:
        rc = proc.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return rc, out.decode(errors="replace")


def test_prompt_all_accepts_the_remaining_nodes(cluster, dtctl_bin, tmp_home, tmp_path):
    """One question on the terminal, answered `a`: that node's key and every other new key of
    the run are accepted (each fingerprint printed) and remembered; the question never
    follows the progress line on the same terminal line."""
    c = cluster
    cfg = write_cluster(tmp_path / "cluster.yaml", c)
    env = dict(os.environ, DTCTL_PASSWORD=c.password)
    rc, out = pty_init(dtctl_bin, ["--no-agents", cfg], env, ["a"])
    assert rc == 0, out
    assert out.count("accept and remember it in") == 1, out
    assert "(yes/no/all" in out, out
    assert out.count("accepted (answered 'all')") == N - 1, out
    assert out.count("SHA256:") >= N, out
    for i, q in enumerate(out.split("new host key for node")[1:], 1):
        before = out.split("new host key for node")[i - 1]
        assert before.endswith(("\n", "\x1b[K")) or before == "", repr(before[-80:])
    kh = (tmp_home / "known_hosts").read_text().splitlines()
    assert len([l for l in kh if l.strip() and not l.startswith("#")]) == N, kh


def test_pty_progress_counts_forward_and_prompts_come_after_the_notes(cluster, dtctl_bin,
                                                                     tmp_home, tmp_path):
    """First contact on a terminal, as a new user has it: a host key question answered
    `all`, then the password question. One node answers slowly (its egress limited to
    8 kbit/s, so its host key comes late) and one node's setup takes 2 s (so the progress line has counted
    up). The progress line only counts forward, and the password question comes after
    every host key line, never between them."""
    import re
    c = cluster
    if c.mode != "netns":
        pytest.skip("needs per-node network namespaces (fake cluster mode %s)" % c.mode)
    tpl = tmp_path / "setup.sh"
    tpl.write_text('case "$(hostname)" in %s) sleep 2;; esac\n' % c.nodes[0].name)
    cfg = write_cluster(tmp_path / "cluster.yaml", c, extra="setup:\n  template: %s\n" % tpl)
    env = dict(os.environ)
    env.pop("DTCTL_PASSWORD", None)
    slow = len(c.nodes)
    # the slow node's first 1.5 KB pass, its SSH key exchange reply then takes ~2 s; the
    # limit goes once its host key line or the password question is out (uploads follow)
    assert c.exec(slow, "tc qdisc add dev eth0 root tbf rate 8kbit burst 1540 latency 30s"
                  ).returncode == 0
    limited = [True]

    def unlimit(text):
        if limited[0] and ("password for the cluster's nodes" in text or
                           "%s: new host key" % c.nodes[slow - 1].name in text):
            c.exec(slow, "tc qdisc del dev eth0 root")
            limited[0] = False
    try:
        rc, out = pty_init(dtctl_bin, ["--no-agents", cfg], env, ["a"], password=c.password,
                           on_output=unlimit)
    finally:
        if limited[0]:
            c.exec(slow, "tc qdisc del dev eth0 root")
    assert rc == 0, out
    done = [int(d) for d in re.findall(r"(\d+) done, \d+ running", out)]
    assert done and max(done) > 0, out
    assert done == sorted(done), "the progress line counted backwards: %s\n%s" % (done, out)
    asked = out.index("password for the cluster's nodes")
    assert out.count("new host key") == len(c.nodes), out
    assert out.rindex("new host key") < asked, out


def test_init_names_agents_that_do_not_register(cluster, dtctl, tmp_home, tmp_path):
    """An agent that cannot reach the head (head.address goes nowhere) never registers: init
    waits its bounded time, fails that node naming its agent.log, exits 1 and says which
    agents are not up, instead of returning as if `dtctl run` could now place work there."""
    import time
    from conftest import free_ports
    c = cluster
    n1 = c.nodes[0]
    port = free_ports(1)[0]
    cfg = write_cluster(tmp_path / "cluster.yaml", c,
                        extra="head: {address: 192.0.2.1, port: %d}\n" % port)
    t0 = time.monotonic()
    p = dtctl("init", "--accept-new-hosts", "--nodes", n1.name, cfg,
              env={"DTCTL_PASSWORD": c.password}, timeout=120)
    try:
        assert p.returncode == 1, p.stdout + p.stderr
        assert 25 < time.monotonic() - t0 < 90
        err = [l for l in p.stderr.splitlines() if "has not registered" in l]
        assert err and n1.name in err[0] and "agent.log" in err[0], p.stderr
        assert p.stdout.splitlines()[-1] == "dtsched on :%d, 0 agents up; not up: %s" % (
            port, n1.name), p.stdout
    finally:
        dtctl("agents", "stop", "-c", cfg, timeout=60)
