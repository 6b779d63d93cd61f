"""dttrain --pipeline under a real mpirun; 2-node pipeline and async jobs through dtctl run.

A pipeline stage runs the same operations on the same rows as one rank does with --accum
(micro-batches = accumulation parts), so 2 and 4 stages end with one rank's weights bit
for bit, GPipe and 1F1B alike (backwards in micro-batch order in both); 2 replicas x 2
stages (4 ranks) only regroup sums (1e-4).  A pipeline checkpoint (rank 0 gathers every
stage) resumes on the pipeline and on one rank bit for bit.  The bubble is reported.
The dtctl tests (a pipeline from `--trainer --`, an async job from job.yaml's `trainer:`)
run on the fake cluster (hold /tmp/dtctl-fakecluster.lock around them: one fake cluster
per machine); helpers come from test_trainer.py and test_run.py.

--model gpt (4 blocks: embeddings | blocks | final norm + tied head) on 2 and 4 stages and
2 x 2 ends within float rounding of one rank (the tied embedding's two gradient parts, the
first stage's and the last's, are summed between them in another order than one rank's),
GPipe and 1F1B identical to each other; a 2-node gpt pipeline job runs through dtctl.
"""

import json
import re

import pytest

from test_trainer import dttrain, floats, max_rel_diff, need_binary  # noqa: F401
from test_trainer_gpt import text  # noqa: F401  (the fixture: a small generated text)

# 4 layers (12-32-16-16-3), so 4 stages have one each
TASK = ["--hidden", "32,16,16", "--input-dim", "12", "--classes", "3", "--train-size", "400",
        "--val-size", "100", "--batch", "32", "--lr", "0.1", "--threads", "1",
        "--device", "cpu", "--log-every", "0", "--weight-decay", "0.01"]


def train(tmp_path, name, *args, np=None, **kw):
    w = tmp_path / f"{name}.bin"
    r = dttrain(*TASK, *args, "--save-weights", w, np=np, **kw)
    assert r.returncode == 0, r.stderr
    return floats(w), r.stdout


def test_stages_equal_one_rank(tmp_path):
    one, _ = train(tmp_path, "one", "--epochs", "3", "--accum", "4")
    for P in (2, 4):
        for sched in ("gpipe", "1f1b"):
            w, out = train(tmp_path, f"p{P}{sched}", "--epochs", "3", "--pipeline", P,
                           "--micro-batches", "4", "--pipeline-schedule", sched, np=P)
            # 1F1B keeps P - stage micro-batches' activations, GPipe all of them
            live = 4 if sched == "gpipe" else min(4, P)
            assert f"pipeline: {P} stages x 1 replica (rank = replica * {P} + stage), " \
                   f"4 micro-batches ({live} in flight on stage 0), {sched}" in out, out
            assert w == one, f"{P} stages ({sched}) differ from one rank with --accum 4"
    # the split: 4 layers over 2 stages by parameter count, one layer each over 4
    assert "layers 0-0 | 1-3" in out or "layers 0-0 | 1-1 | 2-2 | 3-3" in out, out


def test_replicas_of_stages_equal_one_rank(tmp_path):
    one, _ = train(tmp_path, "one", "--epochs", "2")
    w, out = train(tmp_path, "2x2", "--epochs", "2", "--pipeline", "2", "--micro-batches", "2",
                   np=4)
    assert "2 stages x 2 replicas" in out and "batch 32 (16 per replica" in out, out
    d = max_rel_diff(w, one)
    assert d < 1e-4, f"2 replicas x 2 stages drifted {d:.3g} from one rank"
    # clipping needs the norm over every stage, summed once per replica
    one, _ = train(tmp_path, "one-clip", "--epochs", "2", "--clip", "0.3")
    w, _ = train(tmp_path, "2x2-clip", "--epochs", "2", "--clip", "0.3", "--pipeline", "2",
                 np=4)
    d = max_rel_diff(w, one)
    assert d < 1e-4, f"clipped: 2 x 2 drifted {d:.3g} from one rank"


def test_bubble_and_throughput_reported(tmp_path):
    metrics = tmp_path / "m.jsonl"
    _, out = train(tmp_path, "p2", "--steps", "8", "--pipeline", "2", "--micro-batches", "4",
                   "--log-every", "4", "--metrics", metrics, np=2)
    m = re.search(r"pipeline: bubble ([\d.]+)% \(time blocked on neighbouring stages; "
                  r"ideal \(P-1\)/\(M\+P-1\) = 20.0%\)", out)
    assert m and 0 < float(m.group(1)) < 100, out
    assert re.search(r"done: 8 steps, \d+ samples/s", out), out
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    steps = [x for x in lines if "samples_per_s" in x]
    assert [x["step"] for x in steps] == [4, 8]
    assert all(0 <= x["bubble"] < 1 and x["samples_per_s"] > 0 for x in steps), steps


