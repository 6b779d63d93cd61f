"""Fair share, quotas and accounting on a real dtsched and agent (a one-node cluster
with 4 fake GPUs, docs/fairshare.md): a queue of jobs from two users starts in
fair-share order, not submission order, and `dtctl why` says why; a user's quota holds
with its reason shown, a job that can never fit under it is refused at submission with
the numbers; /metrics has the per-user and per-project families (promtool clean);
`dtctl acct` totals equal the jobs that ran, `dtctl share` shows the usage; every queued
job has an expected start (`dtctl why`); a project's guaranteed floor is lent while it is
idle and reclaimed by preemption when it submits.

A job's owner is who its request proves to be (docs/team.md): these tests add alice, bob,
carol and dave with their own ed25519 keys (`dtctl user add`) and submit as each of them
with $DTCTL_USER_KEY; the "user" field of a request is not believed.  The last tests use
real Unix users in team mode (test_team.py's team_cluster): their queue starts in
fair-share order, and with preempt_over_share the over-share user's job is preempted."""

import csv
import io
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

from conftest import LocalCluster
from dtapi import DtApi, read_secret
from test_team import ALICE, BOB, as_user, team_cluster, users  # noqa: F401 (users: the fixture)

USERS = ("alice", "bob", "carol", "dave")

PROMTOOL = shutil.which("promtool")

FAIRSHARE = """fairshare:
  half_life: 1h
  users:
    alice: {share: 1, project: vision}
    bob: {share: 1}
    carol: {max_gpus: 2, max_time: 10m}
  classes:
    scavenger: {preemptible: true, signal: USR1, grace: 2s}
"""

# A training script that checkpoints on SIGUSR1 (what docs/fairshare.md shows): its step in
# <job_dir>/ckpt/step-N, and it starts from $DT_RESUME (dtsched's newest checkpoint) when set.
VICTIM = r"""
import os, signal, sys, time
ckpt = os.path.join(os.environ["DT_JOB_DIR"], "ckpt")
rank0 = os.environ.get("RANK", "0") == "0"   # rank 0 saves (the data-parallel way)
step = 0
if os.environ.get("DT_RESUME"):
    step = int(open(os.environ["DT_RESUME"]).read())
    if rank0:
        print("resumed from step %d (attempt %s)" % (step, os.environ["DT_ATTEMPT"]), flush=True)
want = {"ckpt": False}
signal.signal(signal.SIGUSR1, lambda sig, frame: want.update(ckpt=True))
while step < int(sys.argv[1]):
    if want["ckpt"] and rank0:
        with open(os.path.join(ckpt, ".tmp"), "w") as f:
            f.write(str(step))
        os.rename(os.path.join(ckpt, ".tmp"), os.path.join(ckpt, "step-%d" % step))
        print("checkpointed at step %d" % step, flush=True)
    want["ckpt"] = False
    if rank0:
        print("step %d" % step, flush=True)
    time.sleep(0.05)
    step += 1
if rank0:
    print("done at step %d" % step, flush=True)
"""


@pytest.fixture(scope="module")
def local(dtctl_bin, tmp_path_factory):
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path_factory.mktemp("fair"), name="fair", gpus="4")
    with open(c.home / "cluster.yaml", "a") as f:
        f.write(FAIRSHARE)
    try:
        c.start()
        keys = c.home / "userkeys"
        keys.mkdir()
        # each with their own key, dtsched's pinned (docs/team.md)
        c.user_env = {u: c.key_user(u, keys) for u in USERS}
        yield c
    finally:
        c.stop()


def head(c):
    port = int(re.search(r"head: \{port: (\d+)", (c.home / "cluster.yaml").read_text()).group(1))
    return DtApi("127.0.0.1", port, read_secret(str(c.home))), port


