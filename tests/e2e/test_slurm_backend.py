"""`backend: slurm` (docs/slurm-backend.md) against a real Slurm 22.05 on the fake cluster:
dtsched (as the cluster's user) submits one sbatch per attempt, whose step starts our
agents (dtctl slurm-agents), and launches the ranks on them.  The job is PENDING with
Slurm's reason while Slurm queues it, RUNNING once the agents joined, and ends as on
dtctl's own nodes; cancel, scancel from outside and `scontrol requeue` end or restart it."""

import json
import os
import pwd
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from conftest import free_ports, stop_home_daemons
from test_slurm import DUMP, check_torchrun_env, envs_of, node_tmp_entries, user_processes
from test_sweep import ASHA_TRIAL


class SlurmHead:
    """dtsched with `backend: slurm` in a private DTCTL_HOME, run by the fake cluster's
    user (whom Slurm runs the allocations as)."""

    def __init__(self, slurm, bin_dir, home, port):
        self.slurm, self.fc, self.bin, self.home, self.port = slurm, slurm.fc, bin_dir, home, port
        pw = pwd.getpwnam(self.fc.user)
        self.uid = pw.pw_uid
        self.env = {"DTCTL_HOME": str(home), "DTCTL_NO_SYSTEMD": "1", "NO_COLOR": "1",
                    "TMPDIR": "/tmp"}
        for k in ("DTCTL_SHARED_DIR", "DTCTL_CLUSTER"):
            self.env[k] = ""
        self.base_yaml = ("cluster: sb\nshared_dir: %s\nbackend: slurm\npartition: %s\n"
                          "head: {address: %s, port: %d}\n"
                          % (self.fc.shared, slurm.partition, self.fc.host_addr, port))
        self.write_yaml(self.base_yaml)

    def write_yaml(self, text):
        p = self.home / "cluster.yaml"
        p.write_text(text)
        os.chown(p, self.uid, -1)

    def dtctl(self, *args, timeout=90):
        env = dict(os.environ, **self.env)
        env.pop("DTCTL_SHARED_DIR")
        env.pop("DTCTL_CLUSTER")
        return self.slurm.run([str(self.bin / "dtctl")] + [str(a) for a in args], user=True,
                              env=env, timeout=timeout)

    def show(self, job):
        p = self.dtctl("show", "--json", job)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["job"]

    def wait_job(self, job, pred, what, timeout=90):
        deadline = time.monotonic() + timeout
        while True:
            j = self.show(job)
            if pred(j):
                return j
            assert time.monotonic() < deadline, "job %s not %s after %ss: %s\n%s" % (
                job, what, timeout, j, self.slurm.log("slurmctld.log", 15))
            time.sleep(0.2)

    def submit(self, *args):
        p = self.dtctl("run", "-d", *args)
        assert p.returncode == 0, "dtctl run -d: %s%s" % (p.stdout, p.stderr)
        return p.stdout.strip().split()[-1]

    def squeue_state(self, sid):
        p = self.slurm.run(["scontrol", "-o", "show", "job", str(sid)])
        m = re.search(r"JobState=(\S+)", p.stdout)
        return m.group(1) if m else None

    def our_processes(self):
        """The user's processes that are not this head's (agents, ranks, sruns)."""
        return {pid: c for pid, c in user_processes(self.uid).items()
                if "dtsched" not in c}

    def wait_nothing_left(self, timeout=30):
        """No agent, rank or srun of ours on any node, and no agent's home in any node's
        /tmp (each removes its own when it stops)."""
        deadline = time.monotonic() + timeout
        left = self.our_processes()
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self.our_processes()
        assert not left, "left on the nodes: %s" % left
        homes = node_tmp_entries(self.fc, "dtagent-slurm-")
        while homes and time.monotonic() < deadline:
            time.sleep(0.1)
            homes = node_tmp_entries(self.fc, "dtagent-slurm-")
        assert not homes, "agent homes left: %s" % homes


@pytest.fixture(scope="module")
def head(slurm_cluster, dtctl_bin):
    slurm = slurm_cluster(2, gpus=4)
    pw = pwd.getpwnam(slurm.fc.user)
    home = Path(tempfile.mkdtemp(prefix="dtctl-sbhome-", dir="/var/tmp"))
    os.chown(home, pw.pw_uid, pw.pw_gid)
    os.chmod(home, 0o700)
    h = SlurmHead(slurm, Path(dtctl_bin), home, free_ports(1)[0])
    try:
        p = h.dtctl("head", "start")
        assert p.returncode == 0, p.stderr
        yield h
        p = h.dtctl("ps", "--json")
        for j in json.loads(p.stdout)["jobs"] if p.returncode == 0 else []:
            if j["state"] in ("PENDING", "RUNNING"):
                h.dtctl("cancel", j["id"])
        h.dtctl("head", "stop")
    finally:
        stop_home_daemons(home)
        shutil.rmtree(home, ignore_errors=True)


def test_2x2_job_torchrun_env_logs_and_slurm_job(head):
    """A 2-node x 2-GPU job through Slurm: each rank gets torchrun's environment and its
    node's two GRES GPUs, runs inside Slurm's allocation, `dtctl logs` has every rank, `show`
    names the Slurm job, which ends COMPLETED with nothing left on the nodes."""
    p = head.dtctl("run", "-N", "2", "-g", "2", "--", "/usr/bin/python3", "-c", DUMP,
                   timeout=180)
    assert p.returncode == 0, "dtctl run: rc %d\n%s%s\n%s" % (
        p.returncode, p.stdout, p.stderr, head.slurm.log("slurmctld.log", 20))
    envs = envs_of(p.stdout)
    job = envs[0]["DT_JOB_ID"]
    j = head.show(job)
    assert j["state"] == "COMPLETED", j
    sid = j["slurm"]["job_id"]
    check_torchrun_env(envs, ["dtnode1", "dtnode2"], 2, str(sid))
    for r, e in envs.items():   # each rank sees its node's share of the GRES GPUs
        assert e["CUDA_VISIBLE_DEVICES"] == "0,1", (r, e)
    p = head.dtctl("show", job)
    assert re.search(r"slurm:\s+job %d\b" % sid, p.stdout), p.stdout
    p = head.dtctl("logs", job)
    assert p.returncode == 0, p.stderr
    assert sorted(envs_of(p.stdout)) == [0, 1, 2, 3], p.stdout
    # the allocation ends once the job does: its agents exit, Slurm says COMPLETED
    assert head.slurm.wait_job_gone(str(sid)) == "COMPLETED"
    head.wait_nothing_left()


