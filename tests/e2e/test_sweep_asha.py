"""ASHA under parallel arrivals, end to end: a 27-trial sweep on the 3-node fake cluster
of tests/e2e/test_sweep.py (its fixture and helpers, 6 CPU slots), every slot busy, the
trials' epochs ending on the same wall-clock ticks so that several trials reach a rung
together, as they do in a real parallel sweep.

What is checked is the rule of scheduler/asha.h (eta 3, rungs at epochs 1, 3 and 9,
max_iter 27), on what dtsched really did:
- replaying the reports in the order dtsched's ASHA heard them (sweep_reports in
  state.db, stored before ASHA hears them) through a reference model of the rule gives
  exactly the trials dtsched pruned, each at the rung it named;
- no trial was pruned at a rung holding fewer than eta values before it;
- the best value at each rung belongs to a trial not pruned there;
- at least floor(27 / 3^k) trials reached rung k before being pruned (27, 9, 3) and at
  least one trained to the end;
- the rung occupancy that `dtctl sweep status` shows is the model's.
And the promotion variant (`checkpoint: true`): trials that checkpoint are paused at each
rung and the top 1/eta resumed from their checkpoints (a stub trial, a kill -9 of dtsched
in the middle with reports written while it is down, and dttrain itself); trials that
reach max_iter before they can be paused are never promoted, and a repeated report is
refused.

    flock /tmp/dtctl-fakecluster.lock make e2e BUILD=dev E2E_PATHS=tests/e2e/test_sweep_asha.py
"""

import json
import os
import re
import signal
import sqlite3
import time

from conftest import _alive
from test_sweep import PY, cluster  # noqa: F401  (cluster: the module fixture, reused)

ETA = 3
RUNGS = (1, 3, 9)
EPOCHS = 27
TICK = 0.25

# Loss a(i) + b(i) / epoch: the ranking at epoch 1 is not the ranking at 9 or 27.  Each
# epoch ends on the next multiple of TICK of the wall clock (the nodes share the host's),
# so the trials running together report the same epoch in the same tick.
TRIAL = r'''
import json, os, time
i = int(os.environ["DT_PARAM_I"])
a, b = ((7 * i) %% 27) / 27.0, 0.5 + ((5 * i) %% 4) / 4.0
for e in range(1, %d + 1):
    time.sleep(%r - time.time() %% %r)
    print("DTCTL_METRIC " + json.dumps({"epoch": e, "loss": a + b / e}), flush=True)
''' % (EPOCHS, TICK, TICK)

# a fixed shuffle of 0..26: grid trials are made in this order
ORDER = [13, 4, 22, 9, 17, 0, 25, 6, 11, 19, 2, 24, 15, 8, 20, 1, 26, 10, 5, 16, 23, 3, 12,
         21, 7, 18, 14]


def replay(reports):
    """The rule of scheduler/asha.h with grace (asha_report/trial_record), fed the
    reports (trial, epoch, loss) in the order dtsched's ASHA heard them.  Returns the
    values recorded per rung, the rung index each pruned trial was pruned at, for each
    (trial, rung) the number of values the rung held before it, how many trials went on
    past each rung, and the (trial, rung) that went on by grace alone."""
    vals = [[] for _ in RUNGS]
    rec, pruned, before, graced = {}, {}, {}, []
    for t, e, v in reports:
        rec.setdefault(t, 0)
        while rec[t] < len(RUNGS) and RUNGS[rec[t]] <= e:
            k = rec[t]
            better = sum(1 for x in vals[k] if x < v)
            before[t, k] = len(vals[k])
            vals[k].append(v)
            rec[t] += 1
            n = len(vals[k])
            quota = n // ETA
            went_on = sum(1 for u, r in rec.items()
                          if u != t and (r > k + 1 or (r == k + 1 and u not in pruned)))
            plain = better < max(1, quota) and n > 1
            go = plain or n <= ETA or better == 0 or went_on < quota
            if go and not plain:
                graced.append((t, k))
            if not go:
                pruned.setdefault(t, k)
    went = [sum(1 for u, r in rec.items() if r > k + 1 or (r == k + 1 and u not in pruned))
            for k in range(len(RUNGS))]
    return vals, pruned, before, went, graced


