"""`dtctl run` end to end on a 3-node fake cluster: dtsched on the host, one dtagent per
node running as the cluster user (dttest), the shared dir of the fake cluster.

Covered: a 2-node x 2-rank dttrain job with the mpi launcher (rank-log, passwordless ssh
between nodes set up here the way `dtctl init` must), the same with the agent launcher
(GPU only; on CPU dttrain refuses clearly and the job fails fast), a torchrun-style
Python script meeting at MASTER_ADDR:MASTER_PORT on 3 nodes, two jobs competing for the
same GPUs (one queues with its reason, then runs), and the faults: too big (refused with
the numbers, exit 2), invalid spec (exit 2, nothing queued), a segfaulting rank (FAILED,
others stopped within 5 s, nothing left, slots free), a node killed mid-job (NODE_FAIL,
retried elsewhere from the checkpoint), cancel while PENDING and RUNNING, Ctrl-C,
timeout, stall detection, and arguments/env with shell metacharacters arriving verbatim.
"""

import json
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import HeadCluster, gpu_skip
from dtapi import DtApi, read_secret

HEAD_PORT = 17671
AGENT_PORT = 17670
DEAD_AFTER_MS = 2000
PY = "/usr/bin/python3"


class Ctx(HeadCluster):
    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=4, tag="home",
                         dead_after_ms=DEAD_AFTER_MS)

    def show(self, job):
        p = self.dtctl("show", "--json", job)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["job"]

    def wait_job(self, job, states, timeout=30):
        deadline = time.time() + timeout
        while True:
            j = self.show(job)
            if j["state"] in states:
                return j
            if time.time() > deadline:
                raise AssertionError("job %s not %s after %ss: %s" % (job, states, timeout, j))
            time.sleep(0.1)

    def submit(self, *args):
        p = self.dtctl("run", "--detach", *args)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    def logs(self, job):
        p = self.dtctl("logs", "--shared-dir", self.fc.shared, job)
        assert p.returncode == 0, p.stderr
        return p.stdout



def procs_with(marker):
    """pids of processes (on any node: there is no pid namespace) whose argv has marker."""
    p = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return [int(x) for x in p.stdout.split() if int(x) != os.getpid()]


def wait_no_procs(marker, timeout):
    deadline = time.time() + timeout
    while procs_with(marker):
        if time.time() > deadline:
            ps = subprocess.run(["ps", "-o", "pid,args", "-p",
                                 ",".join(map(str, procs_with(marker)))],
                                capture_output=True, text=True).stdout
            raise AssertionError("processes left after %ss:\n%s" % (timeout, ps))
        time.sleep(0.1)


def setup_ssh(fc, ctx, tmp):
    """What `dtctl init` pushes to every node for mpirun: the cluster key in
    ~/.dtctl/id_ed25519 (here: the agent home), its public half in
    ~/.ssh/authorized_keys, the nodes' host keys in known_hosts and an ssh_config
    naming both (IdentityFile, UserKnownHostsFile, StrictHostKeyChecking yes,
    BatchMode yes, User)."""
    key = tmp / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    pub = (tmp / "id_ed25519.pub").read_text().strip()
    priv = key.read_text()
    known = Path(fc.known_hosts).read_text()
    for i in range(1, fc.n + 1):
        h = ctx.agent_home(i)
        conf = ("Host *\n  User %s\n  IdentityFile %s/id_ed25519\n  UserKnownHostsFile %s/known_hosts\n"
                "  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 5\n"
                % (fc.user, h, h))
        script = ("set -e; umask 077; mkdir -p %s ~/.ssh; cat > %s/id_ed25519 <<'EOF'\n%sEOF\n"
                  "cat > %s/known_hosts <<'EOF'\n%sEOF\ncat > %s/ssh_config <<'EOF'\n%sEOF\n"
                  "grep -qxF '%s' ~/.ssh/authorized_keys 2>/dev/null || echo '%s' >> ~/.ssh/authorized_keys\n"
                  % (h, h, priv, h, known, h, conf, pub, pub))
        p = fc.exec(i, script, user=True)
        assert p.returncode == 0, p.stderr


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    fc = fake_cluster(3)
    tmp = tmp_path_factory.mktemp("run")
    ctx = Ctx(fc, dtctl_bin, tmp)
    home = ctx.home
    try:
        assert ctx.dtctl("head", "start").returncode == 0
        secret = (home / "secret").read_text().strip()
        for i in range(1, fc.n + 1):
            p = fc.exec(i, "mkdir -p -m 700 %s && umask 077 && printf '%%s\\n' %s > %s/secret"
                        % (ctx.agent_home(i), secret, ctx.agent_home(i)), user=True)
            assert p.returncode == 0, p.stderr
        setup_ssh(fc, ctx, tmp)
        for i in range(1, fc.n + 1):
            ctx.start_agent(i)
        ctx.wait_nodes_up()
        yield ctx
        for j in ctx.jobs():
            if j["state"] in ("PENDING", "RUNNING"):
                ctx.dtctl("cancel", j["id"])
        for i in range(1, fc.n + 1):
            ctx.stop_agent(i)
        ctx.dtctl("head", "stop")
    finally:
        # whatever failed above: no dtsched left holding the port for the next module
        __import__("conftest").stop_home_daemons(home)


def gpus_free(ctx, timeout=10):
    """Every GPU free again: a job taking all of them starts and completes at once."""
    p = ctx.dtctl("run", "-n", 3, "-g", 4, "--name", "all-gpus", "--", "true", timeout=timeout + 20)
    assert p.returncode == 0, p.stdout + p.stderr


# ----------------------------------------------------------------------------- launches