def test_pending_with_slurm_reason_cancel_and_scancel(head):
    """While Slurm queues the job it is PENDING with Slurm's reason; cancel removes it from
    Slurm's queue; a running job cancelled through dtctl leaves nothing on any node; one
    cancelled with scancel from outside is CANCELLED, not FAILED."""
    a = head.submit("-N", "2", "-g", "4", "--", "sleep", "300")
    head.wait_job(a, lambda j: j["state"] == "RUNNING", "RUNNING")
    b = head.submit("-N", "1", "-g", "1", "--", "sleep", "300")
    jb = head.wait_job(b, lambda j: "Resources" in (j["reason"] or ""), "waiting on Resources")
    assert jb["state"] == "PENDING"
    sid_b = jb["slurm"]["job_id"]
    assert re.search(r"Slurm job %d PENDING \(Resources\)" % sid_b, jb["reason"]), jb
    assert head.squeue_state(sid_b) == "PENDING"
    p = head.dtctl("ps")
    assert "Slurm job %d PENDING (Resources)" % sid_b in p.stdout, p.stdout
    # cancel while queued: gone from Slurm too
    assert head.dtctl("cancel", b).returncode == 0
    assert head.show(b)["state"] == "CANCELLED"
    assert head.slurm.wait_job_gone(str(sid_b)) == "CANCELLED"
    # cancel while running: the ranks, the agents and the allocation are gone
    ja = head.show(a)
    sid_a = ja["slurm"]["job_id"]
    p = head.dtctl("ps")
    assert re.search(r"%s .* RUNNING .*dtnode1,dtnode2 \(slurm %d\)" % (a, sid_a), p.stdout), \
        p.stdout
    assert any("sleep 300" in c for c in head.our_processes().values())
    assert head.dtctl("cancel", a).returncode == 0
    head.wait_job(a, lambda j: j["state"] == "CANCELLED", "CANCELLED")
    assert head.slurm.wait_job_gone(str(sid_a)) in ("COMPLETED", "CANCELLED")
    head.wait_nothing_left()
    # scancel from outside: noticed, CANCELLED with why
    c = head.submit("-N", "2", "-p", "1", "--", "sleep", "300")
    jc = head.wait_job(c, lambda j: j["state"] == "RUNNING", "RUNNING")
    p = head.slurm.run(["scancel", str(jc["slurm"]["job_id"])])
    assert p.returncode == 0, p.stderr
    jc = head.wait_job(c, lambda j: j["state"] not in ("PENDING", "RUNNING"), "ended")
    assert jc["state"] == "CANCELLED", jc
    assert "cancelled in Slurm (scancel of job %d)" % jc["slurm"]["job_id"] in jc["reason"], jc
    head.wait_nothing_left()


RESUMER = r"""
import os, sys, time
d = os.environ["DT_JOB_DIR"] + "/ckpt"
print("RESUME=%s RESTARTS_SEEN" % os.environ.get("DT_RESUME", ""), flush=True)
if os.environ.get("DT_RESUME"):
    sys.exit(0)
if os.environ["RANK"] == "0":
    os.makedirs(d, exist_ok=True)
    with open(d + "/step-7.tmp", "w") as f:
        f.write("7")
    os.rename(d + "/step-7.tmp", d + "/step-7")
time.sleep(300)
"""


def slurm_outputs(head, job):
    """Slurm's output files of job's sbatches: what a failed run said."""
    return "\n".join("--- %s:\n%s" % (p.name, p.read_text(errors="replace")[-3000:])
                     for p in sorted((head.fc.shared / "slurm").glob(job + ".*.out")))


def start_requeued_now(head, sid):
    """A requeued Slurm job waits for its begin time (about 2 minutes): an admin's nudge,
    once Slurm has finished the requeue (it sets that begin time last).  Nothing to nudge
    when Slurm ended the requeued job instead (the first run's late exit taken as its end:
    dtsched submits the restart as a new Slurm job)."""
    deadline = time.monotonic() + 60
    while True:
        out = head.slurm.run(["scontrol", "-o", "show", "job", str(sid)]).stdout
        if "Reason=BeginTime" in out:
            break
        if re.search(r"JobState=(FAILED|COMPLETED)\b", out):
            return
        assert time.monotonic() < deadline, "Slurm job %d never waited for BeginTime" % sid
        time.sleep(0.1)
    head.slurm.run(["scontrol", "update", "JobId=%d" % sid, "StartTime=now"])


@pytest.mark.parametrize("how", ["scontrol-requeue", "node-down"])
def test_requeue_resumes_from_checkpoint(head, how):
    """`scontrol requeue` (what preemption does), or one of the job's nodes dying (every
    process of the job there killed, then the node DOWN in Slurm, what a dead slurmd comes
    to after SlurmdTimeout): Slurm requeues the job, which goes back to PENDING, runs again
    as restart 1 from its checkpoint (DT_RESUME) without using a retry, and completes."""
    job = head.submit("-N", "2", "-p", "1", "--", "/usr/bin/python3", "-c", RESUMER)
    j = head.wait_job(job, lambda j: j["state"] == "RUNNING", "RUNNING")
    sid = j["slurm"]["job_id"]
    ckpt = head.fc.shared / "jobs" / job / "ckpt" / "step-7"
    deadline = time.monotonic() + 60
    while not ckpt.exists():
        assert time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.1)
    if how == "scontrol-requeue":
        p = head.slurm.run(["scontrol", "requeue", str(sid)])
    else:
        killed = node_tmp_entries(head.fc, "dtagent-slurm-%d." % sid)
        for pid in head.our_processes():
            try:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    if b"\0SLURMD_NODENAME=dtnode2\0" in b"\0" + f.read():
                        os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        p = head.slurm.run(["scontrol", "update", "NodeName=dtnode2", "State=DOWN",
                            "Reason=test"])
        # what a dead node leaves in its /tmp is the node's, not ours to check
        for e in killed:
            node, name = e.split(":", 1)
            if node == "dtnode2":
                shutil.rmtree(head.fc.state / "node2" / "tmp" / name, ignore_errors=True)
    assert p.returncode == 0, p.stderr
    try:
        j = head.wait_job(job, lambda j: j["attempt"] == 1, "requeued")
    finally:
        if how == "node-down":
            head.slurm.run(["scontrol", "update", "NodeName=dtnode2", "State=RESUME"])
    assert "Slurm requeued job %d" % sid in json.dumps(j["history"]), j
    start_requeued_now(head, sid)
    j = head.wait_job(job, lambda j: j["state"] not in ("PENDING", "RUNNING"), "ended",
                      timeout=120)
    assert j["state"] == "COMPLETED", "%s\nhistory: %s\nslurm: %s\n%s\nslurmctld:\n%s\n%s" % (
        j["reason"], j["history"], j["slurm"], slurm_outputs(head, job),
        head.slurm.log("slurmctld.log", 40), head.slurm.log("slurmd.dtnode1.log", 30))
    # the same Slurm job ran again; or Slurm ended it after the requeue (its first run's
    # late exit taken as the end, under load) and dtsched submitted the restart anew
    assert j["restarts"] == 1, j
    if j["slurm"]["job_id"] != sid:
        print("Slurm ended job %d before it ran again; the restart ran as job %d"
              % (sid, j["slurm"]["job_id"]))
        assert "after requeueing it, before it ran again" in \
            (head.home / "dtsched.log").read_text(), j
    p = head.dtctl("logs", job)
    assert "RESUME=%s/jobs/%s/ckpt/step-7" % (head.fc.shared, job) in p.stdout, p.stdout
    head.wait_nothing_left()