def test_parallel_asha_27_trials_follow_the_rule(cluster):  # noqa: F811
    script = cluster.write("asha_par_trial.py", TRIAL)
    f = cluster.sweep_file("asha-par.yaml", """
method: grid
metric: {name: loss, goal: minimize}
parameters:
  i: {values: %s}
early_terminate: {type: hyperband, min_iter: 1, eta: %d, max_iter: %d}
job: {name: ashapar, procs_per_node: 1, command: [%s, %s]}
""" % (json.dumps(ORDER), ETA, EPOCHS, PY, script))
    sid = cluster.submit(f)
    ex = cluster.wait_sweep(sid, ["COMPLETED", "FAILED", "STOPPED"], 120)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    trials = {t["trial"]: t for t in ex["trials"]}
    assert len(trials) == 27
    assert sorted(t["state"] for t in trials.values() if t["state"] not in
                  ("COMPLETED", "PRUNED")) == [], [(t["trial"], t["state"]) for t in trials.values()]

    db = sqlite3.connect("file:%s?mode=ro" % (cluster.home / "state.db"), uri=True)
    rows = db.execute("SELECT trial, data FROM sweep_reports WHERE sweep = ? ORDER BY rowid",
                      (sid,)).fetchall()
    db.close()
    reports = [(t, json.loads(d)["epoch"], json.loads(d)["loss"]) for t, d in rows]
    vals, pruned, before, went, graced = replay(reports)

    # what dtsched did is what the rule says, trial by trial
    actual = {}
    for no, t in trials.items():
        if t["state"] == "PRUNED":
            assert t["reason"].startswith("pruned by ASHA at epoch "), t
            actual[no] = RUNGS.index(int(t["reason"].split()[5]))
    assert actual == pruned, (actual, pruned)
    assert all(trials[no]["state"] == "COMPLETED" and trials[no]["resource"] == EPOCHS
               for no in trials if no not in pruned), trials

    # the trials ran in parallel: several reached the first rung before any reached the
    # second, and some went on by grace alone (early arrivals, judged on few values)
    first_at_3 = next(i for i, r in enumerate(reports) if r[1] >= RUNGS[1])
    assert len({r[0] for r in reports[:first_at_3]}) >= 3, reports[:first_at_3]
    assert graced, "no trial needed the grace rule"

    # never pruned at a rung holding fewer than eta values before it
    for no, k in pruned.items():
        assert before[no, k] >= ETA, (no, k, before[no, k])
    # the best value at each rung is never pruned there
    for k in range(len(RUNGS)):
        best = min(vals[k])
        owners = [no for (no, kk) in before if kk == k and reports_at(reports, no, RUNGS[k]) == best]
        assert owners and all(pruned.get(no) != k for no in owners), (k, best, owners, pruned)
    # at least floor(27 / eta^k) reached rung k before being pruned, one or more to the end
    for k in range(len(RUNGS)):
        merit = sum(1 for (no, kk) in before if kk == k and pruned.get(no, 99) >= k)
        assert merit >= 27 // ETA ** k, (k, merit)
    assert sum(t["state"] == "COMPLETED" for t in trials.values()) >= 1

    # dtctl sweep status shows the same rung occupancy
    rungs = ex["sweep"]["rungs"]
    assert [(r["resource"], r["reached"], r["went_on"]) for r in rungs] == \
        [(float(RUNGS[k]), len(vals[k]), went[k]) for k in range(len(RUNGS))], (rungs, went)
    p = cluster.dtctl("sweep", "status", sid)
    assert p.returncode == 0, p.stderr
    assert "rungs: at 1: %d reached, %d went on; at 3: %d reached" % (
        len(vals[0]), went[0], len(vals[1])) in p.stdout, p.stdout


def reports_at(reports, trial, epoch):
    """The value trial recorded at the rung at `epoch`: its first report at or past it."""
    return next(v for t, e, v in reports if t == trial and e >= epoch)


# ----------------------------------------------------------------------------- promotion

# A trial that checkpoints: after each epoch it writes the epoch to $DT_JOB_DIR/ckpt/epoch
# (temp file + rename), then reports; with DT_RESUME (a promoted trial: the ckpt dir of the
# job it paused in; a retried job: the checkpoint file) it continues after that epoch.  It
# holds SIGTERM (how dtctl stops a job) off between the checkpoint and its report, as a
# trial must (docs/sweep.md): a stop between the two would lose that epoch's report.
CKPT_TRIAL = r'''
import json, os, signal, time
i = int(os.environ["DT_PARAM_I"])
a, b = ((7 * i) %% 9) / 9.0, 0.5 + ((5 * i) %% 4) / 4.0
ck = os.path.join(os.environ["DT_JOB_DIR"], "ckpt")
os.makedirs(ck, exist_ok=True)
start, r = 0, os.environ.get("DT_RESUME")
if r:
    with open(os.path.join(r, "epoch") if os.path.isdir(r) else r) as f:
        start = int(f.read())
    print("resumed from epoch %%d" %% start, flush=True)
for e in range(start + 1, %d + 1):
    time.sleep(%r - time.time() %% %r)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    with open(os.path.join(ck, "epoch.tmp"), "w") as f:
        f.write(str(e))
    os.replace(os.path.join(ck, "epoch.tmp"), os.path.join(ck, "epoch"))
    print("DTCTL_METRIC " + json.dumps({"epoch": e, "loss": a + b / e}), flush=True)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
'''


