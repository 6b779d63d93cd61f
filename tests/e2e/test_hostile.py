"""The shared dir is hostile ground: what a job's ranks plant there never hurts the head.

dtsched runs as root on the host (as docs/run.md allows for root_squash setups) and the
ranks run as the unprivileged cluster user on a fake node, so every attack here is one a
real user's code could make:

  - symlinks at every path dtsched writes in a job dir (state, its old temp name
    state.tmp.<dtsched pid>, job.yaml, hostfile, placement.json, events.log) pointing at
    a root-owned 0600 file: the target keeps its bytes, owner and mode;
  - FIFOs at ckpt/latest (a job with retries) and at a sweep trial's metrics.jsonl, a
    socket and a 2 GB sparse file there: dtsched keeps answering within 2 s and the
    job/sweep ends;
  - state.db lost: ids go on past the job dirs on the shared dir, old dirs are left
    untouched, and the first new job runs (the agents still hold records of the old ids);
  - a rank daemonizes (setsid, env -i) where no cgroup is made: it is gone when the job
    ends, and `dtctl show` says the containment was the supervisor (subreaper);
  - a full shared disk (a 1 MiB tmpfs, on a one-node local cluster): the job's lost
    lines are counted and shown by run, show and ps; strict_logging makes it FAILED.
"""

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from conftest import HeadCluster, LocalCluster, stop_home_daemons

HEAD_PORT = 17771
AGENT_PORT = 17770


class Ctx(HeadCluster):
    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=0, tag="hostile",
                         dead_after_ms=3000)

    def start_agent(self, i):
        """As HeadCluster's, with cgroups off: containment must not rest on them."""
        n = self.fc.node(i)
        p = self.fc.exec(i, ["env", "DTAGENT_NO_CGROUP=1", str(self.bin / "dtagent"),
                             "--home", self.agent_home(i), "--daemon", "--name", n.name,
                             "--bind", n.addr, "--port", str(self.port(i)), "--gpus", "0",
                             "--heartbeat-ms", "300",
                             "--head", "%s:%d" % (self.fc.host_addr, self.head_port)], user=True)
        assert p.returncode == 0, "agent on %s: %s" % (n.name, p.stderr)

    def show(self, job):
        p = self.dtctl("show", "--json", job, timeout=5)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["job"]

    def wait_job(self, job, states, timeout=40):
        deadline = time.time() + timeout
        while True:
            j = self.show(job)
            if j["state"] in states:
                return j
            assert time.time() < deadline, "job %s not %s after %ss: %s" % (job, states, timeout, j)
            time.sleep(0.2)

    def submit(self, *args):
        p = self.dtctl("run", "--detach", *args)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout.strip()

    def answers_fast(self, what):
        """dtsched answers a request within 2 s (the head is not blocked)."""
        t0 = time.monotonic()
        p = self.dtctl("ps", "--json", timeout=10)
        took = time.monotonic() - t0
        assert p.returncode == 0 and took < 2.0, "%s: dtctl ps took %.1fs: %s" % (what, took,
                                                                                 p.stderr)


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    fc = fake_cluster(1)
    tmp = tmp_path_factory.mktemp("hostile")
    ctx = Ctx(fc, dtctl_bin, tmp)
    try:
        assert ctx.dtctl("head", "start").returncode == 0
        secret = (ctx.home / "secret").read_text().strip()
        p = fc.exec(1, "mkdir -p -m 700 %s && umask 077 && printf '%%s\\n' %s > %s/secret"
                    % (ctx.agent_home(1), secret, ctx.agent_home(1)), user=True)
        assert p.returncode == 0, p.stderr
        ctx.start_agent(1)
        ctx.wait_nodes_up()
        yield ctx
        ctx.stop_agent(1)
        ctx.dtctl("head", "stop")
    finally:
        stop_home_daemons(ctx.home)


def victim(tmp_path):
    """A root-owned 0600 file the cluster user can neither read nor write."""
    v = tmp_path / "victim"
    v.write_text("root's own\n")
    os.chmod(v, 0o600)
    os.chmod(tmp_path, 0o755)
    return v


