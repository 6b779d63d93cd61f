"""dttrain --model gpt end to end: the real binary on a generated text, one rank and two
under a real mpirun (no fake cluster).

Two ranks with the same global batch end with the same weights as one rank (each rank
gathers different contexts, the all-reduce sums them), the metrics carry tokens/s and a
validation loss in nats per token, the trained model beats the loss at init (ln 256), and
the usage errors of the model and its data exit 2 with a message, a resume is
bit-identical, and templates/gpt.yaml's trainer: map starts dttrain as the launcher would.
"""

import json
import subprocess

import pytest

from test_trainer import BIN, REPO, dttrain, floats, max_rel_diff, need_binary  # noqa: F401

# SGD: Adam's normalised steps turn rounding differences of near-zero gradients into
# whole steps, so only SGD makes "same weights" a tight test
GPT = ["--model", "gpt", "--layers", "2", "--heads", "2", "--dim", "16", "--context", "16",
       "--batch", "8", "--optimizer", "sgd", "--lr", "0.2", "--warmup", "5",
       "--threads", "1", "--device", "cpu", "--log-every", "5", "--eval-every", "10"]


@pytest.fixture
def text(tmp_path):
    """A small deterministic text: sentences from a fixed word list."""
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "a", "dog", "ran"]
    lines = [" ".join(words[(i * k + k) % len(words)] for k in (1, 3, 7, 9)) + "."
             for i in range(300)]
    p = tmp_path / "text.txt"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_two_ranks_match_one(tmp_path, text):
    out = {}
    for np in (1, 2):
        w = tmp_path / f"w{np}.bin"
        m = tmp_path / f"m{np}.jsonl"
        r = dttrain(*GPT, "--data", f"text:{text}", "--steps", "20", "--save-weights", w,
                    "--metrics", m, np=None if np == 1 else np)
        assert r.returncode == 0, r.stderr
        assert "gpt L2 H2 C16 T16 V256" in r.stdout and f"{np} rank" in r.stdout
        assert "tokens/s" in r.stdout
        out[np] = floats(w)
        lines = [json.loads(x) for x in m.read_text().splitlines()]
        steps = [x for x in lines if "tokens_per_s" in x]
        assert steps and all(x["tokens_per_s"] == pytest.approx(16 * x["samples_per_s"], rel=1e-3)
                             for x in steps)
        vals = [x for x in lines if "val_loss" in x]
        assert vals and 0 < vals[-1]["val_loss"] < 5.55   # below ln(256): it learned
        assert 0 <= vals[-1]["val_acc"] <= 1
    # fp32 sums in another order only; a wrong shard or a missing all-reduce is O(1)
    assert max_rel_diff(out[2], out[1]) < 5e-4, "2 ranks drifted from 1 rank"


@pytest.mark.parametrize("args, message", [
    (["--model", "gpt"], "--model gpt trains on --data text:PATH"),
    (["--model", "gpt", "--data", "text:{text}", "--heads", "3", "--dim", "16"],
     "not a multiple of --heads 3"),
    (["--model", "gpt", "--data", "text:{text}", "--vocab", "64"], "is not below --vocab 64"),
    (["--data", "text:{text}"], "text data needs --model gpt"),
])
def test_usage_errors(text, args, message):
    r = dttrain(*[a.replace("{text}", str(text)) for a in args], "--steps", "1",
                "--device", "cpu")
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr


def test_resume_is_bit_identical(tmp_path, text):
    """AdamW state, data position and RNG come back: steps 10-20 after a resume redo the same."""
    args = [*GPT, "--optimizer", "adamw", "--lr", "3e-3", "--data", f"text:{text}", "--steps", "20"]
    full, resumed, ck = tmp_path / "full.bin", tmp_path / "resumed.bin", tmp_path / "ck"
    r = dttrain(*args, "--checkpoint-dir", ck, "--checkpoint-every", "10", "--save-weights", full)
    assert r.returncode == 0, r.stderr
    r = dttrain(*args, "--resume", ck / "step-000000010.ckpt", "--save-weights", resumed)
    assert r.returncode == 0, r.stderr
    assert "resumed from" in r.stdout
    assert full.read_bytes() == resumed.read_bytes()


def test_template_flags_start_dttrain(tmp_path):
    """templates/gpt.yaml's trainer: map, as dtctl resolves it and the launcher passes it
    (--key=value, '_' as '-'), starts dttrain on 2 ranks; only the step count is cut."""
    p = subprocess.run([str(BIN / "dtctl"), "validate", "--json", str(REPO / "templates/gpt.yaml")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    trainer = json.loads(p.stdout)["files"][0]["trainer"]
    assert trainer["model"] == "gpt" and trainer["data"].startswith("text:")
    trainer.update(steps="2", eval_every="2", threads="1", device="cpu")
    r = dttrain(*[f"--{k.replace('_', '-')}={v}" for k, v in trainer.items()], np=2)
    assert r.returncode == 0, r.stderr
    assert "gpt L4 H4 C128 T128 V256" in r.stdout and "2 ranks" in r.stdout