def test_requeued_run_that_cannot_start_its_agents_names_slurms_output_file(head):
    """A requeued Slurm job keeps its output file, named at sbatch for the attempt that
    submitted it: when its next run fails before the agents joined (here: each node's /tmp
    closed to the job's user, so no agent can make its home), the job FAILED
    naming that file, which holds the agents' own message.  (When Slurm ends the
    requeued job before it runs again, seen under load, the restart is a new Slurm job,
    the next id, whose file is named for this attempt: the same holds for it.)"""
    job = head.submit("-N", "2", "-p", "1", "--", "/usr/bin/python3", "-c", RESUMER)
    j = head.wait_job(job, lambda j: j["state"] == "RUNNING", "RUNNING")
    sid = j["slurm"]["job_id"]
    assert head.slurm.run(["scontrol", "requeue", str(sid)]).returncode == 0
    head.wait_job(job, lambda j: j["attempt"] == 1, "requeued")
    # the first run's agents are gone with their homes; the next run's could not make theirs
    deadline = time.monotonic() + 30
    while node_tmp_entries(head.fc, "dtagent-slurm-%d." % sid):
        assert time.monotonic() < deadline, node_tmp_entries(head.fc, "dtagent-slurm-")
        time.sleep(0.1)
    # each node's /tmp closed to the job's user: its agents cannot make their homes there
    # (a planted name no longer stops them: they make a fresh one by mkdtemp)
    tmps = [head.fc.state / ("node%d" % i) / "tmp" for i in range(1, head.fc.n + 1)]
    try:
        for t in tmps:
            os.chmod(t, 0o755)
        start_requeued_now(head, sid)
        j = head.wait_job(job, lambda j: j["state"] not in ("PENDING", "RUNNING"), "ended",
                          timeout=120)
    finally:
        for t in tmps:
            os.chmod(t, 0o1777)
    assert j["state"] == "FAILED" and "before its agents joined" in j["reason"], j["reason"]
    m = re.search(r"; see (\S+)\)$", j["reason"])
    assert m and m.group(1) in ("%s/slurm/%s.0-%d.out" % (head.fc.shared, job, sid),
                                "%s/slurm/%s.1-%d.out" % (head.fc.shared, job, sid + 1)), \
        (j["reason"], slurm_outputs(head, job))
    assert re.search(r"--slurm: cannot create '\S*/dtagent-slurm-\d+\.\d+-\S+': "
                     r"Permission denied", Path(m.group(1)).read_text()), slurm_outputs(head, job)
    head.wait_nothing_left()


WARNED = r"""
import signal, time
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
print("READY", flush=True)
deadline = time.time() + 120
while not got and time.time() < deadline:
    time.sleep(0.05)
print("WARNED=%s" % (got[0] if got else "none"), flush=True)
"""


def test_slurm_warning_before_the_time_limit_reaches_every_rank(head):
    """Every attempt's sbatch asks for Slurm's warning before the time limit
    (--signal=B:USR1@120), which Slurm sends to the batch shell only: what `scancel --batch
    --signal=USR1` does here at once.  `dtctl slurm-agents` (the batch shell) passes it on
    through dtsched (the backend's signal op) to every rank, on both nodes, once; the
    allocation goes on and the job completes, nothing left."""
    job = head.submit("-N", "2", "-p", "1", "--", "/usr/bin/python3", "-c", WARNED)
    j = head.wait_job(job, lambda j: j["state"] == "RUNNING", "RUNNING")
    sid = j["slurm"]["job_id"]
    deadline = time.monotonic() + 60
    while head.dtctl("logs", job).stdout.count("READY") < 2:
        assert time.monotonic() < deadline, head.dtctl("logs", job).stdout
        time.sleep(0.2)
    p = head.slurm.run(["scancel", "--batch", "--signal=USR1", str(sid)])
    assert p.returncode == 0, p.stderr
    j = head.wait_job(job, lambda j: j["state"] not in ("PENDING", "RUNNING"), "ended")
    assert j["state"] == "COMPLETED", j
    out = head.dtctl("logs", job).stdout
    assert out.count("WARNED=%d" % signal.SIGUSR1) == 2, out
    slurm_out = head.fc.shared / "slurm" / ("%s.0-%d.out" % (job, sid))
    assert "passed on to the ranks of job %s" % job in slurm_out.read_text()
    assert head.slurm.wait_job_gone(str(sid)) == "COMPLETED"
    head.wait_nothing_left()


def test_configured_warning_comes_from_slurm_before_the_limit(head):
    """cluster.yaml's `slurm: {signal: USR2, warn_s: 110}`: a job with a one-minute
    timeout gets --time=2 and Slurm itself sends SIGUSR2 110 s before that limit (about
    10 s in, plus Slurm's up to 30 s between time-limit checks), passed on to every rank;
    the job completes and nothing is left."""
    head.write_yaml(head.base_yaml + "slurm: {signal: USR2, warn_s: 110}\n")
    try:
        time.sleep(1.1)           # cluster.yaml is re-read at most once a second
        job = head.submit("-N", "2", "-p", "1", "--timeout", "1m", "--", "/usr/bin/python3",
                          "-c", WARNED.replace("SIGUSR1", "SIGUSR2"))
        j = head.wait_job(job, lambda j: j["state"] == "RUNNING", "RUNNING")
        sid = j["slurm"]["job_id"]
        j = head.wait_job(job, lambda j: j["state"] not in ("PENDING", "RUNNING"), "ended",
                          timeout=75)
    finally:
        head.write_yaml(head.base_yaml)
        time.sleep(1.1)
    assert j["state"] == "COMPLETED", (j["reason"], head.dtctl("logs", job).stdout)
    out = head.dtctl("logs", job).stdout
    assert out.count("WARNED=%d" % signal.SIGUSR2) == 2, out
    assert head.slurm.wait_job_gone(str(sid)) == "COMPLETED"
    head.wait_nothing_left()


FAILS_ONCE = r"""
import os, sys
print("ATTEMPT=%s RANK=%s" % (os.environ["DT_ATTEMPT"], os.environ["RANK"]), flush=True)
sys.exit(3 if os.environ["DT_ATTEMPT"] == "0" and os.environ["RANK"] == "1" else 0)
"""


def test_retry_after_a_rank_failure_reuses_the_allocation(head):
    """Rank 1 fails in attempt 0 (--retries 1, no timeout) while Slurm still runs the job:
    attempt 1 runs in the same Slurm job, on the agents that joined for attempt 0 (one
    sbatch, one Slurm output file), and completes; the allocation then ends, nothing left."""
    job = head.submit("-N", "2", "-p", "1", "--retries", "1", "--", "/usr/bin/python3", "-c",
                      FAILS_ONCE)
    j = head.wait_job(job, lambda j: j["state"] not in ("PENDING", "RUNNING"), "ended",
                      timeout=120)
    assert j["state"] == "COMPLETED" and j["attempt"] == 1, j
    sid = j["slurm"]["job_id"]
    outs = sorted(p.name for p in (head.fc.shared / "slurm").glob(job + ".*"))
    assert outs == ["%s.0-%d.out" % (job, sid)], outs     # one sbatch for both attempts
    out = head.dtctl("logs", job).stdout
    assert "ATTEMPT=1 RANK=0" in out and "ATTEMPT=1 RANK=1" in out, out
    assert head.slurm.wait_job_gone(str(sid)) == "COMPLETED"
    head.wait_nothing_left()