def submit(c, user, gpus, cmd, **extra):
    """POST /v1/jobs as `user`, signed with their key (`dtctl api`): (status, reply)."""
    job = {"name": "%s-%s" % (user, cmd[-1]), "nodes": 1, "gpus_per_node": gpus,
           "command": cmd}
    job.update(extra)
    p = subprocess.run([str(c.exe), "api", "--status", "POST", "/v1/jobs",
                        json.dumps({"job": job, "shared_dir": str(c.shared)})],
                       capture_output=True, text=True, timeout=60, env=c.user_env[user],
                       stdin=subprocess.DEVNULL)
    status, _, body = p.stdout.partition("\n")
    assert status.strip().isdigit(), (p.stdout, p.stderr)
    return int(status), json.loads(body) if body.strip() else {}


def submit_ok(c, user, gpus, cmd, **extra):
    st, body = submit(c, user, gpus, cmd, **extra)
    assert st == 201, body
    return body["job"]["id"]


def show(c, job, user=None):
    """`dtctl show --json`, as `user` when given (team mode: the owner sees it all)."""
    p = as_user(c, user, "show", "--json", job) if user else c.dtctl("show", "--json", job)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["job"]


def wait(c, job, what, timeout=60, user=None):
    deadline = time.monotonic() + timeout
    while True:
        j = show(c, job, user)
        if what(j):
            return j
        assert time.monotonic() < deadline, j
        time.sleep(0.1)


def ended(j):
    return j["state"] not in ("PENDING", "RUNNING")


def test_two_users_start_in_fair_share_order(local):
    """alice fills the 4 GPUs, then queues two jobs; bob queues two after hers.  When
    alice's first jobs end, bob's start first: alice has used GPUs (her fair-share factor
    is below 1), bob has not.  Submission order (FIFO) would start alice's."""
    first = [submit_ok(local, "alice", 2, ["sleep", "4"]) for _ in range(2)]
    for j in first:
        wait(local, j, lambda x: x["state"] == "RUNNING")
    a = [submit_ok(local, "alice", 2, ["sleep", "1"]) for _ in range(2)]
    b = [submit_ok(local, "bob", 2, ["sleep", "1"]) for _ in range(2)]
    # the queue's order and why, once dtsched has placed them (a pass runs per submit)
    j = wait(local, a[0], lambda x: x.get("priority") and x["priority"]["position"] > 2)
    pos = {x: wait(local, x, lambda y: y.get("priority"))["priority"]["position"]
           for x in a + b}
    assert sorted(pos[x] for x in b) == [1, 2], pos
    assert sorted(pos[x] for x in a) == [3, 4], pos
    assert j["project"] == "vision"
    p = local.dtctl("why", a[0])
    assert p.returncode == 0, p.stderr
    assert re.search(r"queue: +position [34], priority [0-9.]+ \(project vision\)", p.stdout), \
        p.stdout
    fs = re.search(r"factors: +fairshare ([0-9.]+), age", p.stdout)
    assert fs and float(fs.group(1)) < 1, p.stdout
    assert "waits for:  waiting for 1 node(s) with 2 free slot(s)" in p.stdout, p.stdout
    p = local.dtctl("why", b[0])
    assert re.search(r"factors: +fairshare 1\.0000", p.stdout), p.stdout
    # the top job holds the reservation, with its expected start (the end of alice's timeouts
    # is unknown: they have none)
    top = [x for x in a + b if show(local, x).get("priority", {}).get("reserved")]
    assert len(top) == 1 and top[0] in b, top
    p = local.dtctl("why", "--json", top[0])
    assert json.loads(p.stdout)["priority"]["reserved"] is True
    done = {x: wait(local, x, ended) for x in first + a + b}
    assert all(done[x]["state"] == "COMPLETED" for x in done), done
    starts = {x: done[x]["started_at"] for x in a + b}
    assert max(starts[x] for x in b) <= min(starts[x] for x in a), starts