def promotion_sweep(cluster, name):  # noqa: F811
    """Submit the 9-trial promotion sweep `name` (below); returns its id."""
    script = cluster.write("ckpt_trial.py", CKPT_TRIAL % (9, TICK, TICK))
    f = cluster.sweep_file(name + ".yaml", """
method: grid
metric: {name: loss, goal: minimize}
parameters:
  i: {values: [4, 7, 1, 8, 0, 5, 2, 6, 3]}
early_terminate: {type: hyperband, min_iter: 1, eta: 3, max_iter: 9}
checkpoint: true
job: {name: ashaprom, procs_per_node: 1, command: [%s, %s]}
""" % (PY, script))
    return cluster.submit(f)


def check_promotion(cluster, sid, name):  # noqa: F811
    """What every promotion sweep must show at its end (see the test below)."""
    ex = cluster.wait_sweep(sid, ["COMPLETED", "FAILED", "STOPPED"], 120)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    assert ex["sweep"]["asha_mode"] == "promote"
    trials = {t["trial"]: t for t in ex["trials"]}
    states = sorted(t["state"] for t in trials.values())
    assert set(states) <= {"COMPLETED", "PRUNED"}, [(t["trial"], t["state"], t["reason"])
                                                   for t in trials.values()]
    assert states.count("COMPLETED") >= 1, states
    for t in trials.values():
        epochs = [m["epoch"] for m in t["metrics"]]
        # continued, never restarted: each epoch reported once, in order
        assert epochs == list(range(1, len(epochs) + 1)), (t["trial"], epochs)
        if t["state"] == "COMPLETED":
            assert epochs[-1] == 9, t
        else:
            assert t["reason"].startswith("not promoted past"), t
    reached = [sum(1 for t in trials.values() if len(t["metrics"]) >= r) for r in (1, 3, 9)]
    assert reached[0] == 9 and reached[1] >= 3 and reached[2] >= 1, reached
    rungs = ex["sweep"]["rungs"]
    assert [r["resource"] for r in rungs] == [1.0, 3.0], rungs
    assert rungs[0]["reached"] == 9 and rungs[0]["went_on"] >= 3, rungs

    # each promoted trial ran as several jobs; every later one resumed where the last stopped
    jobs = sorted((j for j in cluster.jobs() if j["name"].startswith(name + "-t")),
                  key=lambda j: j["id"])
    promoted = 0
    for no, t in trials.items():
        runs = [j for j in jobs if j["name"] == "%s-t%d" % (name, no)]
        assert runs, (no, jobs)
        last = 0
        for k, j in enumerate(runs):
            log = (cluster.fc.shared / "jobs" / j["id"] / "logs" / "0.log").read_text()
            got = [json.loads(line.split("DTCTL_METRIC ", 1)[1])["epoch"]
                   for line in log.splitlines() if "DTCTL_METRIC " in line]
            if k:
                assert "resumed from epoch %d" % last in log, (no, j["id"], last, log)
                promoted += 1
            else:
                assert "resumed from" not in log, log
            assert got and got[0] == last + 1, (no, j["id"], last, got)
            last = got[-1]
        assert last == len(t["metrics"]), (no, last, t["metrics"])
    assert promoted >= 3 + 1, promoted   # at least 3 from epoch 1, 1 from epoch 3
    return ex


