"""dttrain's CUDA kernels against their CPU twins, on a real GPU.

Runs <build>/gpu-tests/test_trainer_gpu (built by mk/trainer.mk when nvcc is found:
every CUDA kernel, a whole MLP step in fp32/bf16/fp16 and 12 training steps compared
with the CPU reference).  Skips, saying why, when the program was not built (no CUDA) or
when no GPU is visible, which is the case on the development machines and in CI.  Under
DT_REQUIRE_GPU=1 (`make trainer-gpu-test` sets it where nvidia-smi lists a GPU) each of
those skips is a failure, and so is a CUDA error other than "no device" (a driver too
old for the runtime), in every case.
"""

import os
import re
import subprocess
from pathlib import Path

from conftest import gpu_required, gpu_skip

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DTCTL_BIN") or REPO / "bin").resolve()


def find_program():
    candidates = [os.environ.get("DTTRAIN_GPU_TEST"), BIN.parent / "gpu-tests" / "test_trainer_gpu",
                  REPO / "build" / "dev" / "gpu-tests" / "test_trainer_gpu"]
    for c in candidates:
        if c and Path(c).exists():
            return Path(c)
    return None


def run_twin_tests(prog, require):
    env = dict(os.environ, DT_REQUIRE_GPU="1" if require else "0")
    return subprocess.run([str(prog)], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env=env)


def test_cuda_kernels_match_cpu_twins():
    prog = find_program()
    if prog is None:
        gpu_skip("GPU twin tests not built: this dttrain has no CUDA (nvcc not found or NO_CUDA=1)")
    r = run_twin_tests(prog, gpu_required())
    out = r.stdout + r.stderr
    if r.returncode == 0 and "no CUDA device visible" in out:
        gpu_skip("no GPU on this machine: CUDA kernel twin tests skipped")
    assert r.returncode == 0, out
    assert "FAILED" not in out, out


def test_require_gpu_turns_skip_into_failure():
    """Without a GPU, DT_REQUIRE_GPU=1 makes the twin tests fail, naming why; with one,
    they run (and pass: the test above)."""
    prog = find_program()
    if prog is None:
        gpu_skip("GPU twin tests not built: this dttrain has no CUDA (nvcc not found or NO_CUDA=1)")
    r = run_twin_tests(prog, True)
    out = r.stdout + r.stderr
    if "every test skips" in out or "[  SKIPPED ]" in out:
        raise AssertionError("DT_REQUIRE_GPU=1, yet tests were skipped:\n" + out)
    if r.returncode != 0:
        assert "DT_REQUIRE_GPU is set, but no CUDA device is visible" in out, out


BENCHES = ("bias_act", "gemm", "optimizer", "softmax_xent")


def test_kernel_benchmarks_validate_or_skip_clearly():
    """bench/cuda: with a GPU each program validates its kernel against the CPU twin
    and ends "OK"; without one it says "skipped" and exits 0 (1 under DT_REQUIRE_GPU)."""
    prog = find_program()
    if prog is None:
        gpu_skip("kernel benchmarks not built: this dttrain has no CUDA")
    bench_dir = prog.parent.parent / "bench-cuda"
    for name in BENCHES:
        b = bench_dir / name
        assert b.exists(), "%s not built (mk/bench-kernels.mk builds it with the e2e programs)" % b
        r = subprocess.run([str(b)], capture_output=True, text=True, timeout=600,
                           stdin=subprocess.DEVNULL, env=dict(os.environ, DT_REQUIRE_GPU="0"))
        out = r.stdout + r.stderr
        assert r.returncode == 0, out
        if "no CUDA device visible; skipped" in out:
            continue
        assert out.rstrip().endswith("bench %s: OK" % name), out
        assert "FAILED" not in out, out
    if "skipped" in out:
        gpu_skip("no GPU on this machine: kernel benchmarks built and skipped")


# ------------------------------------------------- --model gpt in bf16/fp16 (dttrain)

from test_trainer import dttrain  # noqa: E402
from test_trainer_gpt import text  # noqa: E402,F401  (the fixture: a small generated text)

GPT = ["--model", "gpt", "--layers", "2", "--heads", "2", "--dim", "32", "--context", "32",
       "--batch", "16", "--optimizer", "adamw", "--lr", "3e-3", "--steps", "60",
       "--eval-every", "60", "--log-every", "20"]


def gpt_on_gpu(text, *args):  # noqa: F811
    r = dttrain(*GPT, "--data", f"text:{text}", "--device", "cuda", *args)
    if r.returncode == 2 and ("no GPU visible" in r.stderr or "without CUDA" in r.stderr):
        gpu_skip("no GPU on this machine (or no CUDA build): gpt bf16/fp16 runs skipped")
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def final_val_loss(out):
    """The last validation: "epoch 1 step 60 val_loss X" (--eval-every 60 lands on it)."""
    m = re.findall(r"step 60 val_loss ([\d.]+)", out)
    assert m, out
    return float(m[-1])


def test_gpt_mixed_precision_trains_like_fp32(text):  # noqa: F811
    """bf16 (and fp16 with dynamic loss scaling) reach fp32's validation loss on the GPU."""
    fp32 = final_val_loss(gpt_on_gpu(text))
    assert fp32 < 5.0, fp32   # it learned (ln 256 = 5.55 at init)
    for prec in ("bf16", "fp16"):
        got = final_val_loss(gpt_on_gpu(text, "--precision", prec))
        assert abs(got - fp32) < 0.1 * fp32, f"{prec}: val_loss {got}, fp32 {fp32}"


def test_gpt_mixed_precision_on_cpu_is_refused(text):  # noqa: F811
    """No GPU needed: the CPU path is fp32, and says so instead of crashing."""
    r = dttrain(*GPT, "--data", f"text:{text}", "--device", "cpu", "--precision", "bf16")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--precision bf16 needs a GPU; the CPU path is fp32" in r.stderr