def slurm_jobs_of(head, job):
    """Slurm's own list of the Slurm jobs dtsched submitted for dtctl job `job` (their
    --comment names it), ended ones included: {slurm id: state}."""
    p = head.slurm.run(["squeue", "-h", "-t", "all", "-o", "%i|%T|%k"])
    assert p.returncode == 0, p.stderr
    out = {}
    for line in p.stdout.splitlines():
        sid, state, comment = line.strip().split("|", 2)
        if comment.startswith("dtctl %s attempt " % job):
            out[int(sid)] = state
    return out


def slurm_retry_events(head, job):
    p = head.dtctl("events", "--json", "--job", job)
    assert p.returncode == 0, p.stderr
    evs = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    return [e for e in evs if e.get("kind") == "job.slurm_retry"]


WAITS_THEN_FAILS_ONCE = r"""
import os, sys, time
print("ATTEMPT=%s RANK=%s" % (os.environ["DT_ATTEMPT"], os.environ["RANK"]), flush=True)
if os.environ["DT_ATTEMPT"] == "0":
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.1)
    sys.exit(3)
"""


def test_retry_with_a_timeout_reuses_the_allocation_its_time_left_covers(head):
    """A job with a timeout (5m: sbatch --time=6) whose rank fails once: what is left of
    the Slurm job's limit (squeue's TimeLeft) covers the retry's 5 minutes, so attempt 1
    (DT_ATTEMPT=1) runs in the same Slurm job: Slurm lists one job for it, one output
    file, and the job's events say why."""
    job = head.submit("-N", "2", "-p", "1", "--retries", "1", "--timeout", "5m", "--",
                      "/usr/bin/python3", "-c", FAILS_ONCE)
    j = head.wait_job(job, lambda j: j["state"] not in ("PENDING", "RUNNING"), "ended",
                      timeout=120)
    assert j["state"] == "COMPLETED" and j["attempt"] == 1, j
    sid = j["slurm"]["job_id"]
    assert list(slurm_jobs_of(head, job)) == [sid]
    outs = sorted(p.name for p in (head.fc.shared / "slurm").glob(job + ".*"))
    assert outs == ["%s.0-%d.out" % (job, sid)], outs
    assert "ATTEMPT=1 RANK=0" in head.dtctl("logs", job).stdout
    evs = slurm_retry_events(head, job)
    assert [(e["attempt"], e["slurm_job"], e["reused"]) for e in evs] == [(1, sid, True)], evs
    assert re.search(r"Slurm job %d has \S+ left of its time limit, which covers the job's "
                     r"timeout 5m" % sid, evs[0]["reason"]), evs
    assert head.slurm.wait_job_gone(str(sid)) == "COMPLETED"
    head.wait_nothing_left()


def test_retry_with_a_timeout_gets_a_new_slurm_job_when_too_little_is_left(head):
    """The same, but Slurm's limit was cut to 4 minutes (scontrol update) while attempt 0
    ran: less is left than the 5m timeout, so the retry gets a new Slurm job (a fresh
    --time), the first one is ended, and the job's events say why."""
    go = head.fc.shared / ("go-%d" % os.getpid())
    go.unlink(missing_ok=True)
    job = head.submit("-N", "1", "-p", "1", "--retries", "1", "--timeout", "5m", "--",
                      "/usr/bin/python3", "-c", WAITS_THEN_FAILS_ONCE, str(go))
    try:
        j = head.wait_job(job, lambda j: j["state"] == "RUNNING", "running", timeout=120)
        sid = j["slurm"]["job_id"]
        p = head.slurm.run(["scontrol", "update", "JobId=%d" % sid, "TimeLimit=4"])
        assert p.returncode == 0, p.stdout + p.stderr
        go.write_text("go")
        j = head.wait_job(job, lambda j: j["state"] not in ("PENDING", "RUNNING"), "ended",
                          timeout=120)
    finally:
        go.unlink(missing_ok=True)
    assert j["state"] == "COMPLETED" and j["attempt"] == 1, j
    sid2 = j["slurm"]["job_id"]
    assert sid2 != sid, j
    assert sorted(slurm_jobs_of(head, job)) == [sid, sid2]
    assert head.slurm.wait_job_gone(str(sid)) in ("COMPLETED", "CANCELLED")
    evs = slurm_retry_events(head, job)
    assert [(e["attempt"], e["slurm_job"], e["reused"]) for e in evs] == [(1, sid, False)], evs
    assert re.search(r"Slurm job %d has \S+ left of its time limit, less than the job's "
                     r"timeout 5m" % sid, evs[0]["reason"]), evs
    assert "ATTEMPT=1 RANK=0" in head.dtctl("logs", job).stdout
    assert head.slurm.wait_job_gone(str(sid2)) == "COMPLETED"
    head.wait_nothing_left()


def test_job_that_can_never_run_is_refused_with_the_numbers(head):
    p = head.dtctl("run", "-d", "-N", "3", "-p", "1", "--", "true")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "asks for 3 nodes; Slurm's partition %s has 2" % head.slurm.partition in p.stderr
    p = head.dtctl("run", "-d", "-N", "1", "-g", "5", "--", "true")
    assert p.returncode == 2, p.stdout + p.stderr
    assert ("asks for 5 GPUs per node; the most a node of Slurm's partition %s has is 4"
            % head.slurm.partition) in p.stderr


def test_refused_sbatch_names_slurms_message_and_the_option(head):
    """An sbatch option Slurm refuses: the job FAILS with Slurm's own message and the
    cluster.yaml key (file:line:col) that set it; nothing queued in Slurm."""
    head.write_yaml(head.base_yaml + "slurm:\n  constraint: nosuchfeature\n")
    try:
        time.sleep(1.1)           # cluster.yaml is re-read at most once a second
        job = head.submit("-N", "1", "-p", "1", "--", "true")
        j = head.wait_job(job, lambda j: j["state"] != "PENDING", "ended")
        assert j["state"] == "FAILED", j
        assert "Invalid feature specification" in j["reason"], j
        assert "cluster.yaml:7:15: key 'slurm.constraint' ('nosuchfeature')" in j["reason"], j
        assert not j["slurm"].get("job_id"), j
    finally:
        head.write_yaml(head.base_yaml)
        time.sleep(1.1)


