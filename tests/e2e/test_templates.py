"""The templates as a newcomer uses them, and what people read, on one-node local
clusters (no fake cluster): templates/cluster.yaml copied elsewhere validates and inits
(its setup line names the built-in script); validate names a missing setup template
with file:line:col and warns about hyperband without max_iter; templates/sweep.yaml
trains several trials to the end with a best that was not pruned; templates/gpt-sweep.yaml
(a learning-rate grid over templates/gpt.yaml) reports each trial's val_loss; numbers and the
nodes' MEMORY column as people read them; the Ctrl-C prompt of an attached run holds
the logs back and takes one key."""

import csv
import io
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import time

import pytest

from conftest import REPO, LocalCluster, free_ports, stop_home_daemons

TEMPLATES = REPO / "templates"


def local_cluster_yaml(tmp, shared):
    """templates/cluster.yaml copied to tmp, its nodes replaced by `host: local`."""
    text = (TEMPLATES / "cluster.yaml").read_text()
    agent_port, head_port = free_ports(2)
    text = re.sub(r"(?m)^shared_dir: \S+", "shared_dir: %s" % shared, text)
    text = re.sub(r"(?ms)^nodes:\n.*?\n\n", "nodes:\n  - {host: local, gpus: 0, slots: 2}\n\n",
                  text)
    text = re.sub(r"(?m)^user: \S+", "user: %s" % os.environ.get("USER", "root"), text)
    text = text.replace("port: 7070", "port: %d" % agent_port)
    text = text.replace("{port: 7071}", "{port: %d}" % head_port)
    assert "host: local" in text and "gpu[01-04]" not in text, text
    path = tmp / "cluster.yaml"
    path.write_text(text)
    return path


def sig_digits(v):
    """Significant digits of a number as printed: '0.000217853' has 6."""
    return len(re.sub(r"[^0-9]", "", v.split("e")[0]).lstrip("0"))


