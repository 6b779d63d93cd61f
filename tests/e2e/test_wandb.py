"""W&B sweep files as they are: files written from W&B's documentation (docs.wandb.ai,
"Sweep configuration options" and "Define a sweep configuration", and W&B's own
examples in github.com/wandb/sweeps) with every key and command macro, each validated;
a few run on a one-node local cluster (no fake cluster) with a stub trial that prints
its argv and reports DTCTL_METRIC, checking that the argv is exactly the one
`wandb agent` builds: "--%s=%s" % (name, value) of Python's str() of each value as
PyYAML loads it (True, not true), keys sorted as W&B's controller sorts them, a nested
parameter group one argument (W&B's agent: `flags.append("--" + f"{param}={_value}")`
in wandb/sdk/launch/sweeps/utils.py create_sweep_command_args, with the group's dict as
the value)."""

import json
import os
import subprocess
import sys
import pytest

from conftest import LocalCluster

STUB = r'''
import json, os, sys
print("ARGV " + json.dumps(sys.argv[1:]), flush=True)
path = None
for a in sys.argv[1:]:
    if a.endswith(".json") and os.path.isfile(a):
        path = a
if path:
    print("ARGS_FILE " + open(path).read(), flush=True)
for epoch in range(1, 3):
    print("DTCTL_METRIC " + json.dumps({"epoch": epoch, "val_loss": float(os.environ.get("STUB_LOSS", "0.5")) / epoch}), flush=True)
'''

# The top-level keys and macros of W&B's schema, in files a W&B user has today.
FILES = {
    # program + the default command (W&B: ${env} ${interpreter} ${program} ${args})
    "program.yaml": """\
program: train.py
name: sweepdemo
project: my-first-sweep
entity: my-team
description: the walkthrough's sweep
method: random
metric:
  goal: minimize
  name: validation_loss
parameters:
  learning_rate: {min: 0.0001, max: 0.1}
  batch_size: {values: [16, 32, 64]}
  epochs: {values: [5, 10, 15]}
  optimizer: {values: ["adam", "sgd"]}
run_cap: 4
""",
    # every macro of W&B's agent in a command
    "macros.yaml": """\
program: train.py
method: grid
metric: {name: loss, goal: maximize}
command:
  - ${env}
  - ${interpreter}
  - ${program}
  - --fixed
  - ${args}
  - ${args_no_hyphens}
  - ${args_no_equals}
  - ${args_no_boolean_flags}
  - ${args_json}
  - ${args_json_file}
  - --home=${envvar:HOME}
parameters:
  a: {values: [1, 2]}
""",
    # hyperband as in W&B's docs and examples: max_iter + s, and min_iter + eta
    "hyperband_s.yaml": """\
program: train.py
method: bayes
metric: {name: loss, goal: minimize}
early_terminate: {type: hyperband, max_iter: 27, s: 2, eta: 3, strict: true}
parameters:
  lr: {distribution: log_uniform_values, min: 0.0001, max: 0.1}
run_cap: 10
""",
    # bands that are not min_iter * eta^k (W&B: 33, 11, 3), and a fractional eta
    "hyperband_bands.yaml": """\
program: train.py
method: random
metric: {name: loss, goal: minimize}
early_terminate: {type: hyperband, max_iter: 100, s: 3, eta: 3}
parameters:
  lr: {min: 0.0001, max: 0.1}
run_cap: 10
""",
    "hyperband_eta_fraction.yaml": """\
program: train.py
method: random
metric: {name: loss, goal: minimize}
early_terminate: {type: hyperband, min_iter: 2, eta: 1.5, max_iter: 12}
parameters:
  lr: {min: 0.0001, max: 0.1}
run_cap: 10
""",
    "hyperband_min_iter.yaml": """\
program: train.py
method: random
metric: {name: loss, goal: minimize}
early_terminate: {type: hyperband, min_iter: 3, eta: 2.0}
parameters:
  lr: {min: 0.0001, max: 0.1}
run_cap: 10
""",
    # bayes with every distribution of W&B's schema
    "distributions.yaml": """\
program: train.py
method: bayes
metric: {name: val_acc, goal: maximize, target: 0.99}
parameters:
  a: {distribution: constant, value: 3}
  b: {distribution: categorical, values: [x, y]}
  c: {distribution: int_uniform, min: 1, max: 9}
  d: {distribution: uniform, min: 0, max: 1}
  e: {distribution: q_uniform, min: 0, max: 10, q: 2}
  f: {distribution: log_uniform, min: -9.21, max: -2.3}
  g: {distribution: log_uniform_values, min: 0.0001, max: 0.1}
  h: {distribution: q_log_uniform, min: 0, max: 5, q: 1}
  i: {distribution: q_log_uniform_values, min: 16, max: 512, q: 16}
  j: {distribution: inv_log_uniform, min: 0, max: 5}
  k: {distribution: inv_log_uniform_values, min: 0.01, max: 1}
  l: {distribution: normal, mu: 0, sigma: 1}
  m: {distribution: q_normal, mu: 10, sigma: 3, q: 2}
  n: {distribution: log_normal, mu: 0, sigma: 1}
  o: {distribution: q_log_normal, mu: 2, sigma: 1, q: 1}
  p: {distribution: beta, a: 2, b: 5}
  q: {distribution: q_beta, a: 2, b: 5, q: 0.1}
  r: {distribution: categorical_w_probabilities, values: [1, 2], probabilities: [0.2, 0.8]}
run_cap: 20
""",
    # grid with nested parameters and booleans (W&B's nested-params example)
    "nested.yaml": """\
description: sweep using nested params
program: train-nested-cli.py
project: nested-examples
method: grid
metric:
  name: loss
  goal: minimize
parameters:
  batch_size:
    values: [32, 64]
  optimizer:
    parameters:
      lr:
        values: [0.001, 0.0001]
      nadam:
        parameters:
          beta:
            values: [0.9, 0.95]
""",
    # random with probabilities, values that are lists and mappings, run_cap
    "probabilities.yaml": """\
program: train.py
method: random
metric: {name: loss}
parameters:
  env: {values: [{env_id: Env-v0, max_steps: 1000}, {env_id: Env-v1, max_steps: 50}]}
  layers: {values: [[64, 64], [128]], probabilities: [0.25, 0.75]}
  flag1: {values: [true, false]}
run_cap: 30
""",
}