def test_doctor_on_a_slurm_backend_cluster_checks_slurm_and_its_partition(head):
    """`dtctl doctor` on a `backend: slurm` cluster (no nodes: of its own) runs the Slurm
    checks, not the SSH ones (which passed vacuously on 0 nodes): munge through the socket
    slurm.conf names, slurmctld, the partition cluster.yaml names and its GRES, the shared
    dir and dtagent through srun.  A partition Slurm does not have fails, naming the key."""
    p = head.dtctl("doctor", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    for want in (r"PASS munge +munged at %s: a credential made and read back"
                 % re.escape(str(head.slurm.state / "munge" / "munge.socket")),
                 r"PASS slurmctld +Slurmctld\(primary\) at \S+ is UP",
                 r"PASS partition +%s\*? up 2 " % head.slurm.partition,
                 r"PASS gres +gpu:4", r"PASS shared dir +%s on 1 node" % re.escape(str(head.fc.shared)),
                 r"PASS dtagent +"):
        assert re.search(want, p.stdout), "%r not in:\n%s" % (want, p.stdout)
    assert "ssh" not in p.stdout, p.stdout
    other = Path(tempfile.mkdtemp(prefix="dtctl-doctor-", dir="/var/tmp"))
    try:
        yaml = other / "cluster.yaml"
        yaml.write_text(head.base_yaml.replace("partition: %s\n" % head.slurm.partition,
                                               "partition: nosuchpart\n"))
        os.chmod(other, 0o755)
        os.chmod(yaml, 0o644)
        p = head.dtctl("-c", yaml, "doctor", "--json", timeout=120)
        assert p.returncode == 1, p.stdout + p.stderr
        checks = {c["check"]: c for c in json.loads(p.stdout)["checks"]}
        part = checks["partition"]
        assert not part["ok"], checks
        assert "Slurm has no partition 'nosuchpart' (%s:4:12)" % yaml in part["detail"], part
        assert head.slurm.partition in part["detail"] and "partition:" in part["fix"], part
        assert checks["munge"]["ok"] and checks["slurmctld"]["ok"], checks
    finally:
        shutil.rmtree(other, ignore_errors=True)


def sweep_export(head, sw):
    p = head.dtctl("sweep", "export", "--json", sw)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def sweep_ended(head, sw, timeout=150):
    """`sweep export` of sweep sw once it is no longer RUNNING or PENDING."""
    deadline = time.monotonic() + timeout
    while True:
        ex = sweep_export(head, sw)
        if ex["sweep"]["state"] not in ("RUNNING", "PENDING"):
            return ex
        assert time.monotonic() < deadline, json.dumps(ex)[:3000]
        time.sleep(0.5)


# test_sweep.py's trial (loss q + 1/epoch, 4 epochs), a second per epoch: a pruned
# trial is stopped while Slurm's job still runs
SWEEP_TRIAL = ASHA_TRIAL.replace("time.sleep(0.4)", "time.sleep(1)")
assert SWEEP_TRIAL != ASHA_TRIAL


def test_sweep_trials_are_slurm_jobs_and_asha_stops_one(head):
    """A sweep on Slurm: each trial is its own Slurm job through the same lifecycle; ASHA
    (eta 2) lets the first two trials go on and prunes the third at its first rung: its
    job is CANCELLED and its Slurm job ended (scancel through the lifecycle's cancel)."""
    d = head.fc.shared / "sbtest"
    d.mkdir(exist_ok=True)
    os.chmod(d, 0o755)
    script = d / "trial.py"
    script.write_text(SWEEP_TRIAL)
    os.chmod(script, 0o644)
    sweep = d / "sweep.yaml"
    sweep.write_text("method: grid\nmetric: {name: loss, goal: minimize}\n"
                     "parameters:\n  q: {values: [0.1, 9, 8]}\n"
                     "early_terminate: {type: hyperband, min_iter: 1, eta: 2, max_iter: 4}\n"
                     "job: {name: sbsweep, procs_per_node: 1, command: [/usr/bin/python3, %s]}\n"
                     "parallel: 1\n" % script)
    os.chmod(sweep, 0o644)
    p = head.dtctl("sweep", "--detach", sweep)
    assert p.returncode == 0, p.stdout + p.stderr
    sw = p.stdout.strip()
    ex = sweep_ended(head, sw)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    st = {t["trial"]: t for t in ex["trials"]}
    assert [st[i]["state"] for i in (1, 2, 3)] == ["COMPLETED", "COMPLETED", "PRUNED"], st
    jobs = {i: head.show(st[i]["job_id"]) for i in (1, 2, 3)}
    sids = {i: jobs[i]["slurm"]["job_id"] for i in (1, 2, 3)}
    assert len(set(sids.values())) == 3, sids          # one Slurm job per trial
    assert [jobs[i]["state"] for i in (1, 2, 3)] == ["COMPLETED", "COMPLETED", "CANCELLED"]
    assert len(st[3]["metrics"]) <= 2, st[3]
    assert head.slurm.wait_job_gone(str(sids[3])) in ("COMPLETED", "CANCELLED")
    head.wait_nothing_left()


def array_tasks(head, aid):
    """Slurm's view of job array aid: {task: (its own job id, or None while it waits in
    the array's pending record ("2-3%2"), state)}, every task."""
    p = head.slurm.run(["squeue", "-h", "-t", "all", "--jobs=%d" % aid, "-O",
                        "JobID:|,ArrayJobID:|,ArrayTaskID:|,State:"])
    assert p.returncode == 0, p.stderr
    tasks = {}
    for line in p.stdout.split("\n"):
        f = [x.strip() for x in line.split("|")]
        if len(f) != 4 or not f[1].isdigit():
            continue
        assert int(f[1]) == aid, line
        if f[2].isdigit():
            tasks[int(f[2])] = (int(f[0]), f[3])
            continue
        for part in f[2].strip("[]").split("%")[0].split(","):
            a, _, b = part.partition("-")
            for k in range(int(a), int(b or a) + 1):
                tasks[k] = (None, f[3])
    return tasks


def test_sweep_as_one_slurm_job_array_with_asha(head):
    """`pack: array`: a grid sweep's three trials go to Slurm as ONE job array
    (--array=0-2%1: Slurm runs one at a time), each task running one trial through our
    agents; every trial's result reaches the sweep; ASHA (eta 2) prunes the third at its
    first rung and its task alone is cancelled in Slurm (scancel 812_2), not the array; no
    scancel fails; nothing is left on the nodes."""
    sw = packed_sweep(head, "sbarray", SWEEP_TRIAL, "[0.1, 9, 8]", 1,
                      "early_terminate: {type: hyperband, min_iter: 1, eta: 2, max_iter: 4}\n",
                      pack="array")
    ex = sweep_ended(head, sw)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    st = {t["trial"]: t for t in ex["trials"]}
    assert [st[i]["state"] for i in (1, 2, 3)] == ["COMPLETED", "COMPLETED", "PRUNED"], st
    assert all(st[i]["metrics"] for i in (1, 2, 3)), st     # every result reached the sweep
    jobs = {i: head.show(st[i]["job_id"]) for i in (1, 2, 3)}
    names = {i: jobs[i]["slurm"]["array_job"] for i in (1, 2, 3)}
    aid = int(names[1].split("_")[0])
    assert names == {1: "%d_0" % aid, 2: "%d_1" % aid, 3: "%d_2" % aid}, names
    tasks = array_tasks(head, aid)                            # one array, three tasks
    assert sorted(tasks) == [0, 1, 2], tasks
    for i in (1, 2, 3):                                       # each trial ran in its task
        assert jobs[i]["slurm"]["job_id"] == tasks[i - 1][0], (jobs[i]["slurm"], tasks)
    assert [jobs[i]["state"] for i in (1, 2, 3)] == ["COMPLETED", "COMPLETED", "CANCELLED"]
    assert head.slurm.wait_job_gone(names[3]) in ("COMPLETED", "CANCELLED")
    log = (head.home / "dtsched.log").read_text()
    # the pruned trial's task alone, by its JOBID_TASKID; no scancel failed
    assert "job %s: ending Slurm job %s (scancel)" % (st[3]["job_id"], names[3]) in log, \
        log[-3000:]
    assert not re.search(r"scancel \S+: exit", log), log[-3000:]
    head.wait_nothing_left()


def test_array_sweep_warned_and_stopped_leaves_no_slurm_job(head):
    """A `pack: array` sweep of four trials, two running (%2) and two waiting in the array:
    ps and show name each running trial's task (JOBID_TASKID); Slurm's warning to task 0's
    batch shell (what --signal=B:USR1 does) reaches that task's trial alone, which ends;
    `dtctl sweep stop` then cancels every other trial, the waiting tasks in Slurm too: no
    task of the array is left active, and no agent or rank on any node."""
    sw = packed_sweep(head, "sbarraystop", WARNED_TRIAL, "[1, 2, 3, 4]", 2, pack="array")
    try:
        running = sorted(running_trials(head, sw, 2), key=lambda t: t["trial"])
        names = [head.show(t["job_id"])["slurm"]["array_job"] for t in running]
        aid = int(names[0].split("_")[0])
        assert sorted(names) == ["%d_0" % aid, "%d_1" % aid], names
        ps = head.dtctl("ps").stdout
        for t, name in zip(running, names):
            assert re.search(r"%s .*\(slurm %s\)" % (t["job_id"], name), ps), ps
        p = head.dtctl("show", running[0]["job_id"])
        assert re.search(r"slurm: +job %s \(\d+\), RUNNING" % names[0], p.stdout), p.stdout
        tasks = array_tasks(head, aid)
        assert sorted(tasks) == [0, 1, 2, 3], tasks
        assert [tasks[k][1] for k in (2, 3)] == ["PENDING", "PENDING"], tasks
        warned = running[names.index("%d_0" % aid)]["job_id"]
        task0 = tasks[0][0]
        # (scancel exits 229 here for an array's task, silently, yet signals it)
        p = head.slurm.run(["scancel", "--batch", "--signal=USR1", str(task0)])
        head.wait_job(warned, lambda j: state_final(j["state"]),
                      "ended after the warning (scancel: rc %d %s)" % (p.returncode, p.stderr))
        out = (head.fc.shared / "slurm" / ("%s.0-%d_0.out" % (sw, aid))).read_text()
        assert ("Slurm's warning (signal %d) passed on to 1 job(s) of %s running in Slurm job %d"
                % (signal.SIGUSR1, sw, task0)) in out, out
        assert "WARNED=%d" % signal.SIGUSR1 in head.dtctl("logs", warned).stdout
        other = [t["job_id"] for t in running if t["job_id"] != warned][0]
        assert "WARNED" not in head.dtctl("logs", other).stdout      # its task was not warned
        p = head.dtctl("sweep", "stop", sw)
        assert p.returncode == 0, p.stdout + p.stderr
        deadline = time.monotonic() + 60
        while any(not state_final(st) for _, st in array_tasks(head, aid).values()):
            assert time.monotonic() < deadline, array_tasks(head, aid)
            time.sleep(0.2)
        head.wait_nothing_left()
        ex = sweep_export(head, sw)
        assert ex["sweep"]["state"] not in ("RUNNING", "PENDING"), ex["sweep"]
        states = {t["job_id"]: head.show(t["job_id"])["state"] for t in ex["trials"]}
        assert states.pop(warned) == "COMPLETED", states
        assert set(states.values()) == {"CANCELLED"}, states
    finally:
        head.dtctl("sweep", "stop", sw)     # a failure above leaves nothing running


# trial q=1's first attempt runs until Slurm takes it away (at most 2 minutes); every
# other run of a trial reports for 3 s and ends
MID_TRIAL = r'''
import json, os, time
first = float(os.environ["DT_PARAM_Q"]) == 1 and os.environ["DT_ATTEMPT"] == "0"
for e in range(1, 241 if first else 7):
    print("DTCTL_METRIC " + json.dumps({"epoch": e, "loss": 1.0 / e}), flush=True)
    time.sleep(0.5)
'''


def test_array_task_requeued_by_slurm_runs_its_trial_again(head):
    """Slurm requeues one task of a sweep's job array (`scontrol requeue`, what preemption
    does): its trial's attempt ends REQUEUED and it runs again in that same task (its own
    Slurm job id) as restart 1, using no retry; the other task's trial is untouched; the
    sweep completes and nothing is left."""
    sw = packed_sweep(head, "sbarrayrq", MID_TRIAL, "[1, 2]", 2, pack="array")
    try:
        running = running_trials(head, sw, 2)
        jobs = {head.show(t["job_id"])["slurm"]["array_job"]: t["job_id"] for t in running}
        aid = int(sorted(jobs)[0].split("_")[0])
        job0, job1 = jobs["%d_0" % aid], jobs["%d_1" % aid]     # trials q=1 and q=2
        sid0 = head.show(job0)["slurm"]["job_id"]
        p = head.slurm.run(["scontrol", "requeue", str(sid0)])
        assert p.returncode == 0, p.stderr
        j = head.wait_job(job0, lambda j: j["attempt"] == 1, "requeued")
        assert "Slurm requeued job %d" % sid0 in json.dumps(j["history"]), j
        start_requeued_now(head, sid0)
        ex = sweep_ended(head, sw)
        assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
        assert sorted(t["job_id"] for t in ex["trials"]) == sorted([job0, job1]), ex["trials"]
        j = head.show(job0)
        assert j["state"] == "COMPLETED" and j["restarts"] == 1, j
        assert (j["slurm"]["job_id"], j["slurm"]["array_job"]) == (sid0, "%d_0" % aid), j
        j = head.show(job1)
        assert j["state"] == "COMPLETED" and j["restarts"] == 0 and j["attempt"] == 0, j
        head.wait_nothing_left()
    finally:
        head.dtctl("sweep", "stop", sw)     # a failure above leaves nothing running


def sbatch_probe(head):
    """Slurm's next job id, taken by a held no-op (cancelled at once): two probes around a
    sweep say how many Slurm jobs it made."""
    p = head.slurm.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"],
                       True)
    assert p.returncode == 0, p.stderr
    sid = int(p.stdout.strip().split(";")[0])
    head.slurm.run(["scancel", str(sid)], True)
    return sid


