"""The network interface found for you (docs/run.md, "Network interface").

Three fake nodes whose hostnames resolve nowhere (each node's UTS hostname is changed to
a name in no /etc/hosts and no DNS), and a cluster.yaml with no `network:` setting: the
case where gloo binds to 127.0.0.1 ("Unable to resolve hostname to a (local) address.
Using the loopback address as fallback") and the ranks on other nodes are refused.

  - every agent reports the interface it reaches dtsched on (`net` in its inventory);
  - a torch.distributed gloo all-reduce over 3 nodes x 1 rank (Debian's python3-torch,
    backend gloo, init env://) completes with the right sum, because every rank gets
    GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME = its node's interface;
  - a job's own GLOO_SOCKET_IFNAME wins over the found one;
  - an mpi job gets Open MPI's btl/oob_tcp_if_include = the nodes' subnet, and an
    MPI all-reduce over the three nodes (dttrain's) completes.
"""

import json
import re

import pytest

from conftest import HeadCluster, have_python_module

HEAD_PORT = 18171
AGENT_PORT = 18170
ALLREDUCE = r'''
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("SUM rank=%d sum=%g if=%s" % (dist.get_rank(), t.item(), os.environ.get("GLOO_SOCKET_IFNAME")), flush=True)
dist.destroy_process_group()
'''


def have_torch():
    return have_python_module("torch.distributed")


class Ctx(HeadCluster):
    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=0, tag="netif",
                         dead_after_ms=3000)


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    fc = fake_cluster(3)
    if fc.mode != "netns":
        pytest.skip("needs netns nodes (own hostname and interface); this is %s" % fc.mode)
    ctx = Ctx(fc, dtctl_bin, tmp_path_factory.mktemp("netif"))
    names = {}
    for i in range(1, fc.n + 1):
        names[i] = fc.exec(i, ["hostname"]).stdout.strip()
        p = fc.exec(i, ["hostname", "unresolvable-%d.invalid" % i])
        assert p.returncode == 0, p.stderr
        r = fc.exec(i, ["getent", "hosts", "unresolvable-%d.invalid" % i])
        assert r.returncode != 0, "the test needs hostnames that do not resolve: %s" % r.stdout
    try:
        with ctx.running():
            yield ctx
    finally:
        for i, n in names.items():
            fc.exec(i, ["hostname", n])


def test_agents_report_their_interface(cluster):
    for n in cluster.fc.nodes:
        p = cluster.dtctl("api", "GET", "/v1/nodes/%s" % n.name)
        assert p.returncode == 0, p.stderr
        node = json.loads(p.stdout)["node"]
        p = cluster.dtctl("api", "--agent", "%s:%d" % (n.addr, cluster.port(
            cluster.fc.nodes.index(n) + 1)), "GET", "/v1/inventory")
        assert p.returncode == 0, p.stdout + p.stderr
        net = json.loads(p.stdout)["net"]
        assert net["address"] == n.addr, (net, n.addr)
        assert net["interface"] and net["interface"] != "lo", net
        assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+/\d+", net["cidr"]), net
        assert node["state"] == "UP"


@pytest.mark.skipif(not have_torch(), reason="python3-torch not installed (make deps)")
def test_gloo_allreduce_across_unresolvable_nodes(cluster):
    script = cluster.shared_file("netif", "allreduce.py", ALLREDUCE)
    p = cluster.dtctl("run", "-n", 3, "-p", 1, "--timeout", "90s", "--name", "gloo",
                      "--", "/usr/bin/python3", script, timeout=150)
    assert p.returncode == 0, p.stdout + p.stderr
    sums = {int(m.group(1)): (m.group(2), m.group(3))
            for m in re.finditer(r"SUM rank=(\d+) sum=(\S+) if=(\S+)", p.stdout)}
    assert sorted(sums) == [0, 1, 2], p.stdout + p.stderr
    for r, (s, iface) in sums.items():
        assert s == "6", (r, s)
        assert iface not in ("None", "lo"), (r, iface)

    # the job's own setting wins (a wrong one: the job must fail, not be "fixed")
    p = cluster.dtctl("run", "-n", 1, "-p", 1, "-e", "GLOO_SOCKET_IFNAME=mine0", "--",
                      "sh", "-c", "echo IF=$GLOO_SOCKET_IFNAME NCCL=$NCCL_SOCKET_IFNAME",
                      timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(r"IF=(\S+) NCCL=(\S*)", p.stdout)
    assert m and m.group(1) == "mine0" and m.group(2) not in ("", "lo"), p.stdout


def test_mpi_gets_the_subnet(cluster):
    p = cluster.dtctl("run", "--dry-run", "--json", "-n", 3, "-p", 1, "--launcher", "mpi",
                      "--", "true")
    assert p.returncode == 0, p.stdout + p.stderr
    argv = json.loads(p.stdout)["plan"]["tasks"][0]["argv"]
    inc = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "btl_tcp_if_include"]
    assert inc and re.fullmatch(r"10\.88\.\d+\.\d+/\d+", inc[0]), argv
    # and real MPI all-reduces over the three nodes (dttrain's gradients) run on it
    p = cluster.dtctl("run", "-n", 3, "-p", 1, "--launcher", "mpi", "--timeout", "90s",
                      "--trainer", "--", "--model=mlp", "--hidden=16", "--steps=4",
                      "--train-size=256", "--val-size=32", "--log-every=2", timeout=150)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "COMPLETED" in p.stderr, p.stderr


def test_failed_rank_named_by_node_not_hostname(cluster):
    """An mpi rank's failure names the node as dtctl knows it (node 2), not the host's
    own name (which here is unresolvable-2.invalid)."""
    p = cluster.dtctl("run", "-n", 3, "-p", 1, "--launcher", "mpi", "--shell", "--timeout",
                      "60s", "--", 'sleep 1; [ "$OMPI_COMM_WORLD_RANK" != 1 ] || exit 3',
                      timeout=120)
    assert p.returncode != 0, p.stdout + p.stderr
    node2 = cluster.fc.node(2).name
    assert "rank 1 on %s" % node2 in p.stderr, p.stderr
    assert "unresolvable" not in p.stderr, p.stderr
