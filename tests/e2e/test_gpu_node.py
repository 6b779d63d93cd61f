"""dtctl on a GPU node, end to end (issue #18): a one-node cluster on this machine
(`host: local`, `gpus: auto`: the agent's real NVML inventory), then what a user does
first on a GPU server, each checked against the GPU itself (nvidia-smi):

  - `dtctl nodes --gpus` lists every GPU with its model and UUID, as `nvidia-smi` does;
  - `dtctl run -n 1 -g 1 --trainer -- --precision bf16` (and fp16 with loss scaling)
    trains on the GPU and learns (validation accuracy rises);
  - a plain PyTorch DDP script (nccl, one rank, torchrun's env) and an HF Accelerate
    script run unchanged under `dtctl run -n 1 -g 1 -- python3 ...`;
  - `dtctl sweep` of dttrain trials on the GPU completes every trial;
  - `dtctl cancel` of a GPU job leaves no process on the GPU.

Without a GPU (CI, this project's build machine) every GPU test skips visibly, and
fails under DT_REQUIRE_GPU=1.  The first test runs everywhere: fake GPUs (a number in
cluster.yaml, no NVML) are listed as "fake" with no UUID.
"""

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import LocalCluster, gpu_skip, have_python_module


def nvidia_smi_gpus():
    """[(uuid, name)] from nvidia-smi, [] without a GPU or nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return []
    p = subprocess.run(["nvidia-smi", "--query-gpu=uuid,name", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        return []
    return [tuple(f.strip() for f in line.split(",", 1)) for line in p.stdout.splitlines()
            if line.strip()]


def gpu_pids():
    """PIDs of the compute processes on the GPUs, as nvidia-smi sees them."""
    p = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=30)
    return {int(x) for x in p.stdout.split() if x.strip().isdigit()}


def need_gpu(bin_dir):
    if not nvidia_smi_gpus():
        gpu_skip("no GPU (nvidia-smi lists none)")
    dttrain = bin_dir / "dttrain"
    p = subprocess.run(["ldd", str(dttrain)], capture_output=True, text=True)
    if "libcudart" not in p.stdout:
        gpu_skip("dttrain was built without CUDA (no nvcc when it was built)")


def val_accs(text):
    return [float(m) for m in re.findall(r"val_acc ([0-9.]+)", text)]


def test_nodes_gpus_lists_fake_gpus(dtctl_bin, tmp_path):
    """Configured GPUs on a machine without NVML: listed, model "fake", no UUID."""
    with LocalCluster(dtctl_bin / "dtctl", tmp_path, name="gpufake", gpus="2") as c:
        p = c.dtctl("nodes", "--gpus", "--json")
        assert p.returncode == 0, p.stderr
        gpus = json.loads(p.stdout)["gpus"]
        assert [(g["node"], g["index"], g["name"], g["uuid"]) for g in gpus] == \
            [("local", 0, "fake", ""), ("local", 1, "fake", "")], gpus
        p = c.dtctl("nodes", "--gpus")
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert lines[0].split()[:4] == ["NODE", "GPU", "MODEL", "UUID"], p.stdout
        assert len(lines) == 3 and all(ln.split()[2] == "fake" for ln in lines[1:]), p.stdout


@pytest.fixture(scope="module")
def gpu_cluster(dtctl_bin, tmp_path_factory):
    need_gpu(dtctl_bin)
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path_factory.mktemp("gpunode"), name="gpunode",
                     gpus="auto")
    with c:
        yield c


def test_nodes_show_the_real_gpus(gpu_cluster):
    c = gpu_cluster
    p = c.dtctl("nodes", "--gpus", "--json")
    assert p.returncode == 0, p.stderr
    seen = [(g["uuid"], g["name"]) for g in json.loads(p.stdout)["gpus"]]
    assert seen == nvidia_smi_gpus(), "dtctl nodes --gpus: %s\nnvidia-smi: %s" % (
        seen, nvidia_smi_gpus())
    node = c.node_json()
    assert node["gpus_total"] == len(seen) and node["gpus_used"] == 0, node


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_trainer_learns_on_the_gpu(gpu_cluster, precision):
    c = gpu_cluster
    p = c.dtctl("run", "-n", "1", "-g", "1", "--name", "gpu-" + precision, "--trainer", "--",
                "--device", "cuda", "--precision", precision, "--epochs", "4",
                "--train-size", "16384", "--val-size", "2048", "--batch", "256",
                "--lr", "0.05", timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert re.search(r"\bon cuda\b", out), "dttrain did not run on the GPU:\n" + out
    acc = val_accs(out)
    assert len(acc) >= 2, out
    assert acc[-1] > acc[0] + 0.05 and acc[-1] > 0.5, "val_acc %s: not learning\n%s" % (acc, out)


DDP = r"""
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
torch.manual_seed(0)
x = torch.randn(4096, 64, device="cuda"); w = torch.randn(64, 1, device="cuda")
y = x @ w
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 1).cuda(), device_ids=[local])
opt = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
for _ in range(200):
    opt.zero_grad(); loss = torch.nn.functional.mse_loss(model(x), y); loss.backward(); opt.step()
    losses.append(loss.item())