def packed_sweep(head, name, trial, values, parallel, extra="", pack="allocation"):
    """A grid sweep of one-GPU trials, `pack: allocation` (one Slurm allocation dtsched
    fills) or `pack: array` (one Slurm job array)."""
    d = head.fc.shared / "sbtest"
    d.mkdir(exist_ok=True)
    os.chmod(d, 0o755)
    script = d / ("%s.py" % name)
    script.write_text(trial)
    os.chmod(script, 0o644)
    sweep = d / ("%s.yaml" % name)
    sweep.write_text("method: grid\nmetric: {name: loss, goal: minimize}\n"
                     "parameters:\n  q: {values: %s}\n%s"
                     "job: {name: %s, gpus_per_node: 1, command: [/usr/bin/python3, %s]}\n"
                     "parallel: %d\npack: %s\n" % (values, extra, name, script, parallel, pack))
    os.chmod(sweep, 0o644)
    p = head.dtctl("sweep", "--detach", sweep)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.strip()


def running_trials(head, sw, n, timeout=90):
    """The trials of sweep sw once n of them run and have reported."""
    deadline = time.monotonic() + timeout
    while True:
        ex = sweep_export(head, sw)
        running = [t for t in ex["trials"] if t["state"] == "RUNNING" and t.get("metrics")]
        if len(running) == n:
            return running
        assert time.monotonic() < deadline, json.dumps(ex)[:3000]
        time.sleep(0.2)


