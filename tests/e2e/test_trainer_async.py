"""dttrain --sync async (local SGD with periodic averaging) under a real mpirun, 2 ranks.

Averaging after every plain SGD step of the same gradients is averaging the gradients:
--sync-every 1 ends with sync's weights up to float rounding (SGD with momentum and weight
decay, moments averaged too, equal shards).  Longer rounds still learn the synthetic task,
with a slow rank too (which then takes fewer local steps than rank 0, the pacer), and a
checkpoint of rounds of one step resumes bit for bit.  --sync-overlap (the parameters'
average in the background, applied a round late) learns as well, blocks only where every
rank needs the same model (validation, the end), and ends elsewhere than blocking rounds.
Helpers come from test_trainer.py.
"""

import re

from test_trainer import dttrain, env, floats, max_rel_diff, need_binary  # noqa: F401

# equal shards: 384 rows = 12 batches of 32 = 2 ranks x 16
TASK = ["--hidden", "32,16", "--input-dim", "12", "--classes", "3", "--train-size", "384",
        "--val-size", "100", "--batch", "32", "--lr", "0.1", "--threads", "1",
        "--device", "cpu", "--log-every", "0", "--weight-decay", "0.01"]


def local_steps(out):
    m = re.search(r"async: local steps per rank: (\d+) (\d+)", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def val(out):
    m = re.findall(r"val_loss ([\d.]+) val_acc ([\d.]+)", out)
    assert m, out
    return float(m[-1][0]), float(m[-1][1])


def test_every_step_equals_sync(tmp_path):
    ws, wa = tmp_path / "sync.bin", tmp_path / "async.bin"
    r = dttrain(*TASK, "--epochs", "3", "--save-weights", ws, np=2)
    assert r.returncode == 0, r.stderr
    r = dttrain(*TASK, "--epochs", "3", "--sync", "async", "--sync-every", "1",
                "--save-weights", wa, np=2)
    assert r.returncode == 0, r.stderr
    assert "async: local SGD, parameters and optimizer state averaged every 1 steps " \
           "(rank 0 paces the rounds)" in r.stdout
    assert local_steps(r.stdout) == (36, 36)
    d = max_rel_diff(floats(wa), floats(ws))
    assert d < 1e-5, f"async every step drifted {d:.3g} from sync"
    # and it is not trivially the same run: longer rounds do end elsewhere
    r = dttrain(*TASK, "--epochs", "3", "--sync", "async", "--sync-every", "4",
                "--save-weights", wa, np=2)
    assert r.returncode == 0, r.stderr
    assert max_rel_diff(floats(wa), floats(ws)) > 1e-3


def test_rounds_learn_with_a_slow_rank(tmp_path):
    for extra, slow in (([], False), (["--slow-rank", "1:30"], True)):
        r = dttrain(*TASK, "--epochs", "8", "--sync", "async", "--sync-every", "4", *extra,
                    np=2, timeout=180)
        assert r.returncode == 0, r.stderr
        loss, acc = val(r.stdout)
        assert acc >= 0.8 and loss < 0.45, (extra, loss, acc)
        first, second = local_steps(r.stdout)
        assert first == 96 and 12 <= second <= 96   # at least one step per round of 4
        if slow:
            # rank 1 sleeps 30 ms a step, rank 0 takes well under that: it paces the rounds
            assert second < 60, (first, second)


def test_checkpoint_resume_rounds_of_one(tmp_path):
    ck, full, resumed = tmp_path / "ck", tmp_path / "full.bin", tmp_path / "resumed.bin"
    args = [*TASK, "--epochs", "2", "--sync", "async", "--sync-every", "1", "--momentum", "0.9"]
    r = dttrain(*args, "--checkpoint-dir", ck, "--checkpoint-every", "10",
                "--keep-checkpoints", "5", "--save-weights", full, np=2)
    assert r.returncode == 0, r.stderr
    assert (ck / "step-000000010.ckpt").exists(), sorted(p.name for p in ck.iterdir())
    r = dttrain(*args, "--resume", ck / "step-000000010.ckpt", "--save-weights", resumed, np=2)
    assert r.returncode == 0, r.stderr
    assert "resumed from" in r.stdout and "at step 10" in r.stdout
    assert floats(resumed) == floats(full)


def test_nan_stops_every_rank_at_the_round():
    r = dttrain(*TASK, "--lr", "1e30", "--momentum", "0", "--schedule", "constant",
                "--steps", "40", "--sync", "async", "--sync-every", "4", np=2, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "training diverged" in r.stderr and "MPI_ABORT" not in r.stderr


def test_overlapped_average_learns(tmp_path):
    wb, wo = tmp_path / "blocking.bin", tmp_path / "overlap.bin"
    r = dttrain(*TASK, "--epochs", "8", "--sync", "async", "--sync-every", "4",
                "--save-weights", wb, np=2)
    assert r.returncode == 0, r.stderr
    for extra in ([], ["--slow-rank", "1:30"]):
        r = dttrain(*TASK, "--epochs", "8", "--sync", "async", "--sync-every", "4",
                    "--sync-overlap", "--save-weights", wo, *extra, np=2, timeout=180)
        assert r.returncode == 0, r.stderr
        assert "overlapped: parameters averaged in the background, applied one round late" \
            in r.stdout, r.stdout
        # 24 rounds of 4: those ending an epoch (every 3rd, validation) block, 16 overlap
        assert "async: 16 averages overlapped with training, 8 blocking" in r.stdout, r.stdout
        loss, acc = val(r.stdout)
        assert acc >= 0.8 and loss < 0.45, (extra, loss, acc)
        if not extra:
            # the stale average is a different algorithm, not the blocking one renamed
            assert max_rel_diff(floats(wo), floats(wb)) > 1e-3