def test_quota_waits_with_reason_and_never_fitting_is_refused(local):
    """carol may hold 2 GPUs: her second 2-GPU job waits on free GPUs, with the quota as
    its reason, and starts when her first ends; a 4-GPU job of hers is refused at
    submission with the numbers, and so is a timeout above her max_time."""
    j1 = submit_ok(local, "carol", 2, ["sleep", "3"])
    wait(local, j1, lambda x: x["state"] == "RUNNING")
    j2 = submit_ok(local, "carol", 2, ["sleep", "0"])
    j = wait(local, j2, lambda x: (x.get("reason") or "").startswith("quota:"))
    assert j["state"] == "PENDING"
    assert j["reason"] == ("quota: user 'carol' has 2 of max_gpus 2 GPUs in use, this job "
                           "needs 2"), j["reason"]
    p = local.dtctl("why", j2)
    assert "waits for:  quota: user 'carol' has 2 of max_gpus 2" in p.stdout, p.stdout
    # the per-user and per-project families, meanwhile
    _, port = head(local)
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()   # (no curl on a bare Debian: make check-fresh)
    assert 'dtsched_user_gpus_in_use{user="carol"} 2' in text, text
    assert 'dtsched_user_jobs_pending{user="carol"} 1' in text, text
    assert 'dtsched_project_gpus_in_use{project="carol"} 2' in text, text
    if PROMTOOL:
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
    st, body = submit(local, "carol", 4, ["true"])
    assert st == 422, body
    assert ("the job needs 4 GPUs at once, user 'carol' may use at most 2 (fairshare user "
            "max_gpus in cluster.yaml)") in json.dumps(body), body
    st, body = submit(local, "carol", 1, ["true"], timeout_ms=3600 * 1000)
    assert st == 422, body
    assert "longer than user 'carol' may run a job (max_time 10m)" in json.dumps(body), body
    # her job without a timeout got max_time's
    assert show(local, j2)["spec"]["timeout"] == "10m"
    a, b = wait(local, j1, ended), wait(local, j2, ended)
    assert a["state"] == b["state"] == "COMPLETED", (a, b)
    assert b["started_at"] >= a["ended_at"]


def hours(j):
    def us(t):
        return time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + t[19:-1])
    return (us(j["ended_at"]) - us(j["started_at"])) * j["world_size"] / 3600


def test_acct_totals_equal_the_jobs_run(local):
    """After the jobs above: `dtctl acct --json` has one row per ended job, each with the
    GPU-hours it ran (its start to end times its GPUs), and totals per user and project
    that add them up; --user filters, --csv has the same rows; `dtctl share` shows alice
    and bob's decayed usage and factors below 1."""
    p = local.dtctl("ps", "--all", "--json")
    jobs = [j for j in json.loads(p.stdout)["jobs"] if ended(j)]
    assert len(jobs) >= 8
    p = local.dtctl("acct", "--json")
    assert p.returncode == 0, p.stderr
    acct = json.loads(p.stdout)
    rows = {r["id"]: r for r in acct["jobs"]}
    assert set(rows) == {j["id"] for j in jobs}
    want = {}
    for j in jobs:
        full = show(local, j["id"])
        r = rows[j["id"]]
        assert (r["user"], r["state"], r["gpus"]) == (j["user"], j["state"], j["world_size"])
        assert abs(r["gpu_hours"] - hours(full)) < 1e-5, (r, full)
        w = want.setdefault(j["user"], [0, 0.0])
        w[0] += 1
        w[1] += r["gpu_hours"]
    for user, (n, h) in want.items():
        t = acct["totals"]["users"][user]
        assert t["jobs"] == n and abs(t["gpu_hours"] - h) < 1e-9, (user, t, n, h)
    assert acct["totals"]["projects"]["vision"]["jobs"] == want["alice"][0]
    assert acct["totals"]["all"]["jobs"] == len(jobs)
    assert abs(acct["totals"]["all"]["gpu_hours"] - sum(h for _, h in want.values())) < 1e-9
    p = local.dtctl("acct", "--json", "--user", "bob", "--state", "COMPLETED")
    assert {r["user"] for r in json.loads(p.stdout)["jobs"]} == {"bob"}
    p = local.dtctl("acct", "--csv", "--project", "vision")
    assert p.returncode == 0, p.stderr
    got = list(csv.DictReader(io.StringIO(p.stdout)))
    assert len(got) == want["alice"][0] and {r["project"] for r in got} == {"vision"}
    p = local.dtctl("acct", "--state", "RUNNING")
    assert p.returncode == 2 and "--state 'RUNNING'" in p.stderr, p.stderr
    p = local.dtctl("acct", "--since", "yesterday")
    assert p.returncode == 2 and "--since 'yesterday'" in p.stderr, p.stderr
    p = local.dtctl("acct", "--totals")
    assert re.search(r"^user +alice +4 ", p.stdout, re.M), p.stdout
    p = local.dtctl("share", "--json")
    assert p.returncode == 0, p.stderr
    share = {u["name"]: u for u in json.loads(p.stdout)["users"]}
    for u in ("alice", "bob"):
        assert share[u]["usage_gpu_hours"] > 0 and share[u]["fairshare"] < 1, share[u]
    assert share["alice"]["project"] == "vision"
    assert share["alice"]["usage_gpu_hours"] > share["bob"]["usage_gpu_hours"]