def test_sweep_packed_into_one_allocation_with_asha(head):
    """`pack: allocation`: the whole sweep runs in one Slurm job (Slurm's job ids just
    before and after it are one apart beyond it), 3 trials at once on its 3 GPUs, each
    next trial started in a slot the moment one ends; ASHA (eta 2) prunes trials by
    stopping their ranks through the agents while the allocation runs on; once nothing is
    left the allocation is ended and nothing is left on the nodes."""
    before = sbatch_probe(head)
    sw = packed_sweep(head, "sbpack", SWEEP_TRIAL, "[0.1, 0.2, 9, 8, 0.15, 7]", 3,
                      "early_terminate: {type: hyperband, min_iter: 1, eta: 2, max_iter: 4}\n")
    ex = sweep_ended(head, sw)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    st = {t["trial"]: t for t in ex["trials"]}
    assert len(st) == 6, st
    jobs = {i: head.show(st[i]["job_id"]) for i in st}
    sids = {jobs[i]["slurm"]["job_id"] for i in st}
    assert len(sids) == 1, sids                       # one Slurm job for the whole sweep
    sid = sids.pop()
    assert sid == before + 1, (before, sid)
    after = sbatch_probe(head)
    assert after == sid + 1, (sid, after)             # and no other one since
    pruned = [i for i in st if st[i]["state"] == "PRUNED"]
    assert pruned and all(jobs[i]["state"] == "CANCELLED" for i in pruned), st
    assert st[1]["state"] == "COMPLETED" and jobs[1]["state"] == "COMPLETED", st[1]
    # trials overlapped in time inside it: 3 at once at the start
    spans = sorted((dt_time(jobs[i]["started_at"]), dt_time(jobs[i]["ended_at"])) for i in st)
    at_once = max(sum(1 for a, b in spans if a <= s0 < b) for s0, _ in spans)
    assert at_once == 3, spans
    assert head.slurm.wait_job_gone(str(sid)) in ("COMPLETED", "CANCELLED")
    head.wait_nothing_left()


def dt_time(ts):
    from datetime import datetime
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


LONG_TRIAL = r'''
import json, os, time
for e in range(1, 600):
    print("DTCTL_METRIC " + json.dumps({"epoch": e, "loss": 1.0 / e}), flush=True)
    time.sleep(0.5)
'''


def test_packed_sweep_stopped_leaves_no_slurm_job(head):
    """`dtctl sweep stop` of a packed sweep whose trials run in its allocation: the trials
    are cancelled, the allocation ended: no Slurm job, no agent or rank on any node."""
    sw = packed_sweep(head, "sbpackstop", LONG_TRIAL, "[1, 2, 3, 4]", 2)
    running = running_trials(head, sw, 2)
    sid = head.show(running[0]["job_id"])["slurm"]["job_id"]
    assert head.show(running[1]["job_id"])["slurm"]["job_id"] == sid
    assert head.squeue_state(sid) == "RUNNING"
    p = head.dtctl("sweep", "stop", sw)
    assert p.returncode == 0, p.stdout + p.stderr
    assert head.slurm.wait_job_gone(str(sid)) in ("COMPLETED", "CANCELLED")
    head.wait_nothing_left()
    ex = sweep_export(head, sw)
    assert ex["sweep"]["state"] not in ("RUNNING", "PENDING"), ex["sweep"]
    assert all(head.show(t["job_id"])["state"] == "CANCELLED" for t in ex["trials"]
               if t.get("job_id")), ex["trials"]


SHORT_TRIAL = r'''
import json, os, time
for e in range(1, 9):
    print("DTCTL_METRIC " + json.dumps({"epoch": e, "loss": 1.0 / e}), flush=True)
    time.sleep(0.5)
'''


def test_packed_sweep_requeued_by_slurm_runs_its_trials_again(head):
    """Slurm takes a packed sweep's allocation back (`scontrol requeue`, what preemption
    does): its running trials end REQUEUED and run again in it once Slurm runs it again,
    as restart 1 without using a retry; the sweep's controller goes on with the same two
    trials and completes; one Slurm job all along, nothing left."""
    sw = packed_sweep(head, "sbpackrq", SHORT_TRIAL, "[1, 2]", 2)
    running = running_trials(head, sw, 2)
    jobs = [t["job_id"] for t in running]
    sid = head.show(jobs[0])["slurm"]["job_id"]
    p = head.slurm.run(["scontrol", "requeue", str(sid)])
    assert p.returncode == 0, p.stderr
    for job in jobs:
        j = head.wait_job(job, lambda j: j["attempt"] == 1, "requeued")
        assert "Slurm took the allocation of %s back" % sw in json.dumps(j["history"]), j
    start_requeued_now(head, sid)
    ex = sweep_ended(head, sw)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    assert [t["job_id"] for t in ex["trials"]] == jobs, ex["trials"]
    for job in jobs:
        j = head.show(job)
        assert j["state"] == "COMPLETED" and j["restarts"] == 1, j
        assert j["slurm"]["job_id"] == sid, j
    assert head.slurm.wait_job_gone(str(sid)) in ("COMPLETED", "CANCELLED")
    head.wait_nothing_left()


# a trial that reports until Slurm's warning (SIGUSR1) reaches it, then says so and ends
WARNED_TRIAL = r'''
import json, signal, time
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
e, deadline = 0, time.time() + 150
while not got and time.time() < deadline:
    e += 1
    print("DTCTL_METRIC " + json.dumps({"epoch": e, "loss": 1.0 / e}), flush=True)
    time.sleep(0.5)
print("WARNED=%s" % (got[0] if got else "none"), flush=True)
'''


