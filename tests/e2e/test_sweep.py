"""`dtctl sweep` end to end on a 3-node fake cluster (2 CPU slots per node): dtsched on
the host runs the sweep controller (scheduler/sweeps.c), one dtagent per node.

Covered: bad sweep files (exit 2, no sweep, no job); a 12-trial random sweep of a tiny
dttrain (one rank per trial) packed onto the 6 slots; ASHA pruning with a script whose
curves make the pruned trials known; a grid sweep of a stdout-reporting script with
{name} placeholders, DT_PARAM_*/DT_TRIAL_ID and a trial that never reports ("no
metric"); failing trials (retried once, the sweep stops after max_failures); kill -9 of
dtsched mid-sweep and a restart (no completed trial rerun, exactly max_trials trials);
a node dying mid-sweep (its trials requeued on the others); pause/resume/stop; status,
best (YAML), export (CSV/JSON) and report.

    make BUILD=dev-sweepc e2e E2E_ARGS='-k sweep'
"""

import csv
import io
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import HeadCluster
from dtapi import PROTOCOL

HEAD_PORT = 17691
AGENT_PORT = 17690
DEAD_AFTER_MS = 2000
PY = "/usr/bin/python3"


class Ctx(HeadCluster):
    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=2, tag="sweep",
                         dead_after_ms=DEAD_AFTER_MS, dtctl_timeout=120)

    def sweeps(self):
        p = self.dtctl("sweep", "list", "--json")
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["sweeps"]

    def export(self, sweep):
        p = self.dtctl("sweep", "export", "--json", sweep)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    def wait_sweep(self, sweep, states, timeout=90):
        deadline = time.time() + timeout
        while True:
            try:
                ex = self.export(sweep)
                if ex["sweep"]["state"] in states:
                    return ex
            except AssertionError:
                if time.time() > deadline:
                    raise
            if time.time() > deadline:
                raise AssertionError("sweep %s not %s after %ss: %s"
                                     % (sweep, states, timeout, json.dumps(ex, indent=1)[:4000]))
            time.sleep(0.25)

    def write(self, name, text):
        """A file every node can read (the shared dir)."""
        return self.shared_file("sweep-test", name, text)

    def sweep_file(self, name, text):
        p = self.tmp / name
        p.write_text(text)
        return p

    def submit(self, path):
        p = self.dtctl("sweep", "--detach", path)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout.strip()


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    fc = fake_cluster(3)
    tmp = tmp_path_factory.mktemp("sweep")
    ctx = Ctx(fc, dtctl_bin, tmp)
    home = ctx.home
    assert ctx.dtctl("head", "start").returncode == 0
    try:
        secret = (home / "secret").read_text().strip()
        for i in range(1, fc.n + 1):
            p = fc.exec(i, "mkdir -p -m 700 %s && umask 077 && printf '%%s\\n' %s > %s/secret"
                        % (ctx.agent_home(i), secret, ctx.agent_home(i)), user=True)
            assert p.returncode == 0, p.stderr
        for i in range(1, fc.n + 1):
            ctx.start_agent(i)
        ctx.wait_nodes_up()
        yield ctx
        for s in ctx.sweeps():
            if s["state"] in ("RUNNING", "PAUSED"):
                ctx.dtctl("sweep", "stop", s["id"])
        for j in ctx.jobs():
            if j["state"] in ("PENDING", "RUNNING"):
                ctx.dtctl("cancel", j["id"])
    finally:
        # also when the setup failed: no dtsched or agent left behind
        for i in range(1, fc.n + 1):
            ctx.stop_agent(i)
        ctx.dtctl("head", "stop")


def sweep_jobs(ctx, name):
    return [j for j in ctx.jobs() if j["name"].startswith(name + "-t")]


# ----------------------------------------------------------------------------- bad input