def test_every_queued_job_has_an_expected_start(local):
    """dave's running job holds the 4 GPUs until its 2-minute timeout; he queues four more
    of 4 GPUs: the first (the top job, its reservation) is expected when the running one's
    timeout ends, each later one 2 minutes after the one ahead (each runs until its
    timeout), and behind the job without a timeout nobody knows: `why` says "unknown" and
    why, --json has expected_start null and expected_unknown."""
    r = submit_ok(local, "dave", 4, ["sleep", "300"], timeout_ms=120000)
    run = wait(local, r, lambda x: x["state"] == "RUNNING")
    q = [submit_ok(local, "dave", 4, ["true"], **({"timeout_ms": 120000} if i != 2 else {}))
         for i in range(4)]
    try:
        # the whole pass that ranks them (within a second of the last submission)
        pr = [wait(local, x, lambda y: y.get("priority") and
                   y["priority"]["position"] == q.index(y["id"]) + 1)["priority"] for x in q]
        assert pr[0]["reserved"] and not any(p["reserved"] for p in pr[1:]), pr
        t0 = ts(run["started_at"])
        got = [ts(p["expected_start"]) - t0 for p in pr[:3]]
        assert [round(x) for x in got] == [120, 240, 360], (run["started_at"], pr)
        assert pr[3]["expected_start"] is None, pr[3]
        assert "has no timeout" in pr[3]["expected_unknown"], pr[3]
        p = local.dtctl("why", q[1])
        assert p.returncode == 0, p.stderr
        assert re.search(r"^expected: +%s \(the queue simulated in priority order" %
                         re.escape(pr[1]["expected_start"]), p.stdout, re.M), p.stdout
        p = local.dtctl("why", q[3])
        assert re.search(r"^expected: +unknown: a job it waits for has no timeout", p.stdout,
                         re.M), p.stdout
        p = local.dtctl("why", "--json", q[3])
        j = json.loads(p.stdout)["priority"]
        assert j["expected_start"] is None and "no timeout" in j["expected_unknown"], j
    finally:
        for x in [r] + q:
            local.dtctl("cancel", x)
        for x in [r] + q:
            wait(local, x, ended)


def logs(c, job, user=None):
    p = as_user(c, user, "logs", "--json", job) if user else c.dtctl("logs", "--json", job)
    assert p.returncode == 0, p.stderr
    return [json.loads(l) for l in p.stdout.splitlines()]


def ts(t):
    return time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + t[19:-1])