def test_promotion_resumes_trials_from_their_checkpoints(cluster):  # noqa: F811
    """`checkpoint: true`: ASHA's promotion variant.  9 trials, eta 3, rungs at epochs 1
    and 3, max_iter 9.  Every trial pauses at its rung (its job stopped, its slot freed);
    the top 1/eta of a rung are promoted, each resumed as a new job from the checkpoint of
    the job it paused in: its log says "resumed from epoch N", N the last epoch it
    reported, and its epochs go on from there (never restarted).  At least floor(9/3^k)
    trials reach rung k, one or more train to the end, the others end PRUNED (never
    promoted)."""
    sid = promotion_sweep(cluster, "asha-promote")
    p = cluster.dtctl("validate", "--json", cluster.tmp / "asha-promote.yaml")
    assert p.returncode == 0, p.stderr
    v = json.loads(p.stdout)["files"][0]
    assert v["checkpoint"] is True and v["early_terminate"]["mode"] == "promote", v
    check_promotion(cluster, sid, "asha-promote")
    p = cluster.dtctl("sweep", "status", sid)
    assert p.returncode == 0, p.stderr
    assert "ASHA: promote (checkpoint: true)" in p.stdout, p.stdout


def metric_lines(cluster, job):  # noqa: F811
    """The epochs rank 0 of `job` reported in its log so far."""
    try:
        log = (cluster.fc.shared / "jobs" / job / "logs" / "0.log").read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line.split("DTCTL_METRIC ", 1)[1])["epoch"]
            for line in log.splitlines() if "DTCTL_METRIC " in line and line.endswith("}")]


