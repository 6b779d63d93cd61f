"""A sweep's trials start where `dtctl sweep` ran, as `dtctl run`'s ranks do.

A project directory holds the trial script and the sweep file names it relatively
(`command: [python3, trial.py]`); run from there, every trial finds it and reports from
that directory.  Before, trials started in the agent's home and could not open it.
"""

import json
import os
import subprocess

from conftest import LocalCluster

TRIAL = r'''
import json, os
print("DTCTL_METRIC " + json.dumps({"loss": float(os.environ["DT_PARAM_X"]), "cwd": os.getcwd()}),
      flush=True)
'''


def test_trials_start_in_the_submit_dir(dtctl_bin, tmp_path):
    with LocalCluster(dtctl_bin / "dtctl", tmp_path, name="sweepcwd") as c:
        project = c.shared / "project"
        project.mkdir()
        (project / "trial.py").write_text(TRIAL)
        (project / "sweep.yaml").write_text(
            "method: grid\nmetric: {name: loss, goal: minimize}\n"
            "parameters:\n  x: {values: [1, 2]}\n"
            "job: {name: cwd-trial, procs_per_node: 1, command: [/usr/bin/python3, trial.py]}\n")
        p = subprocess.run([str(c.exe), "sweep", "sweep.yaml"], cwd=project, env=c.env,
                           capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stdout + p.stderr
        sid = json.loads(c.dtctl("sweep", "list", "--json").stdout)["sweeps"][-1]["id"]
        ex = json.loads(c.dtctl("sweep", "export", "--json", sid).stdout)
        trials = ex["trials"]
        assert [t["state"] for t in trials] == ["COMPLETED", "COMPLETED"], trials
        assert {t["metrics"][0]["cwd"] for t in trials} == {str(project)}, trials
        assert os.path.samefile(trials[0]["metrics"][0]["cwd"], project)