def test_preemption_signals_waits_requeues_and_resumes(local):
    """bob's scavenger-class job (preemptible) holds the 4 GPUs; dave's normal job needs
    them: bob's gets SIGUSR1 (it checkpoints and goes on), its 2 s grace, then it is
    stopped and requeued under the same id (PREEMPTED in its history, not FAILED, not a
    retry), dave's runs, then bob's starts again with DT_RESUME and DT_ATTEMPT=1 and goes
    on from its checkpoint to COMPLETED; its lost GPU time is accounted; an unknown class
    is refused at submission."""
    script = local.shared / "victim.py"
    script.write_text(VICTIM)
    v = submit_ok(local, "bob", 4, ["python3", str(script), "200"], **{"class": "scavenger"})
    deadline = time.monotonic() + 60
    while not any(l["text"] == "step 5" for l in logs(local, v)):
        assert time.monotonic() < deadline, logs(local, v)
        time.sleep(0.1)
    a = submit_ok(local, "dave", 4, ["sleep", "1"])
    j = wait(local, v, lambda x: x.get("preempting"))
    assert j["reason"].startswith("preempted by %s (dave's job): SIGUSR1, stopped after 2s" % a), j
    j = wait(local, v, lambda x: x["state"] == "PENDING")
    h = j["history"][-2:]
    assert [x["state"] for x in h] == ["PREEMPTED", "PENDING"], j["history"]
    assert h[0]["reason"].startswith("preempted by %s" % a), h
    assert h[1]["reason"] == "requeued after preemption by %s (restart 1; 1 preemption)" % a, h
    done_a = wait(local, a, ended)
    assert done_a["state"] == "COMPLETED", done_a
    done_v = wait(local, v, ended, timeout=90)
    assert done_v["state"] == "COMPLETED" and done_v["preemptions"] == 1, done_v
    assert done_v["attempt"] == 1 and done_v["started_at"] >= done_a["ended_at"], done_v
    lines = logs(local, v)
    ck = [l for l in lines if l["text"].startswith("checkpointed at step ")]
    assert len(ck) == 1, [l["text"] for l in lines]
    k = int(ck[0]["text"].split()[-1])
    assert any(l["text"] == "resumed from step %d (attempt 1)" % k for l in lines), lines
    assert lines[-1]["text"] == "done at step 200", lines[-1]
    # it went on after its checkpoint until the grace was over (2 s after the signal)
    preempted = [h for h in done_v["history"] if h["state"] == "PREEMPTED"][0]
    assert ts(preempted["at"]) - ts(ck[0]["time"]) >= 1.5, (preempted, ck[0])
    # the event stream says preempted (by dave's job), not retried (docs/events.md)
    evs = [json.loads(l) for l in local.dtctl("events", "--json", "--job", v).stdout.splitlines()]
    kinds = [e["kind"] for e in evs]
    assert "job.retried" not in kinds and kinds.count("job.preempted") == 1, kinds
    pe = [e for e in evs if e["kind"] == "job.preempted"][0]
    assert (pe["by"], pe["preemptions"], pe["attempt"], pe["user"]) == (a, 1, 1, "bob"), pe
    acct = json.loads(local.dtctl("acct", "--json", "--user", "bob").stdout)
    row = [r for r in acct["jobs"] if r["id"] == v][0]
    assert row["state"] == "COMPLETED" and row["attempts"] == 2, row
    assert row["gpu_hours_lost"] > 0, row
    st, body = submit(local, "bob", 1, ["true"], **{"class": "gold"})
    assert st == 422 and "class 'gold' is not one of cluster.yaml's fairshare.classes " \
        "('scavenger')" in json.dumps(body), body