def test_promotion_survives_kill_9_of_dtsched(cluster):  # noqa: F811
    """dtsched killed while trials wait at a rung and a promoted one runs: the restarted
    one knows which trials are paused (the trials table) and what the rungs hold (the
    reports, replayed), reads every report written while it was down exactly once, and
    the sweep ends as an uninterrupted one would."""
    sid = promotion_sweep(cluster, "asha-crash")
    deadline = time.time() + 30
    while True:
        ex = cluster.export(sid)
        st = [t["state"] for t in ex["trials"]]
        if "PAUSED" in st and any(t["state"] in ("PENDING", "RUNNING") and t["metrics"]
                                  for t in ex["trials"]):
            break
        assert time.time() < deadline, ex
        time.sleep(0.05)
    pid = int((cluster.home / "dtsched.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 10
    while _alive(pid):
        assert time.time() < deadline, "dtsched %d survives SIGKILL" % pid
        time.sleep(0.05)
    # the head is down: wait until a running trial reports something after the kill
    seen = {t["job_id"]: len(metric_lines(cluster, t["job_id"])) for t in ex["trials"]
            if t["state"] in ("PENDING", "RUNNING") and t["job_id"]}
    deadline = time.time() + 30
    while not any(len(metric_lines(cluster, j)) > n for j, n in seen.items()):
        assert time.time() < deadline, seen
        time.sleep(0.05)
    assert cluster.dtctl("head", "start").returncode == 0
    check_promotion(cluster, sid, "asha-crash")


def test_promotion_with_dttrain_resumes_its_checkpoints(cluster):  # noqa: F811
    """The real path: templates/sweep.yaml's trainer trials with `checkpoint: true` and a
    checkpoint per epoch (32 steps, rank 0 paced at 15 ms a step so that an epoch takes
    about half a second, not a few milliseconds: a trial that trains all 8 epochs before
    dtsched can pause it is COMPLETED, never promoted).  Every promoted trial's new job
    says dttrain "resumed from <the previous job's dir>/ckpt/step-N.ckpt at step N"
    (N > 0: not a restart) and its first metric report is the epoch after step N; the
    sweep records each epoch of a trial once."""
    f = cluster.sweep_file("dtprom.yaml", """
method: random
metric: {name: val_loss, goal: minimize}
parameters:
  lr: {distribution: log_uniform_values, min: 1.0e-3, max: 3.0e-1}
  hidden: {values: [64, 128, 256]}
early_terminate: {type: hyperband, min_iter: 2, eta: 2, max_iter: 8}
checkpoint: true
job:
  name: trial
  nodes: 1
  procs_per_node: 1
  launcher: agent
  trainer: {model: mlp, hidden: 128, epochs: 8, data: synthetic, train_size: 4096,
            val_size: 512, threads: 1, batch: 128, checkpoint_every: 32, slow_rank: "0:15"}
max_trials: 8
seed: 3
""")
    sid = cluster.submit(f)
    ex = cluster.wait_sweep(sid, ["COMPLETED", "FAILED", "STOPPED"], 120)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    assert sum(t["state"] == "COMPLETED" for t in ex["trials"]) >= 1, ex["trials"]
    for t in ex["trials"]:
        epochs = [m["epoch"] for m in t["metrics"]]
        assert epochs == sorted(set(epochs)), (t["trial"], epochs)   # none twice
        assert t["state"] != "COMPLETED" or epochs[-1] == 8, (t["trial"], epochs)
    jobs = sorted((j for j in cluster.jobs() if j["name"].startswith("dtprom-t")),
                  key=lambda j: j["id"])
    resumed = 0
    for t in ex["trials"]:
        runs = [j for j in jobs if j["name"] == "dtprom-t%d" % t["trial"]]
        for prev, j in zip(runs, runs[1:]):
            d = cluster.fc.shared / "jobs" / j["id"]
            log = (d / "logs" / "0.log").read_text()
            m = re.search(r"resumed from (\S+)/jobs/(j-\d+)/ckpt/step-\d+\.ckpt at step (\d+)",
                          log)
            assert m and m.group(2) == prev["id"] and int(m.group(3)) > 0, (j["id"], log[:2000])
            epochs = [json.loads(line).get("epoch") for line in
                      (d / "metrics.jsonl").read_text().splitlines() if "val_loss" in line]
            assert epochs and epochs[0] == int(m.group(3)) // 32 + 1, (j["id"], m.group(3), epochs)
            resumed += 1
    # 4 go on past epoch 2 and 2 past epoch 4; a fast trial may overrun a rung before its
    # job is stopped (its values there count), so fewer promotions may be needed
    assert resumed >= 2, resumed


# SIGTERM held off from the start: epochs 1-3 (epoch 2 twice), then it waits until dtsched
# stops its job (paused at the first rung), then epochs 4-9 (max_iter) at once, and exits.
FAST_TRIAL = r'''
import json, os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
i = int(os.environ["DT_PARAM_I"])
ck = os.path.join(os.environ["DT_JOB_DIR"], "ckpt")
os.makedirs(ck, exist_ok=True)


def report(e):
    with open(os.path.join(ck, "epoch.tmp"), "w") as f:
        f.write(str(e))
    os.replace(os.path.join(ck, "epoch.tmp"), os.path.join(ck, "epoch"))
    print("DTCTL_METRIC " + json.dumps({"epoch": e, "loss": (i + 1) / e}), flush=True)


for e in (1, 2, 2, 3):
    report(e)
print("stopped" if signal.sigtimedwait({signal.SIGTERM}, 60) else "never stopped", flush=True)
for e in range(4, 10):
    report(e)
'''


def test_promotion_trials_at_max_iter_are_never_promoted(cluster):  # noqa: F811
    """Trials paused at the first rung that report on to max_iter before their job is
    gone (here: only once they are told to stop).  What they report after the decision is
    read (it used to be lost), and, at max_iter, they are COMPLETED, one job each: never
    promoted (they used to be, as a new job that resumed at the end).  The repeated
    report of epoch 2 is refused and logged, never recorded."""
    script = cluster.write("fast_trial.py", FAST_TRIAL)
    f = cluster.sweep_file("asha-fast.yaml", """
method: grid
metric: {name: loss, goal: minimize}
parameters:
  i: {values: [0, 1, 2, 3]}
early_terminate: {type: hyperband, min_iter: 1, eta: 3, max_iter: 9}
checkpoint: true
job: {name: ashafast, procs_per_node: 1, command: [%s, %s]}
""" % (PY, script))
    sid = cluster.submit(f)
    ex = cluster.wait_sweep(sid, ["COMPLETED", "FAILED", "STOPPED"], 60)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    for t in ex["trials"]:
        log = (cluster.fc.shared / "jobs" / t["job_id"] / "logs" / "0.log").read_text()
        assert "O stopped" in log, log
        assert t["state"] == "COMPLETED" and t["resource"] == 9, t
        assert t["reason"].startswith("trained to max_iter before its job could be stopped"), t
        assert [m["epoch"] for m in t["metrics"]] == list(range(1, 10)), t
        assert abs(t["value"] - (int(t["params"]["i"]) + 1) / 9.0) < 1e-9, t
    jobs = [j for j in cluster.jobs() if j["name"].startswith("asha-fast-t")]
    assert sorted(j["name"] for j in jobs) == ["asha-fast-t%d" % k for k in (1, 2, 3, 4)], jobs
    log = (cluster.home / "dtsched.log").read_text()
    for t in ex["trials"]:
        refused = [line for line in log.splitlines() if "sweep %s trial %d: " % (sid, t["trial"])
                   in line and "refused as a repeat" in line]
        assert len(refused) == 1 and '{"epoch":2,' in refused[0] and \
            "at byte " in refused[0] and "(epoch 2)" in refused[0], (t["trial"], refused)
