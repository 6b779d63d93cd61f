"""A real Slurm (Debian's 22.05) on the fake cluster: the fixture itself (tests/cluster/
fakeslurm through conftest's slurm_cluster), then dtctl's pieces that run under Slurm.
See docs/slurm.md."""

import re

import pytest


@pytest.fixture(scope="module")
def slurm(slurm_cluster):
    return slurm_cluster(2)


def test_srun_runs_on_both_nodes_with_gres_gpus(slurm):
    p = slurm.run(["srun", "-N", "2", "hostname"], user=True)
    assert p.returncode == 0, "srun -N 2 hostname: %s%s\n%s" % (p.stdout, p.stderr,
                                                              slurm.log("slurmctld.log"))
    assert sorted(p.stdout.split()) == ["dtnode1", "dtnode2"], p.stdout
    p = slurm.run(["srun", "-N", "2", "--ntasks-per-node=1", "--gres=gpu:2", "/bin/sh", "-c",
                   'echo "$(hostname) $(id -un) $CUDA_VISIBLE_DEVICES"'], user=True)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.splitlines()) == ["dtnode1 dttest 0,1", "dtnode2 dttest 0,1"], p.stdout
    # more GPUs than a node has: Slurm refuses at submit
    p = slurm.run(["srun", "-N", "1", "--gres=gpu:%d" % (slurm.gpus + 1), "true"], user=True)
    assert p.returncode != 0 and re.search(r"[Rr]equested node configuration is not available",
                                           p.stderr), p.stderr