def test_dry_run_prints_plan_and_starts_nothing(cluster):
    before = len(cluster.jobs())
    p = cluster.dtctl("run", "--dry-run", "-n", 2, "-g", 2, "-e", "A=1 2", "--", PY, "train.py",
                      "--lr", "3e-4")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for want in ("placement:", "hostfile", "slots=2", "RANK='1'", "MASTER_ADDR=", "A='1 2'",
                 "CUDA_VISIBLE_DEVICES='0,1'", "'train.py' '--lr' '3e-4'", "nothing was started"):
        assert want in out, (want, out)
    assert len(cluster.jobs()) == before


def test_slurm_spellings_of_a_node_count(cluster):
    """A Slurm user's `-N 2` is a node count as `-n 2` is; `--nodes 2`, Slurm's count, names
    nodes here: with no node called "2" it exits 2 with the hint, and nothing is queued."""
    before = len(cluster.jobs())
    p = cluster.dtctl("run", "--dry-run", "-N", 2, "-p", 1, "--", "true")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("slots=1") == 2, p.stdout
    p = cluster.dtctl("run", "-N", 2, "-p", 1, "--", "true")
    assert p.returncode == 0, p.stderr
    p = cluster.dtctl("run", "--nodes", 2, "-p", 1, "--", "true")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "no node is called '2'" in p.stderr and "-n 2 (or Slurm's -N 2)" in p.stderr, p.stderr
    assert len(cluster.jobs()) == before + 1


def test_missing_program_fails_at_once_naming_the_nodes(cluster):
    """`python` on nodes that have only python3 (Debian 12): the job fails before anything
    runs, its reason naming the program, every node and the fix."""
    import shutil
    if shutil.which("python", path="/usr/local/bin:/usr/bin:/bin"):
        pytest.skip("this machine has a python")
    p = cluster.dtctl("run", "-n", 3, "-p", 1, "--", "python", "-c", "print(1)")
    assert p.returncode == 127, p.stdout + p.stderr     # the shell's "command not found"
    want = ("'python' not found on %s (Debian has python3): set command: or install "
            "python-is-python3" % "dtnode[1-3]")
    if cluster.fc.mode == "netns":
        assert want in p.stderr, p.stderr
    else:
        assert "'python' not found on" in p.stderr, p.stderr
    p = cluster.dtctl("run", "-p", 1, "--", "no-such-tool")
    assert p.returncode == 127, p.stderr
    assert "'no-such-tool' not found on dtnode" in p.stderr, p.stderr
    assert "install it, or give its full path" in p.stderr, p.stderr
    p = cluster.dtctl("run", "-p", 1, "-w", "/tmp", "--", "./no-such-tool")
    assert p.returncode == 127, p.stderr
    assert "could not start: './no-such-tool' is not an executable file (from '/tmp')" in \
        p.stderr, p.stderr