def run(dtctl_bin, *args, env=None, cwd=None, timeout=120):
    return subprocess.run([str(dtctl_bin / "dtctl")] + [str(a) for a in args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_copied_cluster_template_inits(dtctl_bin, tmp_path):
    """The README's quickstart with the template copied away from templates/: validate
    says valid, init runs the setup script (the built-in one) and starts the agent."""
    home, shared = tmp_path / "home", tmp_path / "shared"
    home.mkdir(mode=0o700)
    shared.mkdir()
    cfg = local_cluster_yaml(tmp_path, shared)
    env = dict(os.environ, DTCTL_HOME=str(home), DTCTL_NO_SYSTEMD="1", NO_COLOR="1")
    env.pop("DTCTL_CLUSTER", None)
    env.pop("DTCTL_SHARED_DIR", None)
    p = run(dtctl_bin, "validate", cfg, env=env)
    assert p.returncode == 0 and "valid" in p.stdout, p.stdout + p.stderr
    try:
        p = run(dtctl_bin, "init", "-c", cfg, env=env, cwd=tmp_path)
        assert p.returncode == 0, "dtctl init: %s%s" % (p.stdout, p.stderr)
        log = (shared / "init" / "local.log").read_text()
        assert "setting up local" in log, log      # templates/setup-node.sh ran
    finally:
        run(dtctl_bin, "agents", "stop", env=env)
        run(dtctl_bin, "head", "stop", env=env)
        stop_home_daemons(home)


def test_validate_missing_setup_template(dtctl_bin, tmp_path):
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text("shared_dir: %s\nnodes:\n  - {host: local, gpus: 0}\n"
                   "setup:\n  template: setup-node.sh\n" % tmp_path)
    p = run(dtctl_bin, "validate", cfg)
    assert p.returncode == 2 and not p.stdout, p.stdout + p.stderr
    assert "%s:5:13: key 'setup.template': cannot read '%s'" % (cfg, tmp_path / "setup-node.sh") \
        in p.stderr, p.stderr
    assert "builtin:setup-node.sh" in p.stderr, p.stderr     # says what to write instead
    cfg.write_text(cfg.read_text().replace("setup-node.sh", "builtin:nope.sh"))
    p = run(dtctl_bin, "validate", cfg)
    assert p.returncode == 2 and "%s:5:13: key 'setup.template': no built-in template " \
        "'nope.sh'" % cfg in p.stderr, p.stderr


def test_validate_warns_hyperband_without_max_iter(dtctl_bin, tmp_path):
    sw = tmp_path / "sweep.yaml"
    sw.write_text("method: random\nmetric: {name: val_loss, goal: minimize}\n"
                  "parameters:\n  lr: {min: 0.001, max: 0.1}\n"
                  "early_terminate: {type: hyperband, min_iter: 1, eta: 3}\n"
                  "job: {command: [\"true\"]}\nmax_trials: 2\n")
    p = run(dtctl_bin, "validate", sw)
    assert p.returncode == 0, p.stderr
    assert "warning: %s:5:18: early_terminate: hyperband without max_iter" % sw in p.stderr, \
        p.stderr
    p = run(dtctl_bin, "validate", TEMPLATES / "sweep.yaml")
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr


@pytest.fixture(scope="module")
def local(dtctl_bin, tmp_path_factory):
    with LocalCluster(dtctl_bin / "dtctl", tmp_path_factory.mktemp("templates")) as c:
        yield c


@pytest.fixture(scope="module")
def template_sweep(local):
    """templates/sweep.yaml as shipped, run to its end on the one-node cluster."""
    p = local.dtctl("sweep", "--name", "tsweep", TEMPLATES / "sweep.yaml", timeout=300)
    assert p.returncode == 0, "dtctl sweep: %s%s\n%s" % (p.stdout, p.stderr,
                                                         local.log("dtsched.log"))
    return p


def test_template_sweep_trains_trials_to_the_end(local, template_sweep):
    p = local.dtctl("sweep", "export", "tsweep", "--json")
    assert p.returncode == 0, p.stderr
    ex = json.loads(p.stdout)
    states = [t["state"] for t in ex["trials"]]
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    assert len(states) == 12 and states.count("COMPLETED") >= 3, states
    assert ex["best"]["state"] == "COMPLETED", (ex["best"], states)


def test_sweep_numbers_for_people_and_csv(local, template_sweep):
    p = local.dtctl("sweep", "status", "tsweep")
    assert p.returncode == 0, p.stderr
    lrs = re.findall(r"\blr=(\S+)", p.stdout)
    assert lrs, p.stdout
    for v in lrs + re.findall(r"best: trial \d+, val_loss = (\S+) \(", p.stdout):
        assert sig_digits(v) <= 6, "%r: more than %%.6g's 6 digits in:\n%s" % (v, p.stdout)
    assert any(sig_digits(v) == 6 for v in lrs), p.stdout    # log-uniform: 6 digits shown
    p = local.dtctl("sweep", "export", "tsweep", "--csv")
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    ex = json.loads(local.dtctl("sweep", "export", "tsweep", "--json").stdout)
    by_trial = {t["trial"]: t for t in ex["trials"]}
    for r in rows:
        if not r["val_loss"]:
            continue
        v = float(r["val_loss"])
        # Python writes an integral float with ".0" (a diverged trial's 486523930000.0);
        # the shortest round-trip text has none
        shortest = repr(v)[:-2] if repr(v).endswith(".0") else repr(v)
        assert r["val_loss"] == shortest, "CSV value %r is not the shortest round-trip form %r" \
            % (r["val_loss"], shortest)
        assert abs(v - by_trial[int(r["trial"])]["value"]) <= 1e-12 * abs(v), r


def test_gpt_sweep_template_reports_val_loss_per_trial(local):
    """templates/gpt-sweep.yaml as shipped: a grid of 3 learning rates over templates/gpt.yaml
    (2 MPI ranks per trial), each trial trained to the end and reporting its val_loss."""
    p = local.dtctl("sweep", "--name", "gptsweep", TEMPLATES / "gpt-sweep.yaml", timeout=600)
    assert p.returncode == 0, "dtctl sweep: %s%s\n%s" % (p.stdout, p.stderr,
                                                         local.log("dtsched.log"))
    ex = json.loads(local.dtctl("sweep", "export", "gptsweep", "--json").stdout)
    assert ex["sweep"]["state"] == "COMPLETED", ex["sweep"]
    trials = ex["trials"]
    assert sorted(float(t["params"]["lr"]) for t in trials) == [3e-4, 1e-3, 3e-3], trials
    for t in trials:
        assert t["state"] == "COMPLETED", t
        # nats per byte: below ln(256) = 5.55 at init, so every trial learned something
        assert 0 < t["value"] < 5.55, t
    p = local.dtctl("sweep", "status", "gptsweep")
    assert p.returncode == 0, p.stderr
    assert len(re.findall(r"(?m)^\d+\s+lr=\S+ .*COMPLETED\s+\d\.\d+", p.stdout)) == 3, p.stdout
    assert re.search(r"best: trial \d+, val_loss = [\d.]+", p.stdout), p.stdout


def test_nodes_memory_used_of_total(local):
    p = local.dtctl("nodes", "--json")
    n = [x for x in json.loads(p.stdout)["nodes"] if x["name"] == "local"][0]
    total, avail = n["mem_total"], n["mem_available"]

    def human(b):
        return "%.0fG" % (b / (1 << 30)) if b >= 1 << 30 else "%.0fM" % (b / (1 << 20))

    p = local.dtctl("nodes")
    line = [l for l in p.stdout.splitlines() if l.startswith("local ")][0]
    mem = line.split()[4]
    used, tot = mem.split("/")
    assert tot == human(total), line
    # used = total - available, give or take what changed between the two calls
    assert abs(float(used[:-1]) * (1 << (30 if used[-1] == "G" else 20)) - (total - avail)) \
        < max(0.05 * total, 2 << 30 if used[-1] == "G" else 64 << 20), (line, total, avail)
    assert re.search(r"\d+(\.\d)?s ago|\d+ms ago|\dm\d\ds ago", line), line


def read_until(fd, pattern, timeout):
    """Bytes from the pty master until pattern (bytes regex) appears or timeout."""
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            if re.search(pattern, buf):
                return buf
    return buf


def test_ctrl_c_prompt_holds_logs_and_takes_one_key(local):
    """dtctl run attached in a pseudo-terminal, a job printing every 50 ms: after
    Ctrl-C no log line arrives until the answer, which is one key without Enter;
    'd' detaches (exit 0) and the job keeps running."""
    name = "chatty"
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.clear()
        os.environ.update(local.env)
        os.execv(str(local.exe), [str(local.exe), "run", "--name", name, "-p", "1", "--",
                                  "sh", "-c", "i=0; while :; do i=$((i+1)); echo tick $i; "
                                  "sleep 0.05; done"])
    try:
        out = read_until(fd, rb"tick 5\b", 30)
        assert b"tick 5" in out, out
        os.write(fd, b"\x03")
        out = read_until(fd, rb"\(d\)\? \[c/d\][^\n]*$", 10)
        assert b"or detach" in out, out
        after = read_until(fd, rb"tick \d+", 2.0)      # nothing may scroll the question
        assert b"tick" not in after, after
        os.write(fd, b"d")                               # one key, no Enter
        out = read_until(fd, rb"detached", 10)
        assert b"detached" in out, out
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            wpid, status = os.waitpid(pid, os.WNOHANG)
            if wpid:
                break
            read_until(fd, rb"$^", 0.1)
        else:
            pytest.fail("dtctl run did not exit after 'd'")
        pid = 0
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        jid = local.job_id(name)
        p = local.dtctl("show", jid, "--json")
        assert json.loads(p.stdout)["job"]["state"] == "RUNNING", p.stdout
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
        try:
            local.dtctl("cancel", local.job_id(name))
        except AssertionError:
            pass


@pytest.mark.parametrize("quiet", [True, False])
def test_trainer_switch_from_job_yaml(local, tmp_path, quiet):
    """A boolean in job.yaml's trainer: map (YAML true/false) reaches dttrain as
    --quiet=true / --quiet=false, which it takes as the switch on or off (it used to
    refuse '--quiet=true' and print its help)."""
    job = tmp_path / "job.yaml"
    job.write_text("name: switch\nnodes: 1\nprocs_per_node: 1\nlauncher: agent\n"
                   "trainer: {model: mlp, hidden: 32, epochs: 1, train_size: 512, val_size: 128,\n"
                   "          log_every: 1, threads: 1, quiet: %s}\n" % ("true" if quiet else "false"))
    p = local.dtctl("run", job, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    steps = re.findall(r"\bstep \d+/\d+ epoch", p.stdout)
    assert bool(steps) != quiet, p.stdout
