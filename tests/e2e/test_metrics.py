"""/metrics of dtsched and the agent, checked by the real scraper's own linter.

`promtool check metrics` (Debian's prometheus package) reads the exposition of both
daemons while they have jobs and a sweep behind them: no lint (HELP and TYPE for every
family, counters ending in _total, base units), and the job/sweep families hold what
happened: jobs by state, finished jobs by final state, queue-wait and run-time
histograms, trials by state; GPU capacity and usage as separate gauges.
"""

import re
import shutil
import subprocess
import urllib.request

import pytest

from conftest import LocalCluster

PROMTOOL = shutil.which("promtool")


@pytest.fixture(scope="module")
def local(dtctl_bin, tmp_path_factory):
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path_factory.mktemp("metrics"), name="metrics")
    try:
        c.start()
        yield c
    finally:
        c.stop()


def ports(c):
    text = (c.home / "cluster.yaml").read_text()
    agent = int(re.search(r"agent: \{port: (\d+)", text).group(1))
    head = int(re.search(r"head: \{port: (\d+)", text).group(1))
    return agent, head


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def samples(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def promtool(text):
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=30)
    return p.returncode, (p.stdout + p.stderr).strip()


@pytest.mark.skipif(not PROMTOOL, reason="promtool not installed (Debian: prometheus; make deps)")
def test_promtool_clean_with_jobs_and_a_sweep(local, tmp_path):
    assert local.dtctl("run", "-n", "1", "--name", "ok", "--", "true").returncode == 0
    assert local.dtctl("run", "-n", "1", "--name", "bad", "--", "false").returncode == 1
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("method: grid\nmetric: {name: loss, goal: minimize}\n"
                     "parameters:\n  x: {values: [1, 2]}\n"
                     "job: {name: m-trial, procs_per_node: 1,\n"
                     "      command: [sh, -c, 'echo \"DTCTL_METRIC {\\\"loss\\\": {x}}\"']}\n")
    p = local.dtctl("sweep", sweep, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    agent_port, head_port = ports(local)
    head = scrape(head_port)
    agent = scrape(agent_port)
    for who, text in (("dtsched", head), ("dtagent", agent)):
        rc, out = promtool(text)
        assert rc == 0 and not out, "promtool check metrics on %s: rc %d\n%s" % (who, rc, out)
    h = samples(head)
    assert h['dtsched_jobs{state="COMPLETED"}'] == 3, head   # ok + two trials
    assert h['dtsched_jobs{state="FAILED"}'] == 1
    assert h['dtsched_jobs_finished_total{state="COMPLETED"}'] == 3
    assert h['dtsched_jobs_finished_total{state="FAILED"}'] == 1
    assert h['dtsched_job_run_seconds_count'] == 4
    assert h['dtsched_job_queue_wait_seconds_count'] == 4
    assert h['dtsched_job_run_seconds_bucket{le="+Inf"}'] == 4
    assert h['dtsched_sweep_trials{state="COMPLETED"}'] == 2
    assert h['dtsched_sweeps{state="COMPLETED"}'] == 1
    assert h["dtsched_gpus"] == 0 and h["dtsched_gpus_used"] == 0
    assert 'dtsched_gpus{kind=' not in head
    a = samples(agent)
    assert a['dtagent_tasks_started_total{node="local"}'] >= 4
    assert "dtagent_gpu_utilization_percent" not in agent
