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

    flock /tmp/dtctl-fakecluster.lock make e2e BUILD=dev E2E_PATHS=tests/e2e/test_sweep_asha.py
"""

import json
import sqlite3

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
    (trial, rung) the number of values the rung held before it, and how many trials went
    on past each rung."""
    vals = [[] for _ in RUNGS]
    rec, pruned, before = {}, {}, {}
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
            go = (better < max(1, quota) and n > 1) or n <= ETA or better == 0 or went_on < quota
            if not go:
                pruned.setdefault(t, k)
    went = [sum(1 for u, r in rec.items() if r > k + 1 or (r == k + 1 and u not in pruned))
            for k in range(len(RUNGS))]
    return vals, pruned, before, went


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
    vals, pruned, before, went = replay(reports)

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
    # second, and the grace rule had arrivals to work on (several at a rung early on)
    first_at_3 = next(i for i, r in enumerate(reports) if r[1] >= RUNGS[1])
    assert len({r[0] for r in reports[:first_at_3]}) >= 4, reports[:first_at_3]

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