def test_guaranteed_floor_is_lent_then_reclaimed(local):
    """cluster.yaml guarantees alice's project vision 2 GPUs (its guaranteed_gpus): while
    vision is idle bob's 4-GPU job (checkpointing on SIGUSR1, in a class that is not
    preemptible) starts on all 4, borrowing them; when alice submits a 2-GPU job, within
    the floor, bob's is preempted to reclaim them (nothing else here preempts: no
    preempt_over_share): SIGUSR1, its 5 s grace, requeued under its id (not failed);
    `why` shows the floor, `share` the project's; her job runs, and bob's resumes from
    its checkpoint."""
    conf = local.home / "cluster.yaml"
    before = conf.read_text()
    line = "    scavenger: {preemptible: true, signal: USR1, grace: 2s}\n"
    assert line in before, before
    conf.write_text(before.replace(line, line + "    slow: {grace: 5s}\n"
                                   "  projects:\n    vision: {guaranteed_gpus: 2}\n"))
    try:
        deadline = time.monotonic() + 30
        while True:   # dtsched reads cluster.yaml again within a second of a change
            p = local.dtctl("share", "--json")
            assert p.returncode == 0, p.stderr
            proj = {x["name"]: x for x in json.loads(p.stdout)["projects"]}
            if proj.get("vision", {}).get("guaranteed_gpus") == 2:
                break
            assert time.monotonic() < deadline, proj
            time.sleep(0.2)
        script = local.shared / "victim.py"
        script.write_text(VICTIM)
        v = submit_ok(local, "bob", 4, ["python3", str(script), "100"], **{"class": "slow"})
        wait(local, v, lambda x: x["state"] == "RUNNING")   # on vision's GPUs too
        deadline = time.monotonic() + 60
        while not any(l["text"] == "step 5" for l in logs(local, v)):
            assert time.monotonic() < deadline, logs(local, v)
            time.sleep(0.1)
        a = submit_ok(local, "alice", 2, ["sleep", "1"])
        j = wait(local, v, lambda x: x.get("preempting") or ended(x))
        assert j["reason"] == ("preempted by %s (alice's job): SIGUSR1, stopped after 5s unless "
                               "it ends first; project 'vision' reclaims its guaranteed GPUs"
                               % a), j
        # her job waits out the grace: its place, and the floor it is within
        ja = wait(local, a, lambda x: x.get("priority") or ended(x))
        if ja["state"] == "PENDING":
            assert ja["priority"]["floor"] == {"guaranteed_gpus": 2, "gpus_in_use": 0,
                                               "within": True}, ja["priority"]
            assert ja["priority"]["position"] == 1, ja["priority"]
            p = local.dtctl("why", a)
            assert ("floor:      project vision is guaranteed 2 GPUs, 0 in use: this job is "
                    "within it" in p.stdout) or "it is not waiting" in p.stdout, p.stdout
        p = local.dtctl("share")
        projects = p.stdout.split("\nPROJECT ", 1)[-1]
        assert projects.split("\n", 1)[0].endswith("  FLOOR"), p.stdout
        assert re.search(r"^ +vision .* +2$", projects, re.M), p.stdout
        done_a = wait(local, a, ended)
        assert done_a["state"] == "COMPLETED", done_a
        done_v = wait(local, v, ended, timeout=90)
        assert done_v["state"] == "COMPLETED" and done_v["preemptions"] == 1, done_v
        assert done_v["attempt"] == 1 and done_v["started_at"] >= done_a["started_at"], done_v
        h = [x["state"] for x in done_v["history"]]
        assert "PREEMPTED" in h and "FAILED" not in h, done_v["history"]
        lines = logs(local, v)
        ck = [l for l in lines if l["text"].startswith("checkpointed at step ")]
        assert len(ck) == 1, [l["text"] for l in lines]
        assert any(l["text"] == "resumed from step %s (attempt 1)" % ck[0]["text"].split()[-1]
                   for l in lines), lines
        assert lines[-1]["text"] == "done at step 100", lines[-1]
    finally:
        conf.write_text(before)


def team_run(c, user, *args):
    """`dtctl run -d` as the real Unix user `user` (team mode): the job's id."""
    p = as_user(c, user, "run", "-d", "--json", "-w", "/tmp", *args)
    assert p.returncode == 0, (user, p.stdout, p.stderr)
    out = json.loads(p.stdout)
    return out["job"]["id"] if "job" in out else out["id"]


@pytest.fixture(scope="module")
def fairteam(users, dtctl_bin, tmp_path_factory):
    """Team mode (docs/team.md) with 4 GPUs, fair share, and preemption on fair share: real
    Unix users dtt-alice and dtt-bob, each known to dtsched by SO_PEERCRED on its local
    socket.  A job runs 8 s before it may be preempted; the class `normal` (not
    preemptible) only shortens the grace."""
    with team_cluster(dtctl_bin, tmp_path_factory.mktemp("fairteam"), name="fairteam",
                      gpus="4", extra="fairshare:\n  half_life: 1h\n  preempt_over_share: true\n"
                      "  preempt_min_run: 8s\n  classes: {normal: {grace: 2s}}\n") as c:
        yield c