def test_mpi_launcher_dttrain_2x2(cluster):
    if cluster.fc.mode != "netns":
        pytest.skip("mpirun across nodes needs distinct hostnames (fake cluster mode %s)"
                    % cluster.fc.mode)
    p = cluster.dtctl("run", "-n", 2, "-p", 2, "--launcher", "mpi", "--name", "mpi2x2", "--trainer",
                      "--", "--model=mlp", "--hidden=32", "--steps=6", "--train-size=512",
                      "--val-size=64", "--log-every=2", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "COMPLETED" in p.stderr
    job = re.search(r"job (j-\d+) submitted", p.stderr).group(1)
    j = cluster.show(job)
    assert j["launcher"] == "mpi" and j["world_size"] == 4
    assert [x["node"] for x in j["placement"]] == [cluster.fc.node(1).name, cluster.fc.node(2).name] \
        or len(j["placement"]) == 2
    jd = Path(j["job_dir"])
    assert sorted(x.name for x in (jd / "logs").glob("[0-9]*.log")) == ["0.log", "1.log", "2.log", "3.log"]
    ranks = [json.loads((jd / "ranks" / ("%d.json" % r)).read_text()) for r in range(4)]
    assert all(r["exit_code"] == 0 for r in ranks)
    # ranks 2 and 3 ran on the second node, through rank-log
    assert ranks[2]["node"] == j["placement"][1]["node"], ranks
    # the rank logger's lines: its marker (node, attempt: docs/run.md), output, end marker
    lines = (jd / "logs" / "0.log").read_text().splitlines()
    ts = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z "
    assert re.match(ts + "A 0 %s$" % re.escape(j["placement"][0]["node"]), lines[0]), lines
    assert all(re.match(ts + "[OE] ", l) for l in lines[1:-1]), lines
    assert re.match(ts + "Z$", lines[-1]), lines
    assert "done:" in p.stdout and "[%s 0]" % j["placement"][0]["node"] in p.stdout
    # the second node's orted came through its agent (`dtagent rsh`), not over ssh: a
    # task of that agent, labelled with the job, exited 0, its output in the job's logs
    i2 = next(i for i in range(1, cluster.fc.n + 1)
              if cluster.fc.node(i).name == j["placement"][1]["node"])
    addr2 = cluster.fc.node(i2).addr
    assert (jd / "logs" / ("orted-%s.log" % addr2)).exists(), sorted(os.listdir(jd / "logs"))
    api = DtApi(addr2, cluster.port(i2), read_secret(str(cluster.home)))
    # the job ends from the ranks' exit reports, before Open MPI's teardown (docs/run.md):
    # the orted exits by itself a moment later
    deadline = time.time() + 15
    while True:
        st, body = api.request("GET", "/v1/tasks/%s.0.orted-%s" % (job, addr2))
        assert st == 200, body
        t = body["task"]
        if t["state"] not in ("starting", "running", "stopping") or time.time() > deadline:
            break
        time.sleep(0.1)
    assert t["state"] == "exited" and t["exit_code"] == 0 and t["job_id"] == job, t
    assert "orted" in t["argv"][0] and "orte_hnp_uri" in t["argv"][0], t["argv"]


def test_mpi_orted_launch_ssh(cluster):
    """`mpi: {orted_launch: ssh}` in cluster.yaml: mpirun starts the orteds over ssh with
    init's ssh configuration instead of through the agents, and the job still runs."""
    if cluster.fc.mode != "netns":
        pytest.skip("mpirun across nodes needs distinct hostnames (fake cluster mode %s)"
                    % cluster.fc.mode)
    cy = cluster.home / "cluster.yaml"
    orig = cy.read_text()

    def plan_says(want, gone):
        # dtsched re-reads cluster.yaml when it changes (checked once a second)
        deadline = time.time() + 15
        while True:
            p = cluster.dtctl("run", "--dry-run", "-n", 2, "-p", 1, "--launcher", "mpi", "--",
                              "true")
            if p.returncode == 0 and want in p.stdout and gone not in p.stdout:
                return
            assert time.time() < deadline, p.stdout + p.stderr
            time.sleep(0.3)

    try:
        cy.write_text(orig + "mpi: {orted_launch: ssh}\n")
        plan_says("plm_rsh_args", "plm_rsh_agent")
        p = cluster.dtctl("run", "-n", 2, "-p", 1, "--launcher", "mpi", "--name", "mpissh", "--",
                          "hostname", timeout=90)
        assert p.returncode == 0, p.stdout + p.stderr
        job = re.search(r"job (j-\d+) submitted", p.stderr).group(1)
        j = cluster.show(job)
        jd = Path(j["job_dir"])
        assert not list((jd / "logs").glob("orted-*.log")), sorted(os.listdir(jd / "logs"))
        names = sorted(x["node"] for x in j["placement"])
        assert sorted(l.split()[-1] for l in p.stdout.splitlines() if l.strip()) == names, p.stdout
    finally:
        cy.write_text(orig)
    plan_says("plm_rsh_agent", "plm_rsh_args")


def test_rsh_through_an_agent(cluster):
    """`dtagent rsh HOST WORDS` (what mpirun runs instead of ssh) against a real agent: the
    words run on HOST as one task, its exit code comes back, a wrong key or an unknown
    host fail like ssh (255, with the reason), and SIGTERM stops the remote task."""
    if cluster.fc.mode != "netns":
        pytest.skip("needs a node with its own address (fake cluster mode %s)" % cluster.fc.mode)
    n2 = cluster.fc.node(2)
    probe = Path(cluster.fc.shared) / ("rsh-probe-" + uuid.uuid4().hex[:8])
    env = dict(os.environ, DTCTL_HOME=str(cluster.home), DT_TASK_ID="j-rsh%s.0.mpirun"
               % uuid.uuid4().hex[:6], DT_ORTED_AGENTS="%s=%d,elsewhere=1" % (n2.addr, cluster.port(2)))
    env.pop("DT_JOB_DIR", None)
    rsh = [str(cluster.bin / "dtagent"), "rsh"]
    # words are joined and run by a shell on the node, as ssh does with a remote command
    p = subprocess.run(rsh + [n2.addr, "hostname", ">", str(probe), ";", "exit", "7"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 7, p.stderr
    assert probe.read_text().strip() == n2.name
    # the same id twice (one task per attempt and host): refused, clearly
    p = subprocess.run(rsh + [n2.addr, "true"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 255 and "already exists" in p.stderr, p.stderr
    # no port for that host
    p = subprocess.run(rsh + ["10.99.0.1", "true"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 255 and "no agent port for host '10.99.0.1'" in p.stderr, p.stderr
    # another cluster's key: the agent refuses, nothing runs
    other = cluster.tmp / "other-home"
    other.mkdir(mode=0o700, exist_ok=True)
    (other / "secret").write_text("ab" * 32 + "\n")
    (other / "secret").chmod(0o600)
    p = subprocess.run(rsh + [n2.addr, "touch", str(probe) + ".bad"],
                       env=dict(env, DTCTL_HOME=str(other), DT_TASK_ID="j-bad.0.mpirun"),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 255 and "cannot start orted on %s" % n2.addr in p.stderr, p.stderr
    assert "401" in p.stderr or "signature" in p.stderr, p.stderr
    assert not Path(str(probe) + ".bad").exists()
    # hang-up: SIGTERM to rsh stops the remote task (as a dropped ssh session would)
    marker = "rshhup-" + uuid.uuid4().hex[:8]
    tid = "j-hup%s.0.mpirun" % uuid.uuid4().hex[:6]
    r = subprocess.Popen(rsh + [n2.addr, "sleep", "60", ";", "echo", marker],
                         env=dict(env, DT_TASK_ID=tid), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    while not procs_with("sleep 60 ; echo " + marker) and time.time() < deadline:
        time.sleep(0.05)
    assert procs_with("sleep 60 ; echo " + marker), "the remote task did not start"
    r.send_signal(signal.SIGTERM)
    assert r.wait(timeout=10) == 255
    wait_no_procs(marker, 6)
    api = DtApi(n2.addr, cluster.port(2), read_secret(str(cluster.home)))
    deadline = time.time() + 10     # the supervisor records the end a moment later
    while True:
        st, body = api.request("GET", "/v1/tasks/%s" % tid.replace(".mpirun", ".orted-" + n2.addr))
        assert st == 200 and body["task"]["stop_requested"], body
        if body["task"]["state"] != "stopping" or time.time() > deadline:
            break
        time.sleep(0.1)
    assert body["task"]["state"] == "exited", body


def test_agent_launcher_dttrain_2x2(cluster):
    """With GPUs, dttrain's ranks meet over NCCL's TCP rendezvous; on CPU dttrain needs
    mpirun for its collectives and says so: the job fails fast with that message."""
    p = cluster.dtctl("run", "-n", 2, "-p", 2, "--launcher", "agent", "--name", "agent2x2",
                      "--trainer", "--", "--model=mlp", "--hidden=32", "--steps=4",
                      "--train-size=512", "--val-size=64", timeout=60)
    if p.returncode == 0:
        assert "COMPLETED" in p.stderr
        return
    assert "FAILED" in p.stderr and "need MPI" in p.stdout, p.stdout + p.stderr
    gpu_skip("no GPU here: dttrain's CPU ranks need the mpi launcher (the agent-launched "
             "job failed fast with dttrain's message, as it should)")


TORCHRUN_STYLE = r'''
import os, socket, sys, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(world)
    seen = set()
    while len(seen) < world - 1:
        c, _ = s.accept(); seen.add(int(c.recv(16).decode())); c.sendall(b"ok"); c.close()
    print("rank 0 met ranks %s at %s:%d" % (sorted(seen), addr, port))
else:
    for _ in range(200):
        try:
            c = socket.create_connection((addr, port), timeout=2); break
        except OSError:
            time.sleep(0.05)
    c.sendall(str(rank).encode()); assert c.recv(2) == b"ok"
    print("rank %d/%d local %s node %s joined %s:%d" % (rank, world, os.environ["LOCAL_RANK"],
          os.environ["NODE_RANK"], addr, port))
print("PATH starts with", os.environ["PATH"].split(":")[0], file=sys.stderr)
'''


def test_torchrun_style_script_on_3_nodes(cluster):
    p = cluster.dtctl("run", "-n", 3, "-p", 1, "--name", "torchrun", "--", PY, "-c", TORCHRUN_STYLE)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 0 met ranks [1, 2]" in p.stdout, p.stdout
    for r in (1, 2):
        assert "rank %d/3 local 0 node %d joined" % (r, r) in p.stdout, p.stdout
    # every line carries node and rank; PATH begins with the node's dtctl bin dir
    assert "[%s 2] rank 2/3" % cluster.fc.node(3).name in p.stdout, p.stdout
    assert "PATH starts with %s" % cluster.bin in p.stdout, p.stdout
    port = int(re.search(r"met ranks \[1, 2\] at [\d.]+:(\d+)", p.stdout).group(1))
    assert 29500 <= port <= 29999


def test_two_jobs_compete_one_queues(cluster):
    marker = "compete-" + uuid.uuid4().hex[:8]
    # the first job holds every GPU until the test lets it end (a fixed sleep could end it
    # before a loaded dtsched looked at the second)
    release = Path(cluster.fc.shared) / marker
    a = cluster.submit("-n", 3, "-g", 4, "--name", "first", "--", "sh", "-c",
                       'while [ ! -e "$1" ]; do sleep 0.1; done', marker, str(release))
    cluster.wait_job(a, ["RUNNING"])
    b = cluster.submit("-n", 2, "-g", 3, "--name", "second", "--", "true", marker)
    deadline = time.time() + 20
    while True:
        jb = cluster.show(b)
        assert jb["state"] == "PENDING", jb
        if "waiting for 2 node(s) with 3 free slot(s)" in (jb["reason"] or ""):
            break
        assert time.time() < deadline, jb
        time.sleep(0.1)
    p = cluster.dtctl("ps")
    assert b in p.stdout and "(waiting for" in p.stdout, p.stdout
    release.write_text("")
    ja = cluster.wait_job(a, ["COMPLETED"], 15)
    jb = cluster.wait_job(b, ["COMPLETED"], 15)
    assert jb["started_at"] >= ja["ended_at"], (ja, jb)
    release.unlink()


def test_too_big_refused_with_numbers(cluster):
    before = len(cluster.jobs())
    p = cluster.dtctl("run", "-n", 2, "-g", 8, "--", "true")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "needs 2 node(s) with 8 slot(s) each" in p.stderr and "0 of the 3" in p.stderr, p.stderr
    p = cluster.dtctl("run", "-n", 4, "-g", 1, "--", "true")
    assert p.returncode == 2 and "needs 4 node(s)" in p.stderr, p.stderr
    assert len(cluster.jobs()) == before


def test_invalid_spec_exit_2_nothing_queued(cluster, tmp_path):
    before = len(cluster.jobs())
    bad = tmp_path / "job.yaml"
    bad.write_text("nodes: 2\ncommand: [true]\nbogus: 1\n")
    p = cluster.dtctl("run", bad)
    assert p.returncode == 2 and "bogus" in p.stderr, p.stderr
    p = cluster.dtctl("run", "-g", 2, "-p", 2, "--", "true")
    assert p.returncode == 2, p.stderr
    p = cluster.dtctl("run", "-n", 1)
    assert p.returncode == 2 and "nothing to run" in p.stderr, p.stderr
    p = cluster.dtctl("run", "--timeout", "soon", "--", "true")
    assert p.returncode == 2, p.stderr
    assert len(cluster.jobs()) == before


def test_metacharacters_reach_program_verbatim(cluster, tmp_path):
    canary = tmp_path / "pwned"
    tricky = ["a b", "$(touch %s)" % canary, "`touch %s`" % canary, "\"q'uote", "semi;colon&&|",
              "new\nline", "*", "", "tab\there", "ünï"]
    script = "import sys,os,json; print('ARGS=' + json.dumps([sys.argv[1:], os.environ['TRICKY']]))"
    p = cluster.dtctl("run", "-e", "TRICKY=" + tricky[1] + " ; " + tricky[5] + " 'x'", "--",
                      PY, "-c", script, *tricky)
    assert p.returncode == 0, p.stdout + p.stderr
    line = [l for l in p.stdout.splitlines() if "ARGS=" in l][0]
    args, env = json.loads(line.split("ARGS=", 1)[1])
    assert args == tricky
    assert env == tricky[1] + " ; " + tricky[5] + " 'x'"
    assert not canary.exists()


# ----------------------------------------------------------------------------- faults

FAILER = r'''
import os, signal, sys, time
if int(os.environ["RANK"]) == 1:
    time.sleep(1.0); print("rank 1 crashing", flush=True); os.kill(os.getpid(), signal.SIGSEGV)
time.sleep(120)
'''


def test_rank_segfault_fails_fast_and_cleans_up(cluster):
    marker = "segv-" + uuid.uuid4().hex[:8]
    p = cluster.dtctl("run", "-n", 3, "-g", 1, "--name", "segv", "--", PY, "-c", FAILER, marker,
                      timeout=60)
    assert p.returncode == 139, p.stdout + p.stderr
    job = re.search(r"job (j-\d+) submitted", p.stderr).group(1)
    j = cluster.show(job)
    assert j["state"] == "FAILED" and j["exit_code"] == 139 and j["failed_rank"] == 1, j
    assert j["failed_node"] == j["placement"][1]["node"]
    assert "signal 11" in j["reason"] and "rank 1" in p.stderr
    # the other ranks are stopped within 5 s of the crash, nothing is left anywhere
    wait_no_procs(marker, 5)
    crash = [h["at"] for h in j["history"] if h["state"] == "FAILED"][0]
    assert crash
    gpus_free(cluster)


NODE_KILL = r'''
import os, sys, time
jd, rank = os.environ["DT_JOB_DIR"], int(os.environ["RANK"])
resume = os.environ.get("DT_RESUME")
if resume:
    print("rank %d resumed from %s: %s (world %s)" % (rank, os.path.basename(resume),
          open(resume).read(), os.environ["WORLD_SIZE"]), flush=True)
    sys.exit(0)
if rank == 0:
    os.makedirs(jd + "/ckpt", exist_ok=True)
    with open(jd + "/ckpt/.tmp", "w") as f: f.write("step 7")
    os.rename(jd + "/ckpt/.tmp", jd + "/ckpt/step-7.ckpt")
print("rank %d checkpointed, training" % rank, flush=True)
time.sleep(120)
'''


def wait_checkpointed(cluster, job, timeout=60):
    """Every rank of a NODE_KILL job said it checkpointed (rank 0 wrote ckpt/step-7.ckpt
    first): Python's start takes its time on a loaded machine, more than any fixed sleep."""
    n = cluster.show(job)["world_size"]
    deadline = time.time() + timeout
    while cluster.logs(job).count("checkpointed, training") < n:
        assert time.time() < deadline, cluster.logs(job)
        time.sleep(0.2)


def kill_node(cluster, job, victim):
    """The node dies: its agent, the supervisors and job's rank there, all at once.
    Returns the node's index (cluster.start_agent(i) brings it back)."""
    i = [n.index for n in cluster.fc.nodes if n.name == victim][0]
    agent_pid = int(cluster.fc.exec(i, "cat %s/agent.pid" % cluster.agent_home(i)).stdout)
    victims = [agent_pid] + [int(x) for x in subprocess.run(
        ["pgrep", "-f", "--", "--home %s" % cluster.agent_home(i)], capture_output=True,
        text=True).stdout.split()]
    for r in cluster.show(job)["ranks"]:
        if r["node"] == victim and r["pid"]:
            victims.append(r["pid"])
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return i


def test_node_killed_node_fail_then_retry_from_checkpoint(cluster):
    marker = "nodekill-" + uuid.uuid4().hex[:8]
    job = cluster.submit("-n", 2, "-g", 4, "--retries", 1, "--name", "nodekill", "--",
                         PY, "-c", NODE_KILL, marker)
    j = cluster.wait_job(job, ["RUNNING"])
    wait_checkpointed(cluster, job)
    victim = j["placement"][1]["node"]
    i = kill_node(cluster, job, victim)
    try:
        j = cluster.wait_job(job, ["COMPLETED", "FAILED", "NODE_FAIL"], 30)
        assert j["state"] == "COMPLETED", j
        hist = [h["state"] for h in j["history"]]
        assert "NODE_FAIL" in hist and hist[-1] == "COMPLETED", j["history"]
        assert j["attempt"] == 1 and victim in j["avoid"], j
        assert victim not in [x["node"] for x in j["placement"]], j
        logs = cluster.logs(job)
        assert "rank 0 resumed from step-7.ckpt: step 7" in logs, logs
        assert "rank 1 resumed from step-7.ckpt" in logs, logs
    finally:
        cluster.start_agent(i)
        cluster.wait_nodes_up()
    wait_no_procs(marker, 10)
    gpus_free(cluster)


def test_cancel_pending_and_running(cluster):
    marker = "cancel-" + uuid.uuid4().hex[:8]
    a = cluster.submit("-n", 3, "-g", 4, "--name", "long", "--", "sh", "-c", "sleep 120", marker)
    cluster.wait_job(a, ["RUNNING"])
    b = cluster.submit("-n", 1, "-g", 1, "--name", "queued", "--", "sh", "-c", "sleep 120", marker)
    assert cluster.show(b)["state"] == "PENDING"
    p = cluster.dtctl("cancel", b)
    assert p.returncode == 0 and "CANCELLED" in p.stdout, p.stdout + p.stderr
    assert cluster.show(b)["state"] == "CANCELLED"
    t0 = time.time()
    p = cluster.dtctl("cancel", a)
    assert p.returncode == 0, p.stderr
    cluster.wait_job(a, ["CANCELLED"], 5)
    wait_no_procs(marker, 6)
    assert time.time() - t0 < 6
    jb = cluster.show(b)
    assert jb["state"] == "CANCELLED" and not jb["started_at"], jb
    assert cluster.dtctl("cancel", "j-999999").returncode == 2
    gpus_free(cluster)


@pytest.mark.parametrize("launcher", ["agent", "mpi"])
def test_signal_reaches_every_rank_and_the_job_goes_on(cluster, launcher):
    """`dtctl cancel --signal USR1`: the backend's signal op (agents: POST
    /v1/tasks/<id>/signal, the supervisor signals the task's tree; mpi: mpirun's
    and the orteds') reaches both ranks, which trap it and end by themselves:
    COMPLETED, not CANCELLED."""
    if launcher == "mpi" and cluster.fc.mode != "netns":
        pytest.skip("mpirun across nodes needs distinct hostnames (fake cluster mode %s)"
                    % cluster.fc.mode)
    marker = "signal-" + uuid.uuid4().hex[:8]
    # each rank counts its SIGUSR1s and stays 3 s after the first, so that a second
    # delivery (mpirun or a rank logger passing it on again) is counted too
    script = ("r=${RANK:-$OMPI_COMM_WORLD_RANK}; n=0; "
              "trap 'n=$((n+1)); echo got-usr1 rank $r number $n' USR1; echo ready; "
              "while [ $n = 0 ]; do sleep 0.1; done; "
              "i=0; while [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; exit 0")
    p = cluster.dtctl("cancel", "--signal", "NOPE", "j-1")
    assert p.returncode == 2 and "'NOPE' is not a signal" in p.stderr, p.stderr
    assert cluster.dtctl("cancel", "--signal", "USR1", "j-999999").returncode == 2
    size = ["-g", 1] if launcher == "agent" else ["-p", 1]
    job = cluster.submit("-n", 2, *size, "--launcher", launcher, "--name", "sig", "--", "sh",
                         "-c", script, marker)
    cluster.wait_job(job, ["RUNNING"])
    deadline = time.time() + 20
    while cluster.logs(job).count("ready") < 2:   # the traps are set
        assert time.time() < deadline, cluster.logs(job)
        time.sleep(0.1)
    p = cluster.dtctl("cancel", "--signal", "SIGUSR1", job)
    assert p.returncode == 0, p.stderr
    # agent: one task per rank; mpi: mpirun's and an orted on the other node
    assert p.stdout.strip() == "%s: SIGUSR1 sent to its ranks (2 tasks)" % job, p.stdout
    j = cluster.wait_job(job, ["COMPLETED", "FAILED", "CANCELLED"], 40)
    logs = cluster.logs(job)
    assert j["state"] == "COMPLETED", (j.get("reason"), logs)
    # exactly once for every rank
    got = sorted(ln.split("got-usr1 ", 1)[1] for ln in logs.splitlines() if "got-usr1" in ln)
    assert got == ["rank 0 number 1", "rank 1 number 1"], logs
    # over: nothing to signal (409 -> exit 1), and it says why
    p = cluster.dtctl("cancel", "--signal", "10", job)
    assert p.returncode == 1 and "no attempt of it is running" in p.stderr, p.stderr
    wait_no_procs(marker, 5)
    gpus_free(cluster)


def test_ctrl_c_cancels_attached_job(cluster):
    marker = "ctrlc-" + uuid.uuid4().hex[:8]
    proc = cluster.popen("run", "-n", 2, "-g", 2, "--name", "ctrlc", "--", "sh", "-c",
                         "echo started; sleep 120", marker)
    deadline = time.time() + 20
    job = None
    while time.time() < deadline and not job:
        for j in cluster.jobs():
            if j["name"] == "ctrlc" and j["state"] == "RUNNING":
                job = j["id"]
        time.sleep(0.1)
    assert job, "the attached job never ran"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, out + err
    assert cluster.show(job)["state"] == "CANCELLED"
    wait_no_procs(marker, 6)


def test_timeout(cluster):
    marker = "timeout-" + uuid.uuid4().hex[:8]
    p = cluster.dtctl("run", "--timeout", "2s", "-g", 1, "--name", "slow", "--", "sh", "-c",
                      "sleep 60", marker, timeout=30)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "TIMEOUT" in p.stderr and "timeout of 2s" in p.stderr, p.stderr
    wait_no_procs(marker, 6)


def test_stall_detection(cluster):
    marker = "stall-" + uuid.uuid4().hex[:8]
    job = cluster.submit("-g", 1, "--stall-after", "1s", "--name", "stally", "--", "sh", "-c",
                         "echo hello; sleep 120", marker)
    cluster.wait_job(job, ["RUNNING"])
    deadline = time.time() + 10
    while time.time() < deadline:
        j = cluster.show(job)
        if j["stalled"]:
            break
        time.sleep(0.2)
    assert j["stalled"] and j["stalled"][0]["rank"] == 0 and j["stalled"][0]["pid"], j
    p = cluster.dtctl("ps")
    assert "STALLED" in p.stdout and "pid %d" % j["stalled"][0]["pid"] in p.stdout, p.stdout
    assert "STALLED rank 0 on %s" % j["placement"][0]["node"] in \
        (Path(j["job_dir"]) / "events.log").read_text()
    cluster.dtctl("cancel", job)
    cluster.wait_job(job, ["CANCELLED"], 5)
    wait_no_procs(marker, 6)


def test_ps_show_and_state_files(cluster):
    p = cluster.dtctl("ps", "--all")
    assert p.returncode == 0 and "JOBID" in p.stdout and "NODELIST(REASON)" in p.stdout
    jobs = cluster.jobs()
    done = [j for j in jobs if j["state"] == "COMPLETED"][0]
    jd = Path(done["job_dir"])
    assert (jd / "state").read_text().strip() == "COMPLETED"
    pl = json.loads((jd / "placement.json").read_text())
    assert pl["ranks"][0]["rank"] == 0 and pl["ranks"][0]["node"]
    p = cluster.dtctl("show", done["id"])
    assert p.returncode == 0 and "history:" in p.stdout and "ranks:" in p.stdout
    assert re.search(r"\bj-\d{6}\b", done["id"])
    # logs -f of a finished job returns at once
    p = cluster.dtctl("logs", "-f", "--shared-dir", cluster.fc.shared, done["id"], timeout=10)
    assert p.returncode == 0


MPI_FAILER = r'''
import os, signal, time
if int(os.environ["OMPI_COMM_WORLD_RANK"]) == 2:
    time.sleep(1.0); print("rank 2 crashing", flush=True); os.kill(os.getpid(), signal.SIGSEGV)
time.sleep(120)
'''


def test_mpi_rank_segfault_and_cancel_leave_nothing(cluster):
    """mpi launcher: a crashing rank fails the job with that rank and node; a cancelled
    mpi job takes mpirun, every orted and every rank with it."""
    if cluster.fc.mode != "netns":
        pytest.skip("mpirun across nodes needs distinct hostnames (fake cluster mode %s)"
                    % cluster.fc.mode)
    marker = "mpisegv-" + uuid.uuid4().hex[:8]
    p = cluster.dtctl("run", "-n", 2, "-p", 2, "--launcher", "mpi", "--name", "mpisegv", "--",
                      PY, "-c", MPI_FAILER, marker, timeout=60)
    assert p.returncode == 139, p.stdout + p.stderr
    job = re.search(r"job (j-\d+) submitted", p.stderr).group(1)
    j = cluster.show(job)
    assert j["state"] == "FAILED" and j["failed_rank"] == 2, j
    assert j["failed_node"] == j["placement"][1]["node"], j
    wait_no_procs(marker, 5)
    wait_no_procs("orted", 5)

    marker = "mpicancel-" + uuid.uuid4().hex[:8]
    job = cluster.submit("-n", 2, "-p", 2, "--launcher", "mpi", "--name", "mpicancel", "--",
                         "sh", "-c", "sleep 120", marker)
    cluster.wait_job(job, ["RUNNING"])
    deadline = time.time() + 10
    while len(procs_with("sleep 120 " + marker)) < 4 and time.time() < deadline:
        time.sleep(0.1)
    assert len(procs_with("sleep 120 " + marker)) >= 4
    assert procs_with("orted")
    cluster.dtctl("cancel", job)
    cluster.wait_job(job, ["CANCELLED"], 5)
    wait_no_procs(marker, 6)
    deadline = time.time() + 6
    while procs_with("orted") and time.time() < deadline:
        time.sleep(0.1)
    assert not procs_with("orted"), "an orted survived the cancel"


def node_of(cluster, name):
    """(index, address) of the fake node dtctl calls name."""
    i = next(i for i in range(1, cluster.fc.n + 1) if cluster.fc.node(i).name == name)
    return i, cluster.fc.node(i).addr


# rank 1 stops its orted (rank-log's parent) before it ends: Open MPI's teardown can then
# never finish, and only the ranks' own exit reports can end the job
STOP_ORTED = ('if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then '
              'kill -STOP "$(cut -d" " -f4 /proc/$PPID/stat)"; fi; echo "rank $OMPI_COMM_WORLD_RANK done"')


def test_mpi_job_ends_from_rank_exits_and_tears_down(cluster):
    """mpi launcher: the job ends when every rank has ended, as the ranks' agents report
    it (rank_exits, protocol.h), not when mpirun's and the orteds' teardown is over.  The
    second node's orted is stopped (SIGSTOP) by its rank, so mpirun cannot finish: the job
    is still COMPLETED with exit 0 while that orted is there, its task carrying rank 1's
    exit; then dtsched tears the attempt down (mpirun stopped STOP_RESEND_MS after the
    end, the orted with it or as an orphan) and no orted or mpirun is left on any node."""
    if cluster.fc.mode != "netns":
        pytest.skip("mpirun across nodes needs distinct hostnames (fake cluster mode %s)"
                    % cluster.fc.mode)
    marker = "mpiend-" + uuid.uuid4().hex[:8]
    p = cluster.dtctl("run", "-n", 2, "-p", 1, "--launcher", "mpi", "--name", "mpiend", "--",
                      "sh", "-c", STOP_ORTED, marker, timeout=60)
    assert p.returncode == 0 and "COMPLETED" in p.stderr, p.stdout + p.stderr
    assert "rank 0 done" in p.stdout and "rank 1 done" in p.stdout, p.stdout
    job = re.search(r"job (j-\d+) submitted", p.stderr).group(1)
    j = cluster.show(job)
    assert j["state"] == "COMPLETED" and j["exit_code"] == 0, j
    secret = read_secret(str(cluster.home))
    i1, addr1 = node_of(cluster, j["placement"][0]["node"])
    i2, addr2 = node_of(cluster, j["placement"][1]["node"])
    a1, a2 = DtApi(addr1, cluster.port(i1), secret), DtApi(addr2, cluster.port(i2), secret)
    # the job ended with the orted still there (stopped), its task not final
    st, body = a2.request("GET", "/v1/tasks/%s.0.orted-%s" % (job, addr2))
    assert st == 200, body
    t = body["task"]
    assert t["state"] in ("running", "stopping"), t
    assert [(x["rank"], x["exit_code"]) for x in t.get("rank_exits", [])] == [(1, 0)], t
    st, body = a1.request("GET", "/v1/tasks/%s.0.mpirun" % job)
    assert st == 200, body
    assert [(x["rank"], x["exit_code"]) for x in body["task"].get("rank_exits", [])] == [(0, 0)]
    assert procs_with("orted")
    # torn down: every task of the job final, no orted or mpirun on any node
    deadline = time.time() + 30
    while True:
        live = [x["id"] for a in (a1, a2) for x in a.request("GET", "/v1/tasks")[1]["tasks"]
                if x.get("job_id") == job and x["state"] not in ("exited", "failed", "lost")]
        if not live and not procs_with("orted") and not procs_with("mpirun"):
            break
        assert time.time() < deadline, (live, procs_with("orted"), procs_with("mpirun"))
        time.sleep(0.2)
    # the slots are free again
    cluster.wait_job(cluster.submit("-n", 2, "-p", 1, "--launcher", "mpi", "--", "true"),
                     ["COMPLETED"], 30)


def test_orted_of_an_ended_attempt_gets_grace(cluster):
    """An orted task of an attempt that has ended is left ORTED_GRACE_MS (5 s) to exit by
    itself (the job now ends before Open MPI's teardown is over, and a stopped orted of a
    job that ended well would exit 143 instead of 0); after that dtsched stops it as an
    orphan.  Any other leftover task of the job is stopped at the next orphan scan."""
    p = cluster.dtctl("run", "-n", 1, "-p", 1, "--launcher", "mpi", "--name", "grace", "--",
                      "true", timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    job = re.search(r"job (j-\d+) submitted", p.stderr).group(1)
    j = cluster.show(job)
    i1, addr1 = node_of(cluster, j["placement"][0]["node"])
    api = DtApi(addr1, cluster.port(i1), read_secret(str(cluster.home)))
    ids = {"orted": "%s.0.orted-late" % job, "other": "%s.0.leftover" % job}
    for tid in ids.values():
        st, body = api.request("POST", "/v1/tasks", {"id": tid, "argv": ["sleep", "60"],
                                                     "job_id": job, "grace_ms": 1000})
        assert st == 201, body
    ended = {}
    deadline = time.time() + 30
    while len(ended) < 2:
        for k, tid in ids.items():
            st, body = api.request("GET", "/v1/tasks/%s" % tid)
            if body["task"]["ended_at"] and k not in ended:
                assert body["task"]["stop_requested"], body
                ended[k] = ts_parse(body["task"]["ended_at"])
        assert time.time() < deadline, ended
        time.sleep(0.2)
    job_end = ts_parse(cluster.show(job)["ended_at"])
    assert ended["other"] < ended["orted"], ended
    assert ended["orted"] - job_end >= 4.9, (ended, job_end)
    assert "task '%s' of job %s" % (ids["orted"], job) in \
        (cluster.home / "dtsched.log").read_text(errors="replace")


def ts_parse(s):
    import calendar
    base, frac = s.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) + int(frac) / 1e6


# another job of the same user forging the victim's ends (issue 26, B1/B2): on the
# agent's report socket, as the old channel's files in the agent's tasks dir, and as
# a final state written into the victim's task file
FORGE = r'''
import json, os, socket, sys, time
victim, tasks = sys.argv[1], sys.argv[2]
tid = victim + ".0.mpirun"
sock = os.environ["DT_AGENT_SOCKET"]
addr = "\0" + sock[1:] if sock.startswith("@") else sock
now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for code, sig in ((139, 11), (0, 0)):
    for rank in range(3):
        rec = {"kind": "rank_exit", "task": tid, "rank": rank, "exit_code": code,
               "signal": sig, "ended_at": now}
        s.sendto(json.dumps(rec).encode(), addr)
        p = os.path.join(tasks, "%s@%d.rankexit" % (tid, rank))
        with open(p + ".tmp", "w") as f:
            f.write(json.dumps(rec))
        os.rename(p + ".tmp", p)
s.sendto(json.dumps({"kind": "task_end", "task": tid}).encode(), addr)
f = os.path.join(tasks, tid + ".json")
t = json.load(open(f))
t.update(state="exited", exit_code=139, signal=11)
with open(f + ".x", "w") as out:
    out.write(json.dumps(t))
os.rename(f + ".x", f)
print("forged-by", os.getpid())
'''


def test_mpi_job_ends_only_from_its_own_ranks(cluster):
    """Another job of the same user cannot end or fail an MPI job, nor get the node
    drained, by forging its ranks' exit records (issue 26 B1/B2): three forged failing
    (signal 11) and three forged successful rank exits on the agent's report socket, the
    same as files where the agent used to take them, a forged task end and a forged
    final state in the victim's task file.  The victim keeps running and ends normally
    from its own rank; the agent logs each refusal with the forger's pid; the node stays
    UP with no failure counted."""
    node = cluster.fc.node(1).name
    victim = cluster.submit("-n", 1, "-p", 1, "--launcher", "mpi", "--nodes", node,
                            "--name", "victim", "--", "sh", "-c",
                            "echo victim-start; sleep 15; echo victim-done")
    cluster.wait_job(victim, ["RUNNING"], 30)
    deadline = time.time() + 20
    while "victim-start" not in cluster.logs(victim):
        assert time.time() < deadline, cluster.logs(victim)
        time.sleep(0.1)
    p = cluster.dtctl("run", "-n", 1, "-p", 1, "--nodes", node, "--name", "forger", "--",
                      PY, "-c", FORGE, victim, cluster.agent_home(1) + "/tasks", timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    forger = int(re.search(r"forged-by (\d+)", p.stdout).group(1))
    j = cluster.show(victim)
    assert j["state"] == "RUNNING", j
    j = cluster.wait_job(victim, ["COMPLETED", "FAILED"], 30)
    assert j["state"] == "COMPLETED" and j["exit_code"] == 0, j
    assert "victim-done" in cluster.logs(victim)
    log = cluster.fc.exec(1, "cat %s/agent.log" % cluster.agent_home(1), user=True).stdout
    assert ("refused a rank exit report for task '%s.0.mpirun' from pid %d"
            % (victim, forger)) in log, log
    assert ("refused a task end report for task '%s.0.mpirun' from pid %d"
            % (victim, forger)) in log, log
    assert "task %s.0.mpirun: its file says it ended, but its supervisor" % victim in log, log
    n = [x for x in json.loads(cluster.dtctl("nodes", "--json").stdout)["nodes"]
         if x["name"] == node][0]
    assert n["state"] == "UP" and n["drain_reason"] is None, n