def validate(dtctl_bin, path):
    """dtctl validate --json: reads the file only, no cluster needed."""
    return subprocess.run([str(dtctl_bin / "dtctl"), "validate", "--json", str(path)],
                          capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


def write(tmp, name, text):
    p = tmp / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", sorted(FILES))
def test_wandb_file_validates(dtctl_bin, tmp_path, name):
    """Each file is valid as W&B wrote it; W&B's keys dtctl does not use get a note."""
    p = write(tmp_path, name, FILES[name])
    out = validate(dtctl_bin, p)
    assert out.returncode == 0, out.stderr
    spec = json.loads(out.stdout)["files"][0]
    assert spec["kind"] == "sweep"
    assert spec["program"], spec
    for key in ("project", "entity"):
        if "\n%s:" % key in "\n" + FILES[name]:
            assert "note: '%s' is accepted and ignored" % key in out.stderr, out.stderr


def test_wandb_hyperband_bands(dtctl_bin, tmp_path):
    """max_iter 27, s 2, eta 3: W&B's bands are 27/3 = 9 and 27/9 = 3, ASHA's rungs 3, 9."""
    out = validate(dtctl_bin, write(tmp_path, "h.yaml", FILES["hyperband_s.yaml"]))
    assert out.returncode == 0, out.stderr
    et = json.loads(out.stdout)["files"][0]["early_terminate"]
    assert (et["min_iter"], et["eta"], et["s"]) == (3, 3, 2), et
    assert et["max_iter"] == 27, et
    assert json.loads(out.stdout)["files"][0]["max_trials"] == 10   # run_cap


@pytest.mark.parametrize("name,want", [
    # W&B's bands 100/3, 100/9, 100/27 truncated: the rungs, 100 the end
    ("hyperband_bands.yaml", {"min_iter": 3, "eta": 3, "max_iter": 100, "s": 3,
                              "bands": [3, 11, 33]}),
    # rungs 2 * 1.5^k below 12; the top floor(n / 1.5) go on
    ("hyperband_eta_fraction.yaml", {"min_iter": 2, "eta": 1.5, "max_iter": 12}),
])
def test_wandb_hyperband_as_wandb_allows(dtctl_bin, tmp_path, name, want):
    """Bands that are not min_iter * eta^k and a fractional eta are accepted, not refused."""
    out = validate(dtctl_bin, write(tmp_path, name, FILES[name]))
    assert out.returncode == 0, out.stderr
    assert "unsupported" not in out.stderr, out.stderr
    et = json.loads(out.stdout)["files"][0]["early_terminate"]
    assert {k: et.get(k) for k in want} == want, et
    assert ("bands" in et) == ("bands" in want), et


@pytest.fixture(scope="module")
def local(dtctl_bin, tmp_path_factory):
    with LocalCluster(dtctl_bin / "dtctl", tmp_path_factory.mktemp("wandb")) as c:
        yield c


def stub_dir(local):
    """train.py and a `python` on PATH (W&B's ${interpreter} is the word python)."""
    d = local.tmp / "prog"
    if not d.exists():
        d.mkdir()
        (d / "train.py").write_text(STUB)
        (d / "train-nested-cli.py").write_text(STUB)
        (d / "train-bool.py").write_text(STUB)
        (d / "bin").mkdir()
        os.symlink(sys.executable, d / "bin" / "python")
        for p in (d, d / "bin"):
            p.chmod(0o755)
    return d


def run_sweep(local, name, text, loss="0.5"):
    d = stub_dir(local)
    text += ("job:\n  workdir: %s\n  env: {PATH: '%s:/usr/bin:/bin', STUB_LOSS: '%s'}\n"
             % (d, d / "bin", loss))
    p = write(local.tmp, name, text)
    r = local.dtctl("sweep", "--name", name, p, timeout=300)
    e = local.dtctl("sweep", "export", name, "--json")
    assert e.returncode == 0, "dtctl sweep: %s%s\nexport: %s\n%s" % (
        r.stdout, r.stderr, e.stderr, local.log("dtsched.log")[-3000:])
    ex = json.loads(e.stdout)
    return r, ex


def trial_lines(local, ex, trial, prefix):
    job = ex["trials"][trial]["job_id"]
    log = (local.shared / "jobs" / job / "logs" / "0.log").read_text()
    out = []
    for line in log.splitlines():
        text = line.split(" ", 2)[2] if line.count(" ") >= 2 else ""
        if text.startswith(prefix + " "):
            out.append(text[len(prefix) + 1:])
    assert out, "no %s line in %s:\n%s" % (prefix, job, log)
    return out


def test_wandb_nested_grid_argv(local):
    """W&B's nested-params example: 8 trials, each started as `wandb agent` would:
    /usr/bin/env python train-nested-cli.py --batch_size=32
    --optimizer={'lr': 0.001, 'nadam': {'beta': 0.9}}."""
    r, ex = run_sweep(local, "nested", FILES["nested.yaml"])
    assert r.returncode == 0, r.stdout + r.stderr + local.log("dtsched.log")
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    assert len(ex["trials"]) == 8
    seen = set()
    for i, t in enumerate(ex["trials"]):
        argv = json.loads(trial_lines(local, ex, i, "ARGV")[0])
        p = t["params"]
        want = ["--batch_size=%s" % p["batch_size"],
                "--optimizer={'lr': %s, 'nadam': {'beta': %s}}" % (
                    p["optimizer.lr"], p["optimizer.nadam.beta"])]
        assert argv == want, (argv, want)
        seen.add(tuple(argv))
    assert len(seen) == 8
    # the agent's own formatting: Python's str() of what PyYAML loaded
    assert ["--batch_size=32", "--optimizer={'lr': 0.0001, 'nadam': {'beta': 0.95}}"] in \
        [list(a) for a in seen]


def test_wandb_macros_argv_and_args_file(local):
    """Every macro: ${args}, ${args_no_hyphens}, ${args_no_equals},
    ${args_no_boolean_flags}, ${args_json} and ${args_json_file} (a file holding
    json.dumps of the parameters), an item that is no macro kept as written, and
    ${envvar:HOME} expanded."""
    r, ex = run_sweep(local, "macros", FILES["macros.yaml"])
    assert r.returncode == 0, r.stdout + r.stderr + local.log("dtsched.log")
    assert len(ex["trials"]) == 2
    for i, t in enumerate(ex["trials"]):
        a = t["params"]["a"]
        argv = json.loads(trial_lines(local, ex, i, "ARGV")[0])
        args_file = argv[-2]
        assert argv == ["--fixed", "--a=%s" % a, "a=%s" % a, "--a", a, "--a=%s" % a,
                        '{"a": %s}' % a, args_file, "--home=%s" % os.environ["HOME"]], argv
        assert args_file.startswith(str(local.shared / "sweeps")), args_file
        assert trial_lines(local, ex, i, "ARGS_FILE") == ['{"a": %s}' % a]


def test_wandb_probabilities_booleans_and_run_cap(local):
    """run_cap trials; values that are mappings and lists passed as Python's str() of
    them; booleans as --flag1=True / --flag1=False; probabilities 0.25/0.75."""
    r, ex = run_sweep(local, "probs", FILES["probabilities.yaml"])
    assert r.returncode == 0, r.stdout + r.stderr + local.log("dtsched.log")
    assert len(ex["trials"]) == 30
    layers = []
    for i in range(len(ex["trials"])):
        argv = json.loads(trial_lines(local, ex, i, "ARGV")[0])
        assert len(argv) == 3, argv
        assert argv[0] in ("--env={'env_id': 'Env-v0', 'max_steps': 1000}",
                           "--env={'env_id': 'Env-v1', 'max_steps': 50}"), argv
        assert argv[1] in ("--flag1=True", "--flag1=False"), argv
        assert argv[2] in ("--layers=[64, 64]", "--layers=[128]"), argv
        layers.append(argv[2])
    # 30 draws at p = 0.75: fewer than 15 is below 1 in 1000
    assert layers.count("--layers=[128]") >= 15, layers


# W&B's examples/wandb-sweeps/sweeps-boolean-parameters/sweep-bool.yaml, byte for byte
# (the trailing spaces after the program name included): grid, booleans, no metric:
SWEEP_BOOL = (
    "program: train-bool.py  \nmethod: grid\n# Parameters to search over\nparameters:\n"
    "  optimizer:\n    values: [\"sgd\", \"adam\"]\n  flag1:\n    values:\n    - false\n"
    "    - true\n  flag2:\n    values:\n    - false\n    - true\n")


def test_wandb_sweep_bool_grid_without_metric(local, dtctl_bin):
    """W&B accepts a grid sweep without a metric, and so do validate and dtsched alike:
    the real sweep-bool.yaml validates (exit 0) and `dtctl sweep` runs its 8 points, each
    trial COMPLETED with W&B's argv (--flag1=True, Python's str() of a bool)."""
    out = validate(dtctl_bin, write(local.tmp, "sweep-bool.yaml", SWEEP_BOOL))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["files"][0]["metric"] is None
    r, ex = run_sweep(local, "sweep-bool", SWEEP_BOOL)
    assert r.returncode == 0, r.stdout + r.stderr + local.log("dtsched.log")[-3000:]
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    assert [t["state"] for t in ex["trials"]] == ["COMPLETED"] * 8, ex["trials"]
    argvs = {tuple(json.loads(trial_lines(local, ex, i, "ARGV")[0])) for i in range(8)}
    assert len(argvs) == 8, argvs
    assert ("--flag1=False", "--flag2=True", "--optimizer=adam") in argvs, argvs


def test_wandb_interpreter_without_python(local):
    """A node with python3 and no python (Debian 12): W&B's default command
    (${env} ${interpreter} ${program} ${args}) runs on python3, as `wandb agent` runs the
    python it was started with, and the trial's log says so; a command naming `python`
    itself fails its first trial at once with the name, the node and the fix, which the
    sweep's own output shows."""
    import shutil
    if shutil.which("python", path="/usr/bin:/bin"):
        pytest.skip("this machine has a python in /usr/bin or /bin")
    d = stub_dir(local)
    text = (SWEEP_BOOL.replace("method: grid", "method: grid\nrun_cap: 2") +
            "job:\n  workdir: %s\n  env: {PATH: '/usr/bin:/bin'}\n" % d)
    r = local.dtctl("sweep", "--name", "interp", write(local.tmp, "interp.yaml", text),
                    timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    ex = json.loads(local.dtctl("sweep", "export", "interp", "--json").stdout)
    assert [t["state"] for t in ex["trials"]] == ["COMPLETED"] * 2, ex["trials"]
    assert trial_lines(local, ex, 0, "ARGV")
    log = (local.shared / "jobs" / ex["trials"][0]["job_id"] / "logs" / "0.log").read_text()
    assert "no 'python' on PATH here, so 'python3'" in log, log

    text = text.replace("run_cap: 2", "run_cap: 2\nmax_failures: 1\n"
                        "command: ['${env}', python, '${program}', '${args}']")
    r = local.dtctl("sweep", "--name", "nopython", write(local.tmp, "nopy.yaml", text),
                    timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    node = json.loads(local.dtctl("nodes", "--json").stdout)["nodes"][0]["name"]
    want = "'python' not found on %s (Debian has python3): set command: or install " \
           "python-is-python3" % node
    assert want in r.stdout, r.stdout + r.stderr
    ex = json.loads(local.dtctl("sweep", "export", "nopython", "--json").stdout)
    failed = [t for t in ex["trials"] if t["state"] == "FAILED"]
    assert failed and want in failed[0]["reason"], ex["trials"]


def test_wandb_metric_target_stops_the_sweep(local):
    """metric.target: once a trial reports a value at the target no new trial starts."""
    text = FILES["program.yaml"].replace("name: validation_loss",
                                         "name: val_loss\n  target: 0.3")
    text = text.replace("run_cap: 4", "run_cap: 6\nparallel: 1")
    r, ex = run_sweep(local, "target", text, loss="0.5")
    assert r.returncode == 0, r.stdout + r.stderr + local.log("dtsched.log")
    # the stub reports 0.5 then 0.25: the first trial reaches 0.3
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    assert len(ex["trials"]) == 1, ex["trials"]
    assert "metric target reached" in (ex["sweep"]["reason"] or ""), ex["sweep"]
    argv = json.loads(trial_lines(local, ex, 0, "ARGV")[0])
    p = ex["trials"][0]["params"]
    assert argv == ["--batch_size=%s" % p["batch_size"], "--epochs=%s" % p["epochs"],
                    "--learning_rate=%s" % p["learning_rate"],
                    "--optimizer=%s" % p["optimizer"]], argv
