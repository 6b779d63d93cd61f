"""Jobs in container images (job.yaml container:, dtctl run -C, dtctl image), on the real
podman in the fake cluster (docs/containers.md).

Each fake node runs rootless podman as the cluster user with its own storage (the node's
private home), configured as ../shared/containers-here.md says: runc, cgroupfs, file
events, lowered default rlimits, host networking only (podman's default bridge,
10.88.0.0/16, would overlap the fake cluster's 10.88.0.0/24), and the host's cgroup
hierarchies mounted again inside each node (FAKECLUSTER_CGROUPS=1).  The image is a
static busybox root filesystem made here as a tarball (`podman import` form) in a
moment; each node loads it at its first job.  The nodes' fake GPUs get device nodes
(char 1:3, /dev/null's) in a directory the agents are pointed at, so a rank's container
shows which GPU devices it was given.
"""

import hashlib
import io
import json
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from conftest import HeadCluster

HEAD_PORT = 17991
AGENT_PORT = 17990
BUSYBOX = "/bin/busybox"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")

CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
netns = "host"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""

PROBE = ("echo IMAGE=$(cat /IMAGE_ID); echo RANK=$RANK LOCAL_RANK=$LOCAL_RANK "
         "WORLD_SIZE=$WORLD_SIZE MASTER_ADDR=$MASTER_ADDR; echo JOB=$DT_JOB_ID; "
         "echo IN=$container; echo CVD=$CUDA_VISIBLE_DEVICES; echo GLOO=$GLOO_SOCKET_IFNAME; "
         "echo DEVS=$(ls /dev | grep nvidia | tr '\\n' ' '); echo HOST=$(hostname); "
         "echo ADDR=$(ip -o -4 addr show eth0 | awk '{print $4}'); echo PWD=$(pwd); "
         "echo TMP=$(ls -A /tmp | wc -l)")


def rootfs_tar(marker, path, extra=()):
    """A root filesystem tarball (what `podman import` takes): busybox and its applets, /IMAGE_ID,
    and the (file, name in the image, mode) of `extra`, owned by root."""
    with tarfile.open(path, "w") as t:
        def add_dir(name):
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            t.addfile(ti)
        for d in ("bin", "tmp", "etc", "dev", "proc", "sys"):
            add_dir(d)
        t.add(BUSYBOX, "bin/busybox")
        for app in ("sh", "echo", "cat", "ls", "ip", "hostname", "sleep", "env", "pwd", "grep",
                    "tr", "awk", "wc", "id", "true", "sort"):
            ti = tarfile.TarInfo("bin/" + app)
            ti.type, ti.linkname = tarfile.SYMTYPE, "busybox"
            t.addfile(ti)
        for src, name, mode in extra:
            ti = t.gettarinfo(str(src), name)
            ti.mode, ti.uid, ti.gid, ti.uname, ti.gname = mode, 0, 0, "root", "root"
            with open(src, "rb") as f:
                t.addfile(ti, f)
        data = (marker + "\n").encode()
        ti = tarfile.TarInfo("IMAGE_ID")
        ti.size, ti.mode = len(data), 0o644
        t.addfile(ti, io.BytesIO(data))
    os.chmod(path, 0o644)
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


LB_C = r"""#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	/* block-buffered on a pipe, unless line_buffered works; said again each second
	 * until go (at most ~1.3 KB in the tests' 120 s, well under stdio's 4 KiB buffer), so
	 * a line lost before the engine's attach (once seen in CI under load) is not taken
	 * for a buffered one */
	for (int i = 0; argc > 1 && access(argv[1], F_OK); i++) {
		if (i % 50 == 0)
			printf("first line\n");
		usleep(20000);
	}
	printf("second line\n");
	return 0;
}
"""


def glibc_image(path, program, marker="glibc"):
    """busybox, a dynamically linked program at /bin/<its name> and the host's libraries it
    needs (ldd), at their paths: C stdio of the host's glibc in an image."""
    libs = re.findall(r"(/\S+\.so[.\d]*) \(0x", subprocess.check_output(["ldd", str(program)],
                                                                      text=True))
    return rootfs_tar(marker, path, extra=[(program, "bin/" + program.name, 0o755)] +
                      [(os.path.realpath(lib), lib.lstrip("/"), 0o755) for lib in libs])