def assert_untouched(v):
    st = os.lstat(v)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o600, st
    assert v.read_text() == "root's own\n"


def test_planted_symlinks_are_never_followed(cluster, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs dtsched running as root")
    v = victim(tmp_path)
    pid = (cluster.home / "dtsched.pid").read_text().split()[0]
    names = ["state", "state.tmp.%s" % pid, "job.yaml", "hostfile", "placement.json",
             "events.log"]
    plant = "; ".join('rm -f "$DT_JOB_DIR/%s"; ln -s %s "$DT_JOB_DIR/%s"' % (n, v, n)
                      for n in names)
    job = cluster.tmp / "links.yaml"
    # silent for 3 s with stall_after 1s: dtsched appends STALLED to events.log
    job.write_text("name: links\nprocs_per_node: 1\nstall_after: 1s\n"
                   "command: [sh, -c, '%s; sleep 3']\n" % plant.replace("'", "''"))
    jid = cluster.submit(job)
    j = cluster.wait_job(jid, ("COMPLETED", "FAILED"))
    assert j["state"] == "COMPLETED", j
    assert_untouched(v)
    jd = Path(j["job_dir"])
    # the links that dtsched replaces are regular files again, owned by the cluster user
    st = os.lstat(jd / "state")
    assert stat.S_ISREG(st.st_mode) and st.st_uid != 0, st
    assert (jd / "state").read_text() == "COMPLETED\n"
    log = (cluster.home / "dtsched.log").read_text()
    assert "events.log" in log and "symbolic link" in log, log[-2000:]


def test_fifo_at_ckpt_latest_does_not_block_the_head(cluster):
    script = ('if [ ! -e "$DT_JOB_DIR/tried" ]; then '
              'touch "$DT_JOB_DIR/tried"; mkfifo "$DT_JOB_DIR/ckpt/latest"; '
              'mkfifo "$DT_JOB_DIR/metrics.jsonl"; exit 3; fi; echo second')
    job = cluster.tmp / "fifo.yaml"
    job.write_text("name: fifo\nprocs_per_node: 1\nretries: 1\ncommand: [sh, -c, '%s']\n"
                   % script.replace("'", "''"))
    jid = cluster.submit(job)
    deadline = time.time() + 30
    while time.time() < deadline:
        cluster.answers_fast("retry with a FIFO at ckpt/latest")
        j = cluster.show(jid)
        if j["state"] in ("COMPLETED", "FAILED"):
            break
        time.sleep(0.3)
    assert j["state"] == "COMPLETED" and j["attempt"] == 1, j
    assert stat.S_ISFIFO(os.lstat(Path(j["job_dir"]) / "ckpt" / "latest").st_mode)


@pytest.mark.parametrize("plant", ["fifo", "socket", "sparse", "dir"])
def test_sweep_trial_metrics_file_hostile(cluster, plant):
    make = {
        "fifo": 'mkfifo "$DT_METRICS_FILE"',
        "socket": '/usr/bin/python3 -c "import socket,sys; socket.socket(socket.AF_UNIX)'
                  '.bind(sys.argv[1])" "$DT_METRICS_FILE"',
        "sparse": 'truncate -s 2G "$DT_METRICS_FILE"',
        "dir": 'mkdir "$DT_METRICS_FILE"',
    }[plant]
    f = cluster.tmp / ("sweep-%s.yaml" % plant)
    f.write_text("method: grid\nmetric: {name: loss, goal: minimize}\n"
                 "parameters:\n  x: {values: [1]}\n"
                 "job: {name: hostile-%s, procs_per_node: 1,\n"
                 "      command: [sh, -c, '%s; sleep 2; echo \"DTCTL_METRIC {\\\"loss\\\": 1}\"']}\n"
                 % (plant, make.replace("'", "''")))
    p = cluster.dtctl("sweep", "--detach", f)
    assert p.returncode == 0, p.stdout + p.stderr
    sid = p.stdout.strip().split()[-1] if p.stdout.strip() else p.stderr.split("sweep ")[1].split()[0]
    deadline = time.time() + 40
    while True:
        cluster.answers_fast("sweep trial with a %s at metrics.jsonl" % plant)
        q = cluster.dtctl("sweep", "export", "--json", sid, timeout=5)
        assert q.returncode == 0, q.stderr
        ex = json.loads(q.stdout)
        if ex["sweep"]["state"] not in ("RUNNING", "PAUSED"):
            break
        assert time.time() < deadline, ex
        time.sleep(0.3)
    # the metric still arrives on stdout; the planted file is ignored
    assert [t["state"] for t in ex["trials"]] == ["COMPLETED"], ex["trials"]
    assert ex["trials"][0]["value"] == 1


def head_rebuilt(cluster, lose_shared_jobs=False):
    """dtsched stopped, its state.db (and WAL/SHM) gone, the shared dir's jobs/ too when
    asked, dtsched started again and the nodes UP in it."""
    import shutil
    assert cluster.dtctl("head", "stop").returncode == 0
    for suffix in ("", "-wal", "-shm"):
        try:
            (cluster.home / ("state.db" + suffix)).unlink()
        except FileNotFoundError:
            pass
    if lose_shared_jobs:
        shutil.rmtree(Path(cluster.fc.shared) / "jobs")
    assert cluster.dtctl("head", "start").returncode == 0
    cluster.wait_nodes_up()


def test_lost_state_db_ids_never_repeat(cluster):
    old = cluster.submit("--name", "before", "--", "true")
    j = cluster.wait_job(old, ("COMPLETED",))
    old_dir = Path(j["job_dir"])
    (old_dir / "mark").write_text("mine\n")
    before = sorted(p.name for p in old_dir.iterdir())
    head_rebuilt(cluster)
    new = cluster.submit("--name", "after", "--", "echo", "fresh")
    assert int(new.split("-")[1]) > int(old.split("-")[1]), (old, new)
    j2 = cluster.wait_job(new, ("COMPLETED", "FAILED"))
    assert j2["state"] == "COMPLETED", j2
    assert sorted(p.name for p in old_dir.iterdir()) == before
    assert (old_dir / "mark").read_text() == "mine\n"
    assert (old_dir / "state").read_text() == "COMPLETED\n"
    # state.db and its WAL/SHM are private
    for f in cluster.home.glob("state.db*"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_lost_state_db_and_shared_dir_ids_never_repeat(cluster):
    """The head rebuilt and the shared dir lost as well: only the agents' task files
    remember the old ids. Their heartbeats raise the next id past them, and the new
    head's jobs run (no "task ... already exists" failure)."""
    old = [cluster.submit("--name", "before", "--", "true") for _ in range(2)]
    for j in old:
        assert cluster.wait_job(j, ("COMPLETED",))["state"] == "COMPLETED"
    head_rebuilt(cluster, lose_shared_jobs=True)
    # the condition the ids rest on: the agents' whole task tables reached the new head
    deadline = time.time() + 10
    while True:
        p = cluster.dtctl("api", "GET", "/v1/tasks")
        assert p.returncode == 0, p.stderr
        known = {t["job_id"] for t in json.loads(p.stdout)["tasks"]}
        if set(old) <= known:
            break
        assert time.time() < deadline, known
        time.sleep(0.1)
    new = [cluster.submit("--name", "after", "--", "echo", "fresh") for _ in range(3)]
    highest = max(int(j.split("-")[1]) for j in old)
    assert all(int(j.split("-")[1]) > highest for j in new), (old, new)
    for j in new:
        j2 = cluster.wait_job(j, ("COMPLETED", "FAILED"))
        assert j2["state"] == "COMPLETED", j2


def test_daemonized_rank_is_killed_without_cgroup(cluster):
    mark = "317.%d" % (os.getpid() % 100000)
    jid = cluster.submit("--name", "daemon", "--", "sh", "-c",
                         "setsid env -i /bin/sleep %s </dev/null >/dev/null 2>&1 & sleep 0.5; "
                         "exit 0" % mark)
    j = cluster.wait_job(jid, ("COMPLETED", "FAILED"))
    assert j["state"] == "COMPLETED", j
    deadline = time.time() + 10
    while subprocess.run(["pgrep", "-f", "sleep %s" % mark], capture_output=True).returncode == 0:
        assert time.time() < deadline, "the daemonized 'sleep %s' survived its job" % mark
        time.sleep(0.2)
    assert [r["containment"] for r in j["ranks"]] == ["subreaper"], j["ranks"]


# ------------------------------------------------------------------ full shared disk

@pytest.fixture(scope="module")
def full_disk(dtctl_bin, tmp_path_factory):
    """A one-node local cluster whose shared dir is a 1 MiB tmpfs."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path_factory.mktemp("fulldisk"), name="full")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(c.shared)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        c.start()
        yield c
    finally:
        c.stop()
        subprocess.run(["umount", "-l", str(c.shared)])


FILL = ("i=0; while [ $i -le 2000 ]; do printf 'line %05d %0900d\\n' $i 0; i=$((i+1)); done")


def test_full_shared_disk_is_a_visible_warning(full_disk):
    p = full_disk.dtctl("run", "-n", "1", "--name", "filler", "--", "sh", "-c", FILL, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "could not be logged" in p.stderr, p.stderr
    jid = json.loads(full_disk.dtctl("ps", "--all", "--json").stdout)["jobs"][-1]["id"]
    j = json.loads(full_disk.dtctl("show", "--json", jid).stdout)["job"]
    assert j["state"] == "COMPLETED", j
    lost = j["log_lost_lines"]
    logged = 0
    logf = Path(j["job_dir"]) / "logs" / "0.log"
    if logf.exists():
        logged = sum(1 for line in logf.read_bytes().splitlines() if b" O line " in line)
    assert lost > 0 and 0 < logged + lost <= 2001 + 1 and logged + lost >= 2001, (logged, lost)
    assert "No space left on device" in (j["log_error"] or ""), j
    assert any("could not be logged" in w for w in j["warnings"]), j
    show = full_disk.dtctl("show", jid)
    assert "could not be logged" in show.stdout, show.stdout
    ps = full_disk.dtctl("ps", "--all")
    assert "lost" in ps.stdout, ps.stdout
    # free the space, then the same with strict_logging: FAILED, exit 1
    subprocess.run(["rm", "-rf", j["job_dir"] + "/logs"])
    job = full_disk.tmp / "strict.yaml"
    job.write_text("name: strict\nprocs_per_node: 1\nstrict_logging: true\n"
                   "command: [sh, -c, \"%s\"]\n" % FILL.replace('"', '\\"'))
    p = full_disk.dtctl("run", job, timeout=90)
    assert p.returncode == 1, p.stdout + p.stderr
    jid = json.loads(full_disk.dtctl("ps", "--all", "--json").stdout)["jobs"][-1]["id"]
    j = json.loads(full_disk.dtctl("show", "--json", jid).stdout)["job"]
    assert j["state"] == "FAILED" and "strict_logging" in j["reason"], j


def test_fifo_at_a_rank_log_does_not_hang_logs_or_show(cluster):
    """A rank swaps its own log for a FIFO: `dtctl logs` and `show` answer at once."""
    jid = cluster.submit("--name", "logfifo", "--", "sh", "-c",
                         'echo before; rm -f "$DT_JOB_DIR/logs/0.log"; '
                         'mkfifo "$DT_JOB_DIR/logs/0.log"; echo after')
    j = cluster.wait_job(jid, ("COMPLETED", "FAILED"))
    assert stat.S_ISFIFO(os.lstat(Path(j["job_dir"]) / "logs" / "0.log").st_mode)
    t0 = time.monotonic()
    p = cluster.dtctl("logs", jid, timeout=10)
    assert time.monotonic() - t0 < 5, "dtctl logs hung on a FIFO"
    assert p.returncode != 0 and "FIFO" in p.stderr, p.stdout + p.stderr
    cluster.answers_fast("a FIFO at logs/0.log")