def test_packed_sweep_gets_slurms_warning_before_the_time_limit(head):
    """A packed sweep's allocation asks for Slurm's warning too (--signal=B:USR1@120): once it
    has a short time limit (2 minutes, set on the running allocation) Slurm itself sends
    SIGUSR1 to its batch shell at its next time-limit check, and `dtctl slurm-agents` passes
    it on to every trial running in it (the sweep's jobs whose Slurm job it is); both
    trials see it, checkpoint (here: end) and the sweep completes, nothing left."""
    sw = packed_sweep(head, "sbpackwarn", WARNED_TRIAL, "[1, 2]", 2)
    running = running_trials(head, sw, 2)
    sid = head.show(running[0]["job_id"])["slurm"]["job_id"]
    assert head.show(running[1]["job_id"])["slurm"]["job_id"] == sid
    p = head.slurm.run(["scontrol", "-o", "show", "job", str(sid)])
    assert re.search(r"\bTimeLimit=UNLIMITED\b", p.stdout), p.stdout   # the partition's
    p = head.slurm.run(["scontrol", "update", "JobId=%d" % sid, "TimeLimit=2"])
    assert p.returncode == 0, p.stderr
    ex = sweep_ended(head, sw, timeout=100)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    assert [t["state"] for t in ex["trials"]] == ["COMPLETED", "COMPLETED"], ex["trials"]
    for t in ex["trials"]:
        j = head.show(t["job_id"])
        assert j["slurm"]["job_id"] == sid and j["restarts"] == 0, j
        out = head.dtctl("logs", t["job_id"]).stdout
        assert "WARNED=%d" % signal.SIGUSR1 in out, out[-2000:]
    slurm_out = (head.fc.shared / "slurm" / ("%s.0-%d.out" % (sw, sid))).read_text()
    assert ("Slurm's warning (signal %d) passed on to 2 job(s) of %s running in Slurm job %d"
            % (signal.SIGUSR1, sw, sid)) in slurm_out, slurm_out
    assert head.slurm.wait_job_gone(str(sid)) in ("COMPLETED", "CANCELLED")
    head.wait_nothing_left()


# sbatch, but the first time it stalls after Slurm accepted the job (its id printed, and
# written to <dir>/sid) until dtsched, its parent, is gone: the test kills dtsched with
# SIGKILL between Slurm's accepting an attempt and dtsched's recording it
STALLING_SBATCH = r"""#!/bin/sh
out=$(%(real)s "$@")
rc=$?
printf '%%s\n' "$out"
if [ $rc -eq 0 ] && mkdir %(dir)s/stalled 2>/dev/null; then
    printf '%%s' "$out" > %(dir)s/sid.tmp && mv %(dir)s/sid.tmp %(dir)s/sid
    while kill -0 $PPID 2>/dev/null; do sleep 0.05; done
fi
exit $rc
"""


def test_dtsched_killed_after_sbatch_adopts_its_job_and_cancels_strays(head):
    """dtsched is killed (SIGKILL) right after Slurm accepted an attempt's sbatch, before it
    recorded the Slurm job.  Restarted, it finds its own Slurm jobs (squeue --me, its batch
    script, the comment naming its head id, checked against state.db): the unrecorded one
    is adopted and the job completes on it (no second sbatch); a job naming a dtctl job
    that state.db does not have is cancelled; the user's own Slurm job is left alone.
    Every active Slurm job of the user is one dtctl knows, or the user's own."""
    import sqlite3
    d = Path(tempfile.mkdtemp(prefix="dtctl-stall-", dir="/var/tmp"))
    os.chown(d, head.uid, -1)
    os.chmod(d, 0o755)
    wrapper = d / "sbatch"
    wrapper.write_text(STALLING_SBATCH % {"real": shutil.which("sbatch"), "dir": d})
    os.chmod(wrapper, 0o755)
    mine = None
    try:
        assert head.dtctl("head", "stop").returncode == 0
        head.env["PATH"] = "%s:%s" % (d, os.environ["PATH"])
        p = head.dtctl("head", "start")
        assert p.returncode == 0, p.stderr
        job = head.submit("-N", "1", "-p", "1", "--", "/bin/echo", "ran-on-the-adopted-job")
        deadline = time.monotonic() + 60
        while not (d / "sid").exists():
            assert time.monotonic() < deadline, "sbatch never ran: %s" % head.show(job)
            time.sleep(0.05)
        sid = int((d / "sid").read_text().strip().split(";")[0])
        pid = int((head.home / "dtsched.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while os.path.exists("/proc/%d" % pid):
            assert time.monotonic() < deadline, "dtsched %d outlived SIGKILL" % pid
            time.sleep(0.05)
        # a Slurm job naming a job state.db does not have, and the user's own
        db = sqlite3.connect("file:%s?mode=ro" % (head.home / "state.db"), uri=True)
        hid = db.execute("SELECT value FROM meta WHERE key='head_id'").fetchone()[0]
        db.close()
        p = head.slurm.run(["sbatch", "--parsable", "--hold", "--output=/dev/null",
                            "--comment=dtctl j-999999 attempt 0 head %s" % hid,
                            str(head.home / "slurm" / "job.sh")], user=True)
        assert p.returncode == 0, p.stderr
        stray = int(p.stdout.strip().split(";")[0])
        p = head.slurm.run(["sbatch", "--parsable", "--hold", "--output=/dev/null",
                            "--comment=my own", "--wrap=true"], user=True)
        assert p.returncode == 0, p.stderr
        mine = int(p.stdout.strip().split(";")[0])
        del head.env["PATH"]
        p = head.dtctl("head", "start")
        assert p.returncode == 0, p.stderr
        j = head.wait_job(job, lambda j: state_final(j["state"]), "ended")
        assert j["state"] == "COMPLETED", j
        assert j["slurm"]["job_id"] == sid, (sid, j)
        assert "ran-on-the-adopted-job" in head.dtctl("logs", job).stdout
        assert head.slurm.wait_job_gone(str(stray)) == "CANCELLED"
        assert head.slurm.wait_job_gone(str(sid)) == "COMPLETED"
        p = head.slurm.run(["squeue", "--me", "-h", "-o", "%i"], user=True)
        assert p.stdout.split() == [str(mine)], p.stdout
        log = (head.home / "dtsched.log").read_text()
        assert re.search(r"Slurm job %d \(%s attempt 0\) submitted by an earlier dtsched "
                         r"that did not record it: adopted" % (sid, job), log), log[-3000:]
        assert ("Slurm job %d (j-999999 attempt 0) left by an earlier dtsched: cancelling it "
                "(no such job in state.db)" % stray) in log, log[-3000:]
        head.wait_nothing_left()
    finally:
        head.env.pop("PATH", None)
        if mine:
            head.slurm.run(["scancel", str(mine)])
        if head.dtctl("head", "status").returncode != 0:
            head.dtctl("head", "start")
        shutil.rmtree(d, ignore_errors=True)


def state_final(st):
    return st not in ("PENDING", "RUNNING")