def line_buffered_seen(f, go, timeout, diag=None):
    """What f (a process printing the LB_C program's output) shows: its first line must come
    while the program waits for go, which is made only then; the rest once f ends.  f is
    killed (its process group) if it is still there at the end.  diag(), if given, says
    what the node was doing when no line came (its processes, the engine's containers)."""
    seen = ""
    try:
        deadline = time.monotonic() + timeout
        while "first line" not in seen:
            if time.monotonic() >= deadline:
                pytest.fail("no line while the program runs: %r\n%s" % (seen, diag() if diag else ""))
            r, _, _ = select.select([f.stdout], [], [], 1)
            if r:
                line = f.stdout.readline()
                assert line, "the output ended: %r" % seen
                seen += line
        assert "second line" not in seen, seen
        go.write_text("")
        out, _ = f.communicate(timeout=timeout)
        seen += out
    finally:
        go.write_text("")
        if f.poll() is None:
            os.killpg(f.pid, signal.SIGKILL)   # f and what it started (start_new_session)
            f.communicate()
    assert "second line" in seen, seen
    return seen


def node_diag(cluster, i):
    """A node's process tree and the engine's containers, for a failure's message."""
    ps = cluster.fc.exec(i, "ps -o pid,ppid,stat,etimes,args --forest -u \"$(id -u)\"", user=True)
    ctr = cluster.podman(i, "ps", "-a", "--format", "{{.ID}} {{.Status}} {{.Command}}")
    return "processes on node %d:\n%s\npodman ps -a:\n%s%s" % (i, ps.stdout, ctr.stdout, ctr.stderr)


def unavailable():
    if os.geteuid() != 0:
        return "needs root (the fake cluster's netns mode)"
    if not shutil.which("podman") or not shutil.which("runc"):
        return "podman and runc are not installed (scripts/deps.sh installs them)"
    if not os.path.exists(BUSYBOX):
        return "no %s (busybox-static) for the test image" % BUSYBOX
    return None


class Ctx(HeadCluster):
    def __init__(self, fc, bin_dir, tmp):
        super().__init__(fc, bin_dir, tmp, HEAD_PORT, AGENT_PORT, gpus=4, tag="ctr",
                         dead_after_ms=3000, dtctl_timeout=180)
        self.devdir = Path(fc.shared) / "fakedev"

    def start_agent(self, i):
        """As HeadCluster's, with the fake GPUs' device nodes in DTAGENT_DEV_DIR."""
        n = self.fc.node(i)
        p = self.fc.exec(i, ["env", "DTAGENT_DEV_DIR=%s" % self.devdir, str(self.bin / "dtagent"),
                             "--home", self.agent_home(i), "--daemon", "--name", n.name,
                             "--bind", n.addr, "--port", str(self.port(i)), "--gpus",
                             str(self.gpus), "--heartbeat-ms", "300",
                             "--head", "%s:%d" % (self.fc.host_addr, self.head_port)], user=True)
        assert p.returncode == 0, "agent on %s: %s" % (n.name, p.stderr)

    def podman(self, i, *args):
        return self.fc.exec(i, ["podman"] + list(args), user=True)