t = torch.ones(1, device="cuda"); dist.all_reduce(t)
print("DDP rank %s/%s on %s: loss %.4f -> %.4f, all_reduce %s" % (dist.get_rank(),
      dist.get_world_size(), torch.cuda.get_device_name(), losses[0], losses[-1], t.item()))
assert losses[-1] < 0.1 * losses[0] and t.item() == dist.get_world_size()
dist.destroy_process_group()
"""

ACCELERATE = r"""
import torch
from accelerate import Accelerator
acc = Accelerator(mixed_precision="bf16")
torch.manual_seed(0)
x = torch.randn(4096, 64); w = torch.randn(64, 1); y = x @ w
ds = torch.utils.data.TensorDataset(x, y)
dl = torch.utils.data.DataLoader(ds, batch_size=256, shuffle=True)
model = torch.nn.Linear(64, 1); opt = torch.optim.SGD(model.parameters(), lr=0.05)
model, opt, dl = acc.prepare(model, opt, dl)
first = last = None
for epoch in range(20):
    for xb, yb in dl:
        opt.zero_grad(); loss = torch.nn.functional.mse_loss(model(xb).float(), yb.float())
        acc.backward(loss); opt.step()
        first = first if first is not None else loss.item(); last = loss.item()
print("ACCELERATE device %s processes %d type %s: loss %.4f -> %.4f" % (acc.device,
      acc.num_processes, acc.distributed_type, first, last))
assert acc.device.type == "cuda" and last < 0.2 * first
"""


@pytest.mark.parametrize("name,script,marker", [("ddp", DDP, "DDP rank 0/1 on"),
                                                ("accelerate", ACCELERATE, "ACCELERATE device cuda")],
                         ids=["ddp", "accelerate"])
def test_user_scripts_run_unchanged(gpu_cluster, tmp_path, name, script, marker):
    c = gpu_cluster
    if name == "accelerate" and not have_python_module("accelerate"):
        gpu_skip("HF Accelerate is not installed for %s" % sys.executable)
    f = c.shared / ("%s.py" % name)
    f.write_text(script)
    p = c.dtctl("run", "-n", "1", "-g", "1", "--name", name, "--", sys.executable, f,
                timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and marker in out, out


def test_sweep_on_the_gpu(gpu_cluster):
    c = gpu_cluster
    sweep = c.shared / "gpu-sweep.yaml"
    sweep.write_text(
        "method: grid\nmetric: {name: val_loss, goal: minimize}\n"
        "parameters:\n  lr: {values: [0.01, 0.05, 0.1]}\n"
        "job:\n  name: gpu-trial\n  nodes: 1\n  gpus_per_node: 1\n  launcher: agent\n"
        "  trainer: {model: mlp, hidden: [256, 256], epochs: 2, data: synthetic,\n"
        "            train_size: 8192, val_size: 1024, device: cuda, precision: bf16}\n"
        "max_trials: 3\nparallel: 1\n")
    p = c.dtctl("sweep", sweep, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    sid = json.loads(c.dtctl("sweep", "list", "--json").stdout)["sweeps"][-1]["id"]
    ex = json.loads(c.dtctl("sweep", "export", "--json", sid).stdout)
    assert [t["state"] for t in ex["trials"]] == ["COMPLETED"] * 3, ex["trials"]


def test_cancel_leaves_nothing_on_the_gpu(gpu_cluster):
    c = gpu_cluster
    before = gpu_pids()
    p = c.dtctl("run", "--detach", "-n", "1", "-g", "1", "--name", "gpu-cancel", "--trainer",
                "--", "--device", "cuda", "--epochs", "1000", "--train-size", "65536")
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (gpu_pids() - before):
        time.sleep(0.5)
    assert gpu_pids() - before, "the job never showed up on the GPU (nvidia-smi)"
    p = c.dtctl("cancel", job)
    assert p.returncode == 0, p.stderr
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and gpu_pids() - before:
        time.sleep(0.5)
    left = gpu_pids() - before
    assert not left, "processes still on the GPU 30 s after dtctl cancel: %s" % sorted(left)
    st = json.loads(c.dtctl("show", "--json", job).stdout)["job"]
    assert st["state"] == "CANCELLED", st