def test_real_users_start_in_fair_share_order(fairteam):
    """dtt-alice fills the 4 GPUs, then queues two jobs; dtt-bob queues two after hers.
    Bob's start first when hers end: she has used GPU-hours, he has not; submission order
    would start alice's.  (Her first jobs end before the minimum run time: nothing is
    preempted.)"""
    c = fairteam

    def run(user, secs):
        return team_run(c, user, "-g", "2", "--name", user, "--", "sleep", str(secs))

    first = [run(ALICE, 4) for _ in range(2)]
    for j in first:
        wait(c, j, lambda x: x["state"] == "RUNNING", user=ALICE)
    a = [run(ALICE, 1) for _ in range(2)]
    b = [run(BOB, 1) for _ in range(2)]
    owner = dict([(x, ALICE) for x in first + a] + [(x, BOB) for x in b])
    # once dtsched has placed bob's in the queue (a whole pass, within a second)
    wait(c, a[0], lambda y: y.get("priority") and y["priority"]["position"] > 2, user=ALICE)
    pos = {x: wait(c, x, lambda y: y.get("priority") or ended(y), user=owner[x])
           .get("priority", {}).get("position") for x in a + b}
    assert sorted(pos[x] for x in b) == [1, 2] and sorted(pos[x] for x in a) == [3, 4], pos
    done = {x: wait(c, x, ended, user=owner[x]) for x in first + a + b}
    assert all(done[x]["state"] == "COMPLETED" and not done[x].get("preemptions")
               for x in done), done
    assert {done[x]["user"] for x in a} == {ALICE} and {done[x]["user"] for x in b} == {BOB}
    starts = {x: done[x]["started_at"] for x in a + b}
    assert max(starts[x] for x in b) <= min(starts[x] for x in a), starts


def test_real_users_over_share_work_is_preempted(fairteam):
    """preempt_over_share: dtt-bob's 4-GPU job (checkpointing on SIGUSR1) has run past
    the minimum run time and bob is over his share; dtt-alice, under hers, submits a 2-GPU
    job: bob's gets SIGUSR1, its 2 s grace, is requeued under its id (not failed), alice's
    runs, and bob's resumes from its checkpoint."""
    c = fairteam
    script = c.shared / "victim.py"
    script.write_text(VICTIM)
    os.chmod(script, 0o644)
    spec = c.shared / "victim.yaml"
    spec.write_text("name: victim\nnodes: 1\ngpus_per_node: 4\nclass: normal\n"
                    "command: [python3, %s, '400']\n" % script)
    os.chmod(spec, 0o644)
    v = team_run(c, BOB, spec)
    wait(c, v, lambda x: x["state"] == "RUNNING", user=BOB)
    deadline = time.monotonic() + 60
    while not any(l["text"] == "step 200" for l in logs(c, v, BOB)):   # 10 s: over his share
        assert time.monotonic() < deadline, logs(c, v, BOB)
        time.sleep(0.2)
    a = team_run(c, ALICE, "-g", "2", "--", "sleep", "1")
    j = wait(c, v, lambda x: x.get("preempting") or ended(x), user=BOB)
    assert j["reason"].startswith("preempted by %s (%s's job): SIGUSR1, stopped after 2s"
                                  % (a, ALICE)), j
    done_a = wait(c, a, ended, user=ALICE)
    assert done_a["state"] == "COMPLETED", done_a
    done_v = wait(c, v, ended, timeout=90, user=BOB)
    assert done_v["state"] == "COMPLETED" and done_v["preemptions"] == 1, done_v
    assert done_v["attempt"] == 1, done_v
    lines = logs(c, v, BOB)
    ck = [l for l in lines if l["text"].startswith("checkpointed at step ")]
    assert len(ck) == 1, [l["text"] for l in lines]
    assert any(l["text"] == "resumed from step %s (attempt 1)" % ck[0]["text"].split()[-1]
               for l in lines), lines