@pytest.fixture(scope="module")
def cluster(fake_cluster, dtctl_bin, tmp_path_factory):
    why = unavailable()
    if why:
        pytest.skip(why)
    old = os.environ.get("FAKECLUSTER_CGROUPS")
    os.environ["FAKECLUSTER_CGROUPS"] = "1"
    try:
        fc = fake_cluster(2, mode="netns", fresh=True)
    finally:
        if old is None:
            os.environ.pop("FAKECLUSTER_CGROUPS", None)
        else:
            os.environ["FAKECLUSTER_CGROUPS"] = old
    p = fc.exec(1, "grep -q '^%s:' /etc/subuid || usermod --add-subuids 100000-165535 "
                "--add-subgids 100000-165535 %s" % (fc.user, fc.user))
    assert p.returncode == 0, p.stderr
    for i in range(1, fc.n + 1):
        p = fc.exec(i, "mkdir -p ~/.config/containers && cat > ~/.config/containers/"
                    "containers.conf <<'EOF'\n%sEOF\n" % CONTAINERS_CONF, user=True)
        assert p.returncode == 0, p.stderr
    ctx = Ctx(fc, dtctl_bin, tmp_path_factory.mktemp("ctr"))
    ctx.devdir.mkdir()
    for name, minor in [("nvidia%d" % g, 3) for g in range(4)] + [("nvidiactl", 3),
                                                                  ("nvidia-uvm", 3)]:
        os.mknod(ctx.devdir / name, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    img = Path(fc.shared) / "img"
    img.mkdir()
    os.chmod(img, 0o777)
    ctx.image = img / "bb.tar"
    ctx.digest = rootfs_tar("first", ctx.image)
    with ctx.running():
        yield ctx


def lines(out, key):
    """{rank: value} of the '[node rank] KEY=value' lines of an attached run."""
    return {int(m.group(1)): m.group(2)
            for m in re.finditer(r"^\[\S+ (\d+)\] %s=(.*)$" % key, out, re.M)}


def run(cluster, *args, timeout=180):
    t0 = time.monotonic()
    p = cluster.dtctl("run", *args, timeout=timeout)
    return p, time.monotonic() - t0


def test_two_nodes_two_ranks_in_image(cluster):
    proj = Path(cluster.fc.shared) / "proj"
    proj.mkdir(exist_ok=True)
    os.chmod(proj, 0o777)
    p = cluster.dtctl("run", "-n", 2, "-g", 2, "-C", cluster.image, "-e",
                      "GLOO_SOCKET_IFNAME=eth0", "--shell", "--", PROBE, cwd=str(proj))
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    # every rank ran in the image (its /IMAGE_ID, podman's container=podman)
    assert lines(p.stdout, "IMAGE") == {r: "first" for r in range(4)}, out
    assert lines(p.stdout, "IN") == {r: "podman" for r in range(4)}, out
    ranks = lines(p.stdout, "RANK")
    for r in range(4):
        assert ranks[r] == "%d LOCAL_RANK=%d WORLD_SIZE=4 MASTER_ADDR=%s" % (
            r, r % 2, cluster.fc.node(1).addr), (r, out)
    assert len(set(lines(p.stdout, "JOB").values())) == 1, out
    assert lines(p.stdout, "GLOO") == {r: "eth0" for r in range(4)}, out
    # the host's network: the node's own name and eth0 address inside the container
    hosts, addrs = lines(p.stdout, "HOST"), lines(p.stdout, "ADDR")
    for r in range(4):
        n = cluster.fc.node(1 + r // 2)
        assert hosts[r] == n.name and addrs[r] == n.addr + "/24", (r, hosts, addrs)
    # exactly the job's GPUs of the node (of its 4): their device nodes and the control
    # devices, renumbered from 0 inside
    job = re.search(r"job (\S+) submitted", p.stderr).group(1)
    j = cluster.show(job)
    gpus = {r["rank"]: r["gpus"] for r in j["ranks"]}
    devs = lines(p.stdout, "DEVS")
    for r in range(4):
        held = gpus[r].split(",")
        assert len(held) == 2, gpus
        assert devs[r].split() == sorted(["nvidia" + g for g in held] +
                                         ["nvidia-uvm", "nvidiactl"]), (r, devs, gpus)
    assert lines(p.stdout, "CVD") == {r: "0,1" for r in range(4)}, out
    # the submit dir at the same path, a private (empty) /tmp
    assert lines(p.stdout, "PWD") == {r: str(proj) for r in range(4)}, out
    assert lines(p.stdout, "TMP") == {r: "0" for r in range(4)}, out
    # loaded once per node, with a note in the log of the rank that loaded it
    assert len(re.findall(r"loaded image '%s' \(%s\)" % (re.escape(str(cluster.image)),
                                                          cluster.digest), out)) == 2, out
    assert j["spec"]["container"] == str(cluster.image), j["spec"]
    assert j["spec"]["container_digest"] == cluster.digest, j["spec"]
    shown = cluster.dtctl("show", job)
    assert "image:      %s (%s)" % (cluster.image, cluster.digest) in shown.stdout, shown.stdout
    # nothing left: the containers were removed
    for i in (1, 2):
        ps = cluster.podman(i, "ps", "-a", "--format", "{{.Names}}")
        assert ps.returncode == 0 and "dtctl-" not in ps.stdout, ps.stdout + ps.stderr


def test_second_job_uses_cached_image(cluster):
    """After the first test: both nodes have the image; no load, and the start is timed."""
    p, took = run(cluster, "-n", 2, "-p", 2, "-C", cluster.image, "--", "cat", "/IMAGE_ID")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "loaded image" not in p.stdout + p.stderr, p.stdout + p.stderr
    assert p.stdout.count("] first") == 4, p.stdout
    bare, took_bare = run(cluster, "-n", 2, "-p", 2, "--", "true")
    assert bare.returncode == 0, bare.stdout + bare.stderr
    print("cached image job: %.2f s, the same job bare: %.2f s" % (took, took_bare))


def test_image_removed_from_the_engine_is_loaded_again(cluster):
    """A warm node starts ranks without asking podman whether it has the image: the agent
    notes where podman's store keeps it (images/<hex>.loaded); once `podman rmi` has removed
    it there, the next job loads it again instead of failing."""
    hexd = cluster.digest[len("sha256:"):]
    p, _ = run(cluster, "-n", 2, "-p", 1, "-C", cluster.image, "--", "cat", "/IMAGE_ID")
    assert p.returncode == 0, p.stdout + p.stderr
    for i in (1, 2):
        marker = Path(cluster.agent_home(i)) / "images" / ("%s.loaded" % hexd)
        store = cluster.fc.exec(i, ["cat", str(marker)], user=True)
        assert store.returncode == 0 and store.stdout.startswith("/"), store.stdout + store.stderr
        there = cluster.fc.exec(i, ["test", "-d", store.stdout.strip()], user=True)
        assert there.returncode == 0, store.stdout
        rmi = cluster.podman(i, "rmi", "--force", "localhost/dtctl-image:" + hexd)
        assert rmi.returncode == 0, rmi.stdout + rmi.stderr
    p, _ = run(cluster, "-n", 2, "-p", 1, "-C", cluster.image, "--", "cat", "/IMAGE_ID")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert p.stdout.count("] first") == 2, out
    assert out.count("loaded image") == 2, out


def test_submit_dir_the_nodes_cannot_enter(cluster, tmp_path):
    """Submitted from a directory the agents cannot enter (a 0700 home, as a clone under
    /root): the ranks start in the image's / (the agent's note says why) instead of podman
    failing to mount the directory ("statfs ...: permission denied", exit 125)."""
    priv = Path(tempfile.mkdtemp(prefix="dtctl-0700-", dir="/var/tmp"))
    try:
        os.chmod(priv, 0o700)   # root's; the agents run as the cluster user
        p = cluster.dtctl("run", "-n", 2, "-p", 1, "-C", cluster.image, "--", "cat", "/IMAGE_ID",
                          cwd=str(priv), timeout=180)
        out = p.stdout + p.stderr
        assert p.returncode == 0 and p.stdout.count("] first") == 2, out
        assert "statfs" not in out, out
    finally:
        shutil.rmtree(priv, ignore_errors=True)


def test_changed_image_is_reloaded(cluster):
    img = Path(cluster.fc.shared) / "img" / "changing.tar"
    d1 = rootfs_tar("v1", img)
    p, _ = run(cluster, "-n", 2, "-p", 1, "-C", img, "--", "cat", "/IMAGE_ID")
    assert p.returncode == 0 and p.stdout.count("] v1") == 2, p.stdout + p.stderr
    d2 = rootfs_tar("v2", img)
    assert d2 != d1
    p, _ = run(cluster, "-n", 2, "-p", 1, "-C", img, "--", "cat", "/IMAGE_ID")
    out = p.stdout + p.stderr
    assert p.returncode == 0 and p.stdout.count("] v2") == 2, out
    assert len(re.findall(r"loaded image '%s' \(%s\)" % (re.escape(str(img)), d2), out)) == 2, out


def container_procs(job):
    """Processes of job anywhere on the machine (no pid namespace): by DT_JOB_ID."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path("/proc/%s/environ" % pid).read_bytes().split(b"\0")
        except OSError:
            continue
        if ("DT_JOB_ID=%s" % job).encode() in env:
            found.append(pid)
    return found


def test_cancel_leaves_no_container_and_no_process(cluster):
    p = cluster.dtctl("run", "-d", "-n", 2, "-p", 1, "-C", cluster.image, "--", "sleep", "1000")
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    cluster.wait_job(job, ("RUNNING",))
    deadline = time.time() + 60
    while True:   # both ranks' sleep runs in its container
        names = [cluster.podman(i, "ps", "--format", "{{.Names}}").stdout for i in (1, 2)]
        if all("dtctl-" in n for n in names) and len(container_procs(job)) >= 2:
            break
        assert time.time() < deadline, names
        time.sleep(0.2)
    c = cluster.dtctl("cancel", job)
    assert c.returncode == 0, c.stderr
    j = cluster.wait_job(job, FINAL)
    assert j["state"] == "CANCELLED", j
    assert all(r["state"] in ("exited", "killed", "failed") for r in j["ranks"]), j["ranks"]
    # dtsched ends the job at once; each rank's supervisor then stops podman, the
    # container's processes and podman's helpers within the grace, removes the
    # container, and only then records its task final: from there nothing may be left
    def task_states(i):
        p = cluster.fc.exec(i, "for f in %s/tasks/%s.*.json; do tr -d '\\n' < \"$f\"; echo; done"
                            % (cluster.agent_home(i), job), user=True)
        return [json.loads(l)["state"] for l in p.stdout.splitlines() if l.strip()]
    deadline = time.time() + 30
    while not all(task_states(i) and all(st in ("exited", "failed") for st in task_states(i))
                  for i in (1, 2)):
        assert time.time() < deadline, [task_states(i) for i in (1, 2)]
        time.sleep(0.1)
    left = container_procs(job)
    assert left == [], [(pid, Path("/proc/%s/cmdline" % pid).read_bytes()) for pid in left]
    for i in (1, 2):
        ps = cluster.podman(i, "ps", "-a", "--format", "{{.Names}}")
        assert ps.returncode == 0 and "dtctl-" not in ps.stdout, ps.stdout + ps.stderr


def test_node_without_podman_fails_fast_naming_it(cluster):
    # podman gone from node 2 only (its own mount namespace): /dev/null over the program
    m = cluster.fc.exec(2, "mount --bind /dev/null /usr/bin/podman")
    assert m.returncode == 0, m.stderr
    try:
        p, took = run(cluster, "-n", 2, "-p", 1, "-C", cluster.image, "--", "true")
    finally:
        cluster.fc.exec(2, "umount /usr/bin/podman")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert re.search(r"cannot start rank \d on node '%s': no container engine: podman is not in "
                     "PATH" % cluster.fc.node(2).name, out), out
    assert took < 30, took


def test_image_import_list_rm(cluster):
    src = Path(cluster.fc.shared) / "img" / "src.tar"
    digest = rootfs_tar("imported", src)
    p = cluster.dtctl("image", "import", src, "bb", "--json")
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)["image"]
    assert rec["digest"] == digest and rec["name"] == "bb", rec
    p, _ = run(cluster, "-n", 2, "-p", 1, "-C", "bb", "--", "cat", "/IMAGE_ID")
    assert p.returncode == 0 and p.stdout.count("] imported") == 2, p.stdout + p.stderr
    lst = json.loads(cluster.dtctl("image", "list", "--json").stdout)["images"]
    assert [(i["name"], i["digest"], i["cached_on"]) for i in lst] == \
        [("bb", digest, sorted(n.name for n in cluster.fc.nodes))], lst
    p = cluster.dtctl("image", "rm", "bb", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["removed"][0]["digest"] == digest, p.stderr
    assert json.loads(cluster.dtctl("image", "list", "--json").stdout)["images"] == []
    assert cluster.dtctl("image", "rm", "bb").returncode == 2


def test_bad_container_values_are_refused(cluster, tmp_path):
    y = tmp_path / "job.yaml"
    y.write_text("command: [true]\ncontainer: --privileged\n")
    p = cluster.dtctl("validate", y)
    assert p.returncode == 2 and re.search(r"job.yaml:2:\d+: key 'container'", p.stderr), p.stderr
    # a file outside the shared dir: the nodes could not read it
    outside = tmp_path / "x.tar"
    rootfs_tar("x", outside)
    p = cluster.dtctl("run", "-n", 1, "-C", outside, "--", "true")
    assert p.returncode == 2 and "is not below the shared dir" in p.stderr, p.stderr
    # a symlink on the shared dir is never followed
    link = Path(cluster.fc.shared) / "img" / "link.tar"
    link.symlink_to(cluster.image)
    p = cluster.dtctl("run", "-n", 1, "-C", link, "--", "true")
    assert p.returncode == 2 and "symbolic link" in p.stderr, p.stderr


def test_sweep_trials_share_the_image_loaded_once_per_node(cluster):
    img = Path(cluster.fc.shared) / "img" / "sweep.tar"
    digest = rootfs_tar("sweep", img)
    proj = Path(cluster.fc.shared) / "sweep-proj"
    proj.mkdir()
    os.chmod(proj, 0o777)
    (proj / "trial.sh").write_text(
        'echo "DTCTL_METRIC {\\"loss\\": $DT_PARAM_X, \\"img\\": \\"$(cat /IMAGE_ID)\\"}"\n')
    (proj / "sweep.yaml").write_text(
        "method: grid\nmetric: {name: loss, goal: minimize}\n"
        "parameters:\n  x: {values: [1, 2, 3, 4, 5, 6]}\n"
        "job: {name: ctr-trial, procs_per_node: 1, container: ./../img/sweep.tar,\n"
        "      command: [sh, trial.sh]}\n")
    p = cluster.dtctl("sweep", "sweep.yaml", cwd=str(proj), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    sid = json.loads(cluster.dtctl("sweep", "list", "--json").stdout)["sweeps"][-1]["id"]
    trials = json.loads(cluster.dtctl("sweep", "export", "--json", sid).stdout)["trials"]
    assert [t["state"] for t in trials] == ["COMPLETED"] * 6, trials
    assert {t["metrics"][0]["img"] for t in trials} == {"sweep"}, trials
    # six trials, at most one load per node (the digest, taken once at submission)
    loads = [l for f in Path(cluster.fc.shared, "jobs").glob("*/logs/*.log")
             for l in f.read_text(errors="replace").splitlines()
             if "loaded image '%s' (%s)" % (img, digest) in l]
    assert 1 <= len(loads) <= 2, loads


MPI_HELLO = r"""
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	int rank, size, one, sum = 0;
	char host[256] = "";

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	gethostname(host, sizeof(host) - 1);
	one = rank + 1;
	MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	printf("MPI=%d/%d %s sum %d\n", rank, size, host, sum);
	MPI_Finalize();
	return 0;
}
"""


def mpi_image(path, programs):
    """An image holding programs ({path in the image: file}) with the node's own Open MPI
    (the same version the host's orted speaks): the programs, the ldd closure of them and
    of Open MPI's and PMIx's plugins, those plugin dirs, /etc/openmpi, busybox.  About
    40 MB for an MPI hello, made in a second."""
    dirs = [d for d in ("/usr/lib/x86_64-linux-gnu/openmpi", "/usr/lib/x86_64-linux-gnu/pmix2",
                        "/etc/openmpi") if os.path.isdir(d)]
    objs = [str(f) for f in programs.values()] + \
        [str(f) for d in dirs for f in Path(d).rglob("*.so*")]
    libs = set()
    for o in objs:
        out = subprocess.run(["ldd", o], capture_output=True, text=True).stdout
        libs |= set(re.findall(r"=> (/\S+)", out)) | set(re.findall(r"^\s+(/\S+) \(", out, re.M))
    with tarfile.open(path, "w") as t:
        for d in ("bin", "tmp", "etc", "dev", "proc", "sys", "usr/bin"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            t.addfile(ti)
        t.add(BUSYBOX, "bin/busybox")
        ti = tarfile.TarInfo("bin/sh")
        ti.type, ti.linkname = tarfile.SYMTYPE, "busybox"
        t.addfile(ti)
        for where, f in programs.items():
            t.add(str(f), where.lstrip("/"))
        for lib in sorted(libs):
            t.add(os.path.realpath(lib), lib.lstrip("/"))
        for d in dirs:
            t.add(d, d.lstrip("/"))
    os.chmod(path, 0o644)


def test_mpi_job_in_image_with_the_hosts_orted(cluster, tmp_path):
    if not shutil.which("mpicc"):
        pytest.skip("no mpicc (libopenmpi-dev) to build the image's MPI program")
    img = Path(cluster.fc.shared) / "img" / "mpi.tar"
    (tmp_path / "hello.c").write_text(MPI_HELLO)
    subprocess.run(["mpicc", "-o", str(tmp_path / "mpi_hello"), str(tmp_path / "hello.c")],
                   check=True)
    mpi_image(img, {"/usr/bin/mpi_hello": tmp_path / "mpi_hello"})
    p, took = run(cluster, "-n", 2, "-p", 2, "--launcher", "mpi", "-C", img, "--",
                  "/usr/bin/mpi_hello", timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    got = sorted(re.findall(r"MPI=(\d)/4 (\S+) sum 10", p.stdout))
    assert got == [("0", "dtnode1"), ("1", "dtnode1"), ("2", "dtnode2"), ("3", "dtnode2")], out
    # the program is the image's: not on the nodes themselves
    assert not os.path.exists("/usr/bin/mpi_hello")
    for i in (1, 2):
        ps = cluster.podman(i, "ps", "-a", "--format", "{{.Names}}")
        assert ps.returncode == 0 and "dtctl-" not in ps.stdout, ps.stdout + ps.stderr


def test_mpi_rank_line_buffered_in_image(cluster, tmp_path):
    """line_buffered on the mpi launcher's path (dtshim rank-log starts the engine): a C
    program's stdout in the image reaches the attached run at each newline.  The program
    prints a line, then waits for a file that the test makes only once that line is shown."""
    (tmp_path / "lb.c").write_text(LB_C)
    subprocess.run(["cc", "-O", "-o", tmp_path / "lbprobe", tmp_path / "lb.c"], check=True)
    img = Path(cluster.fc.shared) / "img" / "glibc.tar"
    glibc_image(img, tmp_path / "lbprobe")
    go = Path(cluster.fc.shared) / "img" / "lb-go"
    f = subprocess.Popen([str(cluster.bin / "dtctl"), "run", "-n", "1", "-p", "1", "--launcher",
                          "mpi", "--line-buffered", "-C", str(img), "--", "/bin/lbprobe", str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=cluster.env, stdin=subprocess.DEVNULL, start_new_session=True)
    line_buffered_seen(f, go, 120, diag=lambda: node_diag(cluster, 1))
    assert f.returncode == 0


def test_builtin_trainer_from_an_image(cluster, dtctl_bin):
    """dttrain as the image has it (not the node's ~/.dtctl/bin), under the mpi launcher."""
    dttrain = Path(dtctl_bin) / "dttrain"
    linked = subprocess.run(["ldd", str(dttrain)], capture_output=True, text=True).stdout
    if "libcudart" in linked or "libnccl" in linked:
        pytest.skip("this dttrain links CUDA (~800 MB of libraries for its image); a CPU-only "
                    "build (NO_CUDA=1, BUILD=asan) runs this test")
    img = Path(cluster.fc.shared) / "img" / "trainer.tar"
    mpi_image(img, {"/usr/bin/dttrain": dttrain})
    p, _ = run(cluster, "-n", 2, "-p", 2, "--launcher", "mpi", "-C", img, "--trainer", "--",
               "--model=mlp", "--hidden=32", "--steps=6", "--train-size=512", "--val-size=64",
               "--log-every=2", timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "COMPLETED" in p.stderr, out
    assert "done:" in p.stdout, out
    job = re.search(r"job (\S+) submitted", p.stderr).group(1)
    plan = json.loads((Path(cluster.show(job)["job_dir"]) / "plan.json").read_text())
    argv = plan["tasks"][0]["argv"]
    assert "dttrain" in argv and not any(a.endswith("/dttrain") for a in argv), argv