def test_checkpoint_gathers_stages(tmp_path):
    ck = tmp_path / "ck"
    full, _ = train(tmp_path, "full", "--epochs", "2", "--pipeline", "2", "--checkpoint-dir", ck,
                    "--checkpoint-every", "9", "--keep-checkpoints", "5", "--optimizer", "adamw", "--lr", "0.003", np=2)
    start = ck / "step-000000009.ckpt"
    again, out = train(tmp_path, "again", "--epochs", "2", "--pipeline", "2", "--resume", start,
                       "--optimizer", "adamw", "--lr", "0.003", np=2)
    assert "at step 9" in out and again == full
    # the same checkpoint on one rank (every stage's parameters and moments were in it)
    alone, _ = train(tmp_path, "alone", "--epochs", "2", "--accum", "4", "--resume", start,
                     "--optimizer", "adamw", "--lr", "0.003")
    assert alone == full


def test_pipeline_usage_errors():
    r = dttrain(*TASK, "--steps", "1", "--pipeline", "3", np=2)
    assert r.returncode == 2 and "--pipeline 3 needs a multiple of 3 ranks, got 2" in r.stderr
    r = dttrain(*TASK, "--steps", "1", "--hidden", "8", "--pipeline", "4", np=4)
    assert r.returncode == 2 and "--pipeline 4: model 'mlp' has fewer layers than stages" \
        in r.stderr
    r = dttrain(*TASK, "--steps", "1", "--pipeline", "2", "--accum", "2")
    assert r.returncode == 2 and "--accum must stay 1" in r.stderr


# SGD (see test_trainer_gpt.py): 4 blocks, so 4 stages can each get one piece
GPT = ["--model", "gpt", "--layers", "4", "--heads", "2", "--dim", "16", "--context", "16",
       "--batch", "8", "--optimizer", "sgd", "--lr", "0.2", "--warmup", "5", "--threads", "1",
       "--device", "cpu", "--log-every", "0", "--steps", "10"]


def train_gpt(tmp_path, text, name, *args, np=None):  # noqa: F811
    w = tmp_path / f"{name}.bin"
    r = dttrain(*GPT, "--data", f"text:{text}", *args, "--save-weights", w, np=np)
    assert r.returncode == 0, r.stderr
    return floats(w), r.stdout


def test_gpt_stages_equal_one_rank(tmp_path, text):  # noqa: F811
    one, _ = train_gpt(tmp_path, text, "one", "--accum", "4")
    for P in (2, 4):
        got = {}
        for sched in ("gpipe", "1f1b"):
            got[sched], out = train_gpt(tmp_path, text, f"p{P}{sched}", "--pipeline", P,
                                        "--micro-batches", "4", "--pipeline-schedule", sched,
                                        np=P)
            assert f"pipeline: {P} stages x 1 replica" in out, out
            assert re.search(r"pipeline: bubble [\d.]+%", out), out
            assert re.search(r"done: 10 steps, \d+ samples/s, \d+ tokens/s", out), out
            # a missing or doubled sum of the tied embedding's gradient is O(1)
            d = max_rel_diff(got[sched], one)
            assert d < 1e-4, f"gpt on {P} stages ({sched}) drifted {d:.3g} from one rank"
        assert got["gpipe"] == got["1f1b"], "GPipe and 1F1B sum in the same order"
        # by compute: the head (2 T C V) outweighs a block here and stands alone on 4
        assert ("layers 0-3 | 4-5" if P == 2 else "layers 0-1 | 2-3 | 4-4 | 5-5") in out, out


def test_gpt_replicas_of_stages_equal_one_rank(tmp_path, text):  # noqa: F811
    for clip in ([], ["--clip", "0.3"]):
        one, _ = train_gpt(tmp_path, text, "one", *clip)
        w, out = train_gpt(tmp_path, text, "2x2", "--pipeline", "2", "--micro-batches", "2",
                           *clip, np=4)
        assert "2 stages x 2 replicas" in out and "batch 8 (4 per replica" in out, out
        d = max_rel_diff(w, one)
        # clipping counts the tied embedding once (on the first stage)
        assert d < 1e-4, f"gpt 2 x 2 {clip} drifted {d:.3g} from one rank"


