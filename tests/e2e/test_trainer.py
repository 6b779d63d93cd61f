"""dttrain end to end: the real binary, one rank and several under a real mpirun.

Covers what the unit tests cannot: MPI start-up and collectives (1, 2 and 4 ranks end
with the same weights within fp32 tolerance), torchrun-style start-up refusing several
CPU ranks, resume across ranks, a NaN stopping every rank, flags, --config files and the
metrics file.  Models are tiny so the whole module runs in seconds on 2 cores; ranks are
oversubscribed on purpose.  DTCTL_BIN names the folder with dttrain (default <repo>/bin).
"""

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DTCTL_BIN") or REPO / "bin").resolve()
DTTRAIN = BIN / "dttrain"
MPIRUN = shutil.which("mpirun")

# a small, quick task: 12 features, 3 classes, 2 hidden layers
SMALL = ["--hidden", "32,16", "--input-dim", "12", "--classes", "3", "--train-size", "400",
         "--val-size", "100", "--batch", "32", "--lr", "0.05", "--threads", "1",
         "--device", "cpu", "--log-every", "0"]


def env(**extra):
    e = {k: v for k, v in os.environ.items()
         if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                      "DT_RESUME", "DT_METRICS_FILE") and not k.startswith(("OMPI_", "PMIX_"))}
    e.update({
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
        "OMPI_MCA_mpi_yield_when_idle": "1",
        "OMPI_MCA_btl": "self,vader",        # one machine: shared memory only
        "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    })
    e.update(extra)
    return e


def dttrain(*args, np=None, timeout=120, **kw):
    cmd = [str(DTTRAIN), *map(str, args)]
    if np:
        if not MPIRUN:
            pytest.skip("mpirun not found (make deps installs Open MPI)")
        cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(np), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=kw.pop("env", None) or env(), **kw)


def floats(path):
    import array
    a = array.array("f")
    a.frombytes(Path(path).read_bytes())
    return a


def max_rel_diff(a, b):
    assert len(a) == len(b), f"{len(a)} vs {len(b)} parameters"
    return max(abs(x - y) / (1e-3 + abs(y)) for x, y in zip(a, b))


@pytest.fixture(scope="module", autouse=True)
def need_binary():
    if not DTTRAIN.exists():
        pytest.skip(f"{DTTRAIN} not built")


def test_help_lists_every_flag():
    r = dttrain("--help")
    assert r.returncode == 0
    for flag in ("--model", "--hidden", "--data", "--epochs", "--steps", "--batch", "--lr",
                 "--optimizer", "--seed", "--metrics", "--checkpoint-dir", "--resume",
                 "--precision", "--backend", "--config", "--accum", "--clip", "--warmup",
                 "--weight-decay"):
        assert flag in r.stdout, f"{flag} missing from --help"
    assert dttrain("--version").stdout.startswith("dttrain ")


def test_usage_errors_exit_2(tmp_path):
    r = dttrain("--optimizer", "lion")
    assert r.returncode == 2 and "unknown optimizer 'lion'" in r.stderr
    r = dttrain("--data", "idx:/nonexistent", *SMALL)
    assert r.returncode == 2 and "/nonexistent/train-images-idx3-ubyte" in r.stderr
    cfg = tmp_path / "t.yaml"
    cfg.write_text("hidden: [8]\nlearning_rate: 0.1\n")
    r = dttrain("--config", cfg)
    assert r.returncode == 2
    assert f"{cfg}:2:1: unknown key 'learning_rate'" in r.stderr


def test_config_file_and_metrics(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text("hidden: [32, 16]\ninput_dim: 12\nclasses: 3\ntrain_size: 400\n"
                   "val_size: 100\nbatch: 32\nlr: 0.5\nepochs: 2\nlog_every: 5\n"
                   "device: cpu\nthreads: 1\n")
    metrics = tmp_path / "m.jsonl"
    # the command line wins over the file (lr), DT_METRICS_FILE is the default metrics path
    r = dttrain("--config", cfg, "--lr", "0.05", env=env(DT_METRICS_FILE=str(metrics)))
    assert r.returncode == 0, r.stderr
    assert "mlp 12-32-16-3 relu" in r.stdout and "steps/epoch" in r.stdout
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    train = [x for x in lines if "samples_per_s" in x]
    val = [x for x in lines if "val_acc" in x]
    assert [x["step"] for x in train] == [5, 10, 15, 20, 25, 26]
    assert set(train[0]) == {"step", "epoch", "loss", "lr", "samples_per_s", "time"}
    assert train[0]["lr"] == pytest.approx(0.05 * 0.5 * (1 + __import__("math").cos(
        __import__("math").pi * 4 / 25)), rel=1e-6)
    assert [x["epoch"] for x in val] == [1.0, 2.0]
    assert set(val[0]) == {"step", "epoch", "loss", "val_loss", "val_acc", "time"}


def test_torchrun_env_with_cpu_ranks_needs_mpirun():
    r = dttrain(*SMALL, "--steps", "2",
                env=env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT="29512"))
    assert r.returncode == 2
    assert "2 CPU ranks need MPI's collectives: start dttrain with mpirun" in r.stderr
    # one rank runs anywhere
    r = dttrain(*SMALL, "--steps", "2", env=env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"))
    assert r.returncode == 0, r.stderr


def test_ranks_agree(tmp_path):
    """Global batch 32: 1 rank x 32, 2 x 16, 4 x 8 (and a 3-way uneven split) end equal."""
    out = {}
    for np in (1, 2, 3, 4):
        w = tmp_path / f"w{np}.bin"
        r = dttrain(*SMALL, "--epochs", "2", "--save-weights", w, np=None if np == 1 else np)
        assert r.returncode == 0, r.stderr
        assert (f"{np} rank" in r.stdout) and ("(mpi)" in r.stdout or np == 1)
        out[np] = floats(w)
    for np in (2, 3, 4):
        assert max_rel_diff(out[np], out[1]) < 1e-4, f"{np} ranks drifted from 1 rank"


def test_resume_two_ranks(tmp_path):
    ck = tmp_path / "ck"
    full = tmp_path / "full.bin"
    r = dttrain(*SMALL, "--epochs", "3", "--optimizer", "adamw", "--lr", "0.003",
                "--checkpoint-dir", ck, "--checkpoint-every", "17", "--keep-checkpoints", "5",
                "--save-weights", full, np=2)
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in ck.iterdir())
    assert names == ["latest", "step-000000017.ckpt", "step-000000034.ckpt",
                     "step-000000039.ckpt"], names   # no temp files left behind
    resumed = tmp_path / "resumed.bin"
    r = dttrain(*SMALL, "--epochs", "3", "--optimizer", "adamw", "--lr", "0.003",
                "--save-weights", resumed, np=2,
                env=env(DT_RESUME=str(ck / "step-000000017.ckpt")))
    assert r.returncode == 0, r.stderr
    assert "resumed from" in r.stdout and "at step 17" in r.stdout
    assert floats(resumed) == floats(full)
    # the same checkpoint continues on one rank too (within tolerance: other reduction order)
    one = tmp_path / "one.bin"
    r = dttrain(*SMALL, "--epochs", "3", "--optimizer", "adamw", "--lr", "0.003",
                "--resume", ck / "step-000000017.ckpt", "--save-weights", one)
    assert r.returncode == 0, r.stderr
    assert max_rel_diff(floats(one), floats(full)) < 1e-3


def test_nan_stops_every_rank():
    r = dttrain(*SMALL, "--lr", "1e30", "--momentum", "0", "--schedule", "constant",
                "--steps", "50", np=2, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "training diverged" in r.stderr and "rank 0 on " in r.stderr
    assert "MPI_ABORT" not in r.stderr   # every rank saw it: an orderly stop, not an abort


def test_missing_data_on_one_rank_brings_the_job_down(tmp_path):
    csv = tmp_path / "d.csv"
    csv.write_text("".join(f"{i % 2},{i},{-i}\n" for i in range(50)))
    # rank 1 is told to read a file that does not exist; rank 0 must not wait for ever
    script = tmp_path / "wrap.sh"
    script.write_text(f"#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then "
                      f"exec {DTTRAIN} --data csv:{tmp_path}/missing.csv --batch 8 --device cpu; fi\n"
                      f"exec {DTTRAIN} --data csv:{csv} --batch 8 --device cpu --steps 1000\n")
    script.chmod(0o755)
    r = subprocess.run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", str(script)],
                       capture_output=True, text=True, timeout=60, env=env(),
                       stdin=subprocess.DEVNULL)
    assert r.returncode != 0
    assert "rank 1 on" in r.stderr and "missing.csv" in r.stderr


def test_preempt_signal_checkpoints_then_resumes(tmp_path):
    """A job of a preemptible class is told its signal in DT_PREEMPT_SIGNAL (docs/fairshare.md):
    dttrain writes a checkpoint into $DT_JOB_DIR/ckpt at the step after the signal comes and
    trains on (until dtsched stops it after the grace); a run given that checkpoint as
    DT_RESUME goes on from that step."""
    jobdir = tmp_path / "job"
    (jobdir / "ckpt").mkdir(parents=True)
    e = env(DT_PREEMPT_SIGNAL="USR1", DT_JOB_DIR=str(jobdir))
    p = subprocess.Popen([str(DTTRAIN), *SMALL, "--steps", "5000000"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=e, stdin=subprocess.DEVNULL)
    m = None
    try:
        while not p.stdout.readline().startswith("epoch "):   # it trains
            assert p.poll() is None, p.stderr.read()
        p.send_signal(signal.SIGUSR1)
        lines = []
        for line in p.stdout:
            lines.append(line)
            m = re.match(r"SIGUSR1: preempted, checkpoint at step (\d+)$", line.strip())
            if m:
                break
        assert m, lines
        step = int(m.group(1))
        ck = p.stdout.readline()     # ckpt_save's line, then it trains on
        assert ck.startswith("checkpoint ") and "step-%09d" % step in ck, ck
        assert p.poll() is None, "dttrain stopped after its checkpoint"
    finally:
        p.terminate()
        p.communicate(timeout=30)
    r = dttrain(*SMALL, "--steps", str(step + 5),
                env=env(DT_RESUME=str(jobdir / "ckpt"), DT_JOB_DIR=str(jobdir)))
    assert r.returncode == 0, r.stderr
    assert "at step %d" % step in r.stdout and "resumed from" in r.stdout, r.stdout
    # without DT_PREEMPT_SIGNAL, SIGUSR1 is not dttrain's to take: it ends the run as usual
    q = subprocess.Popen([str(DTTRAIN), *SMALL, "--steps", "5000000"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=env(), stdin=subprocess.DEVNULL)
    while not q.stdout.readline().startswith("epoch "):
        assert q.poll() is None
    q.send_signal(signal.SIGUSR1)
    assert q.wait(timeout=30) == -signal.SIGUSR1