BAD = {
    "min_above_max": ("method: random\nmetric: {name: loss}\nparameters:\n"
                      "  lr: {distribution: uniform, min: 2, max: 1}\n", "min"),
    "log_touching_0": ("method: random\nmetric: {name: loss}\nparameters:\n"
                       "  lr: {distribution: log_uniform_values, min: 0, max: 1}\n", "log"),
    "empty_values": ("method: random\nmetric: {name: loss}\nparameters:\n  h: {values: []}\n",
                     "values"),
    "unknown_method": ("method: hillclimb\nmetric: {name: loss}\nparameters:\n"
                       "  h: {values: [1, 2]}\n", "hillclimb"),
    "unknown_key": ("method: random\nmetric: {name: loss}\nparameters:\n  h: {values: [1, 2]}\n"
                    "paralel: 2\n", "paralel"),
    "grid_too_big": ("method: grid\nmetric: {name: loss}\nparameters:\n  h: {values: [1, 2, 3]}\n"
                     "  w: {values: [1, 2, 3]}\nmax_trials: 4\n", "max_trials"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_sweep_file_exit_2_nothing_started(cluster, case):
    text, word = BAD[case]
    text += ("job: {procs_per_node: 1, command: [true]}\n" if "max_trials" in text else
             "job: {procs_per_node: 1, command: [true]}\nmax_trials: 2\n")
    f = cluster.sweep_file("bad-%s.yaml" % case, text)
    sweeps, jobs = len(cluster.sweeps()), len(cluster.jobs())
    p = cluster.dtctl("sweep", f)
    assert p.returncode == 2, (case, p.returncode, p.stdout, p.stderr)
    assert word in p.stderr and str(f) in p.stderr, (case, p.stderr)
    assert "nothing was started" in p.stderr, p.stderr
    assert len(cluster.sweeps()) == sweeps and len(cluster.jobs()) == jobs


# ----------------------------------------------------------------------------- 12 trials

def test_random_sweep_12_dttrain_trials_packed_on_6_slots(cluster):
    f = cluster.sweep_file("rand12.yaml", """
method: random
metric: {name: val_loss, goal: minimize}
parameters:
  lr: {distribution: log_uniform_values, min: 1.0e-3, max: 0.3}
  batch: {values: [32, 64]}
job:
  name: mlp
  procs_per_node: 1
  launcher: agent
  trainer: {model: mlp, hidden: 32, epochs: 3, train_size: 512, val_size: 128, threads: 1}
max_trials: 12
seed: 11
""")
    t0 = time.time()
    p = cluster.dtctl("sweep", f, timeout=150)
    took = time.time() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    assert "COMPLETED" in p.stderr and "best: trial" in p.stdout, p.stdout + p.stderr
    sid = p.stderr.split("sweep ")[1].split()[0]
    ex = cluster.export(sid)
    assert ex["protocol"] == PROTOCOL and ex["sweep"]["state"] == "COMPLETED"
    assert ex["sweep"]["method"] == "random" and ex["sweep"]["max_trials"] == 12
    assert [t["trial"] for t in ex["trials"]] == list(range(1, 13))
    for t in ex["trials"]:
        assert t["state"] == "COMPLETED" and isinstance(t["value"], float), t
        assert t["no_metric"] is False and t["resource"] == 3, t
        assert [m["epoch"] for m in t["metrics"]] == [1, 2, 3], t["metrics"]
        assert set(t["params"]) == {"lr", "batch"} and t["params"]["batch"] in ("32", "64")
    best = min(ex["trials"], key=lambda t: t["value"])
    assert ex["best"]["trial"] == best["trial"] and ex["best"]["params"] == best["params"]
    # one job per trial, spread over the 3 nodes, never more than 6 at once
    jobs = {j["id"]: j for j in sweep_jobs(cluster, ex["sweep"]["name"])}
    assert len(jobs) == 12 and all(j["state"] == "COMPLETED" for j in jobs.values()), jobs
    assert {j["placement"][0]["node"] for j in jobs.values()} == {n.name for n in cluster.fc.nodes}
    spans = [(j["started_at"], j["ended_at"]) for j in jobs.values()]
    for s, _ in spans:
        assert sum(1 for a, b in spans if a <= s < b) <= 6, spans
    # parameters reached dttrain as flags
    show = json.loads(cluster.dtctl("show", "--json", best["job_id"]).stdout)["job"]
    assert show["spec"]["trainer"]["lr"] == best["params"]["lr"], show["spec"]
    assert show["spec"]["env"]["DT_PARAM_LR"] == best["params"]["lr"]
    # best as YAML, export as CSV
    b = cluster.dtctl("sweep", "best", sid)
    assert b.returncode == 0, b.stderr
    lines = [x for x in b.stdout.splitlines() if not x.startswith("#")]
    assert lines == ["lr: %s" % best["params"]["lr"], "batch: %s" % best["params"]["batch"]], b.stdout
    c = cluster.dtctl("sweep", "export", "--csv", sid)
    rows = list(csv.DictReader(io.StringIO(c.stdout)))
    assert len(rows) == 12 and rows[0]["lr"] == ex["trials"][0]["params"]["lr"], c.stdout
    st = cluster.dtctl("sweep", "status", sid)
    assert st.returncode == 0 and "12/12 done" in st.stdout, st.stdout
    print("12 dttrain trials on 6 slots: %.1f s" % took)


# ----------------------------------------------------------------------------- GPU slots

GPU_TRIAL = r'''
import json, os, time
time.sleep(1.5)
print("DTCTL_METRIC " + json.dumps({"step": 1, "loss": float(os.environ["DT_PARAM_K"]),
                                    "cvd": os.environ.get("CUDA_VISIBLE_DEVICES")}), flush=True)
'''


def test_trials_packed_onto_free_gpus(cluster):
    """gpus_per_trial: 1 on 3 nodes x 2 (fake) GPUs: 6 trials at once, no GPU shared."""
    script = cluster.write("gpu_trial.py", GPU_TRIAL)
    f = cluster.sweep_file("gpus.yaml", """
method: grid
metric: {name: loss}
parameters:
  k: {values: [1, 2, 3, 4, 5, 6, 7]}
gpus_per_trial: 1
job: {name: gpus, procs_per_node: 1, command: [%s, %s]}
""" % (PY, script))
    p = cluster.dtctl("sweep", f, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    sid = p.stderr.split("sweep ")[1].split()[0]
    ex = cluster.export(sid)
    assert len(ex["trials"]) == 7 and all(t["state"] == "COMPLETED" for t in ex["trials"])
    jobs = {j["id"]: j for j in sweep_jobs(cluster, "gpus")}
    runs = []
    for t in ex["trials"]:
        j = jobs[t["job_id"]]
        assert j["gpu"] is True and j["placement"][0]["slots"] == t["metrics"][0]["cvd"], (j, t)
        runs.append((j["started_at"], j["ended_at"], j["placement"][0]["node"], t["metrics"][0]["cvd"]))
    for a in runs:
        overlap = [b for b in runs if b is not a and b[0] < a[1] and a[0] < b[1]]
        assert all((b[2], b[3]) != (a[2], a[3]) for b in overlap), runs
    first = sorted(runs)[:6]
    assert len({(r[2], r[3]) for r in first}) == 6, runs   # the first 6 filled every GPU


# ----------------------------------------------------------------------------- ASHA

ASHA_TRIAL = r'''
import json, os, sys, time
q = float(os.environ["DT_PARAM_Q"])
for e in range(1, 5):
    time.sleep(0.4)
    print("DTCTL_METRIC " + json.dumps({"epoch": e, "loss": q + 1.0 / e}), flush=True)
'''


def test_asha_prunes_the_bad_trials(cluster):
    """Sequential (parallel 1), eta 2, rungs at epochs 1 and 2 (max_iter 4 is the end).
    Loss q + 1/epoch, trials in grid order q = 0.5, 0.1, 9, 0.2, 8, 0.05, 7.  The rule
    (scheduler/asha.h): a trial goes on past a rung iff fewer than max(1, n//eta) values
    there are better, or (grace) the rung held fewer than eta values before it, or it is
    the best there, or fewer than n//eta went on so far.  So: 1 and 2 are the first two at
    both rungs and complete, 3 pruned at 1, 4 passes 1 (one better of 4) and loses at 2,
    5 pruned at 1, 6 best everywhere: completes, 7 pruned at 1."""
    script = cluster.write("asha_trial.py", ASHA_TRIAL)
    f = cluster.sweep_file("asha.yaml", """
method: grid
metric: {name: loss, goal: minimize}
parameters:
  q: {values: [0.5, 0.1, 9, 0.2, 8, 0.05, 7]}
early_terminate: {type: hyperband, min_iter: 1, eta: 2, max_iter: 4}
job: {name: asha, procs_per_node: 1, command: [%s, %s]}
parallel: 1
""" % (PY, script))
    sid = cluster.submit(f)
    ex = cluster.wait_sweep(sid, ["COMPLETED", "FAILED"], 90)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    st = {t["trial"]: t for t in ex["trials"]}
    assert [st[i]["params"]["q"] for i in range(1, 8)] == ["0.5", "0.1", "9", "0.2", "8", "0.05", "7"]
    assert [st[i]["state"] for i in range(1, 8)] == \
        ["COMPLETED", "COMPLETED", "PRUNED", "PRUNED", "PRUNED", "COMPLETED", "PRUNED"], \
        [(t["trial"], t["state"], t["resource"]) for t in ex["trials"]]
    for i, rung in ((1, 4), (2, 4), (3, 1), (4, 2), (5, 1), (7, 1)):
        assert st[i]["resource"] == rung, st[i]
    assert st[6]["resource"] == 4 and abs(st[6]["value"] - 0.3) < 1e-9
    assert ex["best"]["trial"] == 6
    # a pruned trial was stopped at once: its job CANCELLED, epochs it never reached
    for i in (3, 5, 7):
        assert len(st[i]["metrics"]) <= 2, st[i]
    jobs = {j["id"]: j for j in sweep_jobs(cluster, "asha")}
    assert jobs[st[6]["job_id"]]["state"] == "COMPLETED"
    assert all(jobs[st[i]["job_id"]]["state"] == "COMPLETED" for i in (1, 2)), jobs
    assert all(jobs[st[i]["job_id"]]["state"] == "CANCELLED" for i in (3, 4, 5, 7)), jobs


def test_small_asha_sweep_trains_its_trials_to_the_end(cluster):
    """Two trials under ASHA (eta 2): both are among the first eta at every rung, so both
    train to max_iter (the grace rule).  Under the former rule 1 was pruned at epoch 1 (no
    peer) and 2 at epoch 2 (first there): a small sweep ended with every trial PRUNED."""
    script = cluster.write("asha_trial.py", ASHA_TRIAL)
    f = cluster.sweep_file("asha2.yaml", """
method: grid
metric: {name: loss, goal: minimize}
parameters:
  q: {values: [0.5, 0.1]}
early_terminate: {type: hyperband, min_iter: 1, eta: 2, max_iter: 4}
job: {name: asha2, procs_per_node: 1, command: [%s, %s]}
parallel: 1
""" % (PY, script))
    sid = cluster.submit(f)
    ex = cluster.wait_sweep(sid, ["COMPLETED", "FAILED"], 60)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    assert [(t["state"], t["resource"]) for t in ex["trials"]] == [("COMPLETED", 4), ("COMPLETED", 4)]
    b = ex["best"]
    assert b["trial"] == 2 and b["state"] == "COMPLETED" and abs(b["value"] - 0.35) < 1e-9, b
    p = cluster.dtctl("sweep", "best", sid)
    assert p.returncode == 0, p.stderr
    assert "q: 0.1" in p.stdout and "pruned" not in p.stdout, p.stdout


# ----------------------------------------------------------------------------- grid script

GRID_TRIAL = r'''
import json, os, sys
mode, x = sys.argv[1], sys.argv[2]
assert os.environ["DT_PARAM_MODE"] == mode and os.environ["DT_PARAM_X_Y"] == x
trial = os.environ["DT_TRIAL_ID"]
if mode == "silent":
    print("nothing to report for trial", trial)
    sys.exit(0)
for step in (10, 20):
    print("DTCTL_METRIC " + json.dumps({"step": step, "score": float(x) * step,
                                        "trial": int(trial), "arg": sys.argv[3]}), flush=True)
'''


def test_grid_script_placeholders_env_and_no_metric(cluster):
    script = cluster.write("grid_trial.py", GRID_TRIAL)
    f = cluster.sweep_file("grid.yaml", """
method: grid
metric: {name: score, goal: maximize}
parameters:
  mode: {values: [report, silent]}
  x_y: {values: [1.5, 2]}
job: {name: gridscript, procs_per_node: 1,
      command: [%s, %s, "{mode}", "{x_y}", "a b; $(echo no) {} {1}"]}
""" % (PY, script))
    p = cluster.dtctl("sweep", f, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    sid = p.stderr.split("sweep ")[1].split()[0]
    ex = cluster.export(sid)
    assert ex["sweep"]["max_trials"] == 4
    got = {(t["params"]["mode"], t["params"]["x_y"]): t for t in ex["trials"]}
    assert set(got) == {("report", "1.5"), ("report", "2"), ("silent", "1.5"), ("silent", "2")}
    for (mode, x), t in got.items():
        assert t["state"] == "COMPLETED", t
        if mode == "silent":
            assert t["no_metric"] is True and t["value"] is None and t["metrics"] == [], t
        else:
            assert t["no_metric"] is False and t["value"] == float(x) * 20 and t["resource"] == 20
            assert [m["trial"] for m in t["metrics"]] == [t["trial"]] * 2
            assert t["metrics"][0]["arg"] == "a b; $(echo no) {} {1}"
    assert ex["best"]["params"] == {"mode": "report", "x_y": "2"}
    assert "no metric" in p.stdout, p.stdout


def test_failing_trials_retried_once_then_sweep_fails(cluster):
    f = cluster.sweep_file("fail.yaml", """
method: random
metric: {name: loss}
parameters:
  a: {values: [1, 2]}
job: {name: failing, procs_per_node: 1, command: [sh, -c, "echo boom >&2; exit 3"]}
max_trials: 6
parallel: 1
max_failures: 2
""")
    p = cluster.dtctl("sweep", f, timeout=90)
    assert p.returncode == 1, p.stdout + p.stderr
    sid = p.stderr.split("sweep ")[1].split()[0]
    ex = cluster.export(sid)
    assert ex["sweep"]["state"] == "FAILED", ex["sweep"]
    assert "2 trial(s) failed (max_failures 2)" in ex["sweep"]["reason"], ex["sweep"]
    assert [t["state"] for t in ex["trials"]] == ["FAILED", "FAILED"], ex["trials"]
    jobs = sweep_jobs(cluster, "fail")
    assert len(jobs) == 2, jobs
    for j in jobs:
        assert j["state"] == "FAILED" and j["attempt"] == 1 and j["exit_code"] == 3, j


# ----------------------------------------------------------------------------- pause/stop

def test_pause_resume_stop(cluster):
    script = cluster.write("slow_trial.py", "import time, json\nfor e in (1, 2, 3):\n"
                           "    time.sleep(0.5)\n    print('DTCTL_METRIC ' + json.dumps("
                           "{'epoch': e, 'loss': 1.0 / e}), flush=True)\n")
    f = cluster.sweep_file("pause.yaml", """
method: random
metric: {name: loss}
parameters:
  a: {distribution: uniform, min: 0, max: 1}
job: {name: pausing, procs_per_node: 1, command: [%s, %s]}
max_trials: 20
parallel: 2
""" % (PY, script))
    sid = cluster.submit(f)
    p = cluster.dtctl("sweep", "pause", sid)
    assert p.returncode == 0 and "PAUSED" in p.stdout, p.stdout + p.stderr
    # the trials started before the pause run to their end (however slow a loaded
    # machine makes them); then a while with nothing new
    deadline = time.time() + 60
    while not all(t["state"] in ("COMPLETED", "FAILED", "CANCELLED")
                  for t in cluster.export(sid)["trials"]):
        assert time.time() < deadline, cluster.export(sid)["trials"]
        time.sleep(0.2)
    time.sleep(1.5)
    ex = cluster.export(sid)
    n = len(ex["trials"])
    assert n <= 2 and ex["sweep"]["state"] == "PAUSED", ex["sweep"]
    assert all(t["state"] == "COMPLETED" for t in ex["trials"]), ex["trials"]
    assert cluster.dtctl("sweep", "resume", sid).returncode == 0
    deadline = time.time() + 20
    while len(cluster.export(sid)["trials"]) <= n and time.time() < deadline:
        time.sleep(0.2)
    p = cluster.dtctl("sweep", "stop", sid)
    assert p.returncode == 0 and "STOPPED" in p.stdout, p.stdout
    time.sleep(1)
    ex = cluster.export(sid)
    assert ex["sweep"]["state"] == "STOPPED" and ex["sweep"]["reason"] == "stopped by the user"
    assert len(ex["trials"]) > n
    assert all(t["state"] in ("COMPLETED", "CANCELLED") for t in ex["trials"]), ex["trials"]
    deadline = time.time() + 10
    while any(j["state"] in ("PENDING", "RUNNING") for j in sweep_jobs(cluster, "pause")):
        assert time.time() < deadline, sweep_jobs(cluster, "pause")
        time.sleep(0.2)


# ----------------------------------------------------------------------------- faults

CRASH_TRIAL = r'''
import json, os, time
t = int(os.environ["DT_TRIAL_ID"])
for e in (1, 2, 3):
    time.sleep(0.7)
    print("DTCTL_METRIC " + json.dumps({"epoch": e, "loss": 1.0 / (t * e)}), flush=True)
'''


def test_kill_9_dtsched_mid_sweep_and_restart(cluster):
    script = cluster.write("crash_trial.py", CRASH_TRIAL)
    f = cluster.sweep_file("crash.yaml", """
method: random
metric: {name: loss}
parameters:
  a: {distribution: uniform, min: 0, max: 1}
job: {name: crashing, procs_per_node: 1, command: [%s, %s]}
max_trials: 10
parallel: 4
seed: 5
""" % (PY, script))
    sid = cluster.submit(f)
    deadline = time.time() + 30
    while True:
        ex = cluster.export(sid)
        done = [t for t in ex["trials"] if t["state"] == "COMPLETED"]
        running = [t for t in ex["trials"] if t["state"] == "RUNNING" and t["metrics"]]
        if len(done) >= 2 and running:
            break
        assert time.time() < deadline, ex
        time.sleep(0.1)
    before = {t["trial"]: t for t in ex["trials"]}
    pid = int((cluster.home / "dtsched.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    time.sleep(1.5)
    assert cluster.dtctl("head", "start").returncode == 0
    ex = cluster.wait_sweep(sid, ["COMPLETED", "FAILED"], 60)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    assert [t["trial"] for t in ex["trials"]] == list(range(1, 11))
    assert all(t["state"] == "COMPLETED" for t in ex["trials"]), ex["trials"]
    # the suggestions made before the crash are the ones that ran
    for i, t in before.items():
        assert ex["trials"][i - 1]["params"] == t["params"]
        if t["state"] == "COMPLETED":
            assert ex["trials"][i - 1]["job_id"] == t["job_id"]
    # no trial ran twice: one job per trial, three reports each; the ones done before the
    # crash were not touched (a launch cut in the middle by the kill may be retried once)
    jobs = {j["id"]: j for j in sweep_jobs(cluster, "crash")}
    assert len(jobs) == 10 and all(j["state"] == "COMPLETED" for j in jobs.values()), jobs
    for t in ex["trials"]:
        assert [m["epoch"] for m in t["metrics"]] == [1, 2, 3], t
        b = before.get(t["trial"], {})
        if b.get("state") == "COMPLETED" or b.get("metrics"):   # it had run
            assert jobs[t["job_id"]]["attempt"] == 0, jobs[t["job_id"]]
    # a new search with the same seed suggests the same parameters: nothing was lost
    assert len({json.dumps(t["params"]) for t in ex["trials"]}) == 10


NODE_TRIAL = r'''
import json, os, time
for e in (1, 2, 3, 4):
    time.sleep(1.0)
    print("DTCTL_METRIC " + json.dumps({"epoch": e, "loss": 1.0 / e}), flush=True)
'''


def test_node_dies_mid_sweep_trials_requeued_on_the_others(cluster):
    script = cluster.write("node_trial.py", NODE_TRIAL)
    f = cluster.sweep_file("nodedeath.yaml", """
method: random
metric: {name: loss}
parameters:
  a: {distribution: uniform, min: 0, max: 1}
job: {name: nodedeath, procs_per_node: 1, command: [%s, %s]}
max_trials: 6
""" % (PY, script))
    sid = cluster.submit(f)
    deadline = time.time() + 20
    victim = cluster.fc.node(3).name
    while True:
        jobs = [j for j in sweep_jobs(cluster, "nodedeath") if j["state"] == "RUNNING"]
        if len(jobs) == 6:
            break
        assert time.time() < deadline, jobs
        time.sleep(0.1)
    on_victim = [j["id"] for j in jobs if j["placement"][0]["node"] == victim]
    assert len(on_victim) == 2, jobs
    time.sleep(1.2)
    agent_pid = int(cluster.fc.exec(3, "cat %s/agent.pid" % cluster.agent_home(3)).stdout)
    victims = [agent_pid] + [int(x) for x in subprocess.run(
        ["pgrep", "-f", "--", "--home %s" % cluster.agent_home(3)], capture_output=True,
        text=True).stdout.split()]
    for jid in on_victim:
        show = json.loads(cluster.dtctl("show", "--json", jid).stdout)["job"]
        victims += [r["pid"] for r in show["ranks"] if r.get("pid")]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        ex = cluster.wait_sweep(sid, ["COMPLETED", "FAILED"], 60)
        assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
        assert len(ex["trials"]) == 6 and all(t["state"] == "COMPLETED" for t in ex["trials"])
        for jid in on_victim:
            show = json.loads(cluster.dtctl("show", "--json", jid).stdout)["job"]
            assert show["state"] == "COMPLETED", show
            hist = [h["state"] for h in show["history"]]
            assert "NODE_FAIL" in hist, show["history"]
            assert show["placement"][0]["node"] != victim, show
    finally:
        cluster.start_agent(3)
        cluster.wait_nodes_up()


def test_report_html(cluster, tmp_path):
    sweeps = [s for s in cluster.sweeps() if s["state"] == "COMPLETED"]
    if not sweeps:
        pytest.skip("no completed sweep in this module run")
    out = tmp_path / "report.html"
    p = cluster.dtctl("sweep", "report", "-o", out, sweeps[0]["id"])
    assert p.returncode == 0, p.stderr
    html = out.read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and sweeps[0]["id"] in html