def test_gpt_pipeline_checkpoint_resumes(tmp_path, text):  # noqa: F811
    """Rank 0 gathers the stages (wte from stage 0, the last stage's copy being the same):
    the checkpoint resumes on the pipeline bit for bit and on one rank (momentum too)."""
    ck = tmp_path / "ck"
    args = ["--momentum", "0.9", "--pipeline", "2", "--micro-batches", "4"]
    full, _ = train_gpt(tmp_path, text, "full", *args, "--checkpoint-dir", ck,
                        "--checkpoint-every", "5", np=2)
    start = ck / "step-000000005.ckpt"
    again, out = train_gpt(tmp_path, text, "again", *args, "--resume", start, np=2)
    assert "at step 5" in out and again == full
    alone, out = train_gpt(tmp_path, text, "alone", "--momentum", "0.9", "--accum", "4",
                           "--resume", start)
    assert "at step 5" in out
    d = max_rel_diff(alone, full)
    assert d < 1e-4, f"the pipeline's checkpoint resumed on one rank drifted {d:.3g}"


# ------------------------------------------------------------------ through dtctl run

from test_run import cluster  # noqa: E402,F401  (the 3-node fake cluster with dtsched)


def test_dtctl_run_two_node_pipeline(cluster):  # noqa: F811
    if cluster.fc.mode != "netns":
        pytest.skip("mpirun across nodes needs distinct hostnames (fake cluster mode %s)"
                    % cluster.fc.mode)
    p = cluster.dtctl("run", "--launcher", "mpi", "-n", 2, "-p", 1, "--name", "pipe2",
                      "--trainer", "--", "--model=mlp", "--pipeline=2", "--micro-batches=4",
                      "--hidden=32,16", "--steps=6", "--train-size=512", "--val-size=64",
                      "--log-every=2", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "COMPLETED" in p.stderr
    job = re.search(r"job (j-\d+) submitted", p.stderr).group(1)
    j = cluster.show(job)
    assert j["launcher"] == "mpi" and j["world_size"] == 2
    assert len({x["node"] for x in j["placement"]}) == 2, j["placement"]
    assert "pipeline: 2 stages x 1 replica" in p.stdout, p.stdout
    assert "pipeline: bubble" in p.stdout and "done: 6 steps" in p.stdout, p.stdout


def test_dtctl_run_two_node_gpt_pipeline(cluster):  # noqa: F811
    """A gpt split over 2 nodes; the text is Debian's GPL-3 (base-files: on every node)."""
    if cluster.fc.mode != "netns":
        pytest.skip("mpirun across nodes needs distinct hostnames (fake cluster mode %s)"
                    % cluster.fc.mode)
    p = cluster.dtctl("run", "--launcher", "mpi", "-n", 2, "-p", 1, "--name", "gptpipe2",
                      "--trainer", "--", "--model=gpt", "--pipeline=2", "--micro-batches=4",
                      "--data=text:/usr/share/common-licenses/GPL-3", "--layers=2",
                      "--heads=2", "--dim=32", "--context=32", "--batch=8", "--steps=6",
                      "--log-every=2", "--eval-every=6", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "COMPLETED" in p.stderr
    job = re.search(r"job (j-\d+) submitted", p.stderr).group(1)
    j = cluster.show(job)
    assert j["launcher"] == "mpi" and j["world_size"] == 2
    assert len({x["node"] for x in j["placement"]}) == 2, j["placement"]
    assert "gpt L2 H2 C32 T32 V256" in p.stdout, p.stdout
    assert "pipeline: 2 stages x 1 replica" in p.stdout, p.stdout
    assert re.search(r"step 6 val_loss [\d.]+", p.stdout), p.stdout
    assert "pipeline: bubble" in p.stdout and "tokens/s" in p.stdout, p.stdout


def test_dtctl_run_async_from_job_yaml(cluster, tmp_path):  # noqa: F811
    """job.yaml `trainer:` keys with '_' become the new flags (sync_every: --sync-every)."""
    if cluster.fc.mode != "netns":
        pytest.skip("mpirun across nodes needs distinct hostnames (fake cluster mode %s)"
                    % cluster.fc.mode)
    job = tmp_path / "job.yaml"
    job.write_text("name: async2\nnodes: 2\nprocs_per_node: 1\nlauncher: mpi\n"
                   "trainer: {model: mlp, sync: async, sync_every: 2, slow_rank: '1:20', "
                   "hidden: [32], steps: 8, train_size: 512, val_size: 64, log_every: 2}\n")
    p = cluster.dtctl("run", job, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "averaged every 2 steps (rank 0 paces the rounds)" in p.stdout, p.stdout
    m = re.search(r"async: local steps per rank: (\d+) (\d+)", p.stdout)
    assert m and int(m.group(1)) == 8 and 4 <= int(m.group(2)) <= 8, p.stdout
