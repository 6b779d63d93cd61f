"""Containers in team mode (docs/team.md "Containers in team mode", docs/containers.md): the
agent (root) runs root's podman, and the rank runs in the image as the job's owner (their uid,
gid and groups), with no capabilities and no_new_privs, only the shared dir mounted, the
image file read with the owner's ids, and the job's variables kept out of root's podman.

Real Unix users (test_team's) on a one-node team-mode cluster on this machine, root's podman
with a private containers.conf and image store; the image is test_container's busybox root
plus a setuid-root program that prints its effective uid.  The same cluster also runs what
any image needs and is cheaper to check here than in test_container's fake cluster:
`line_buffered` in an image and squashfs images."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from test_container import (CONTAINERS_CONF, LB_C, glibc_image, line_buffered_seen, rootfs_tar,
                            unavailable)
from test_team import ALICE, BOB, as_user, raw, team_cluster, users  # noqa: F401 (fixture)

GROUP = "dtt-ctrgrp"
EUID_C = ('#include <stdio.h>\n#include <unistd.h>\n'
          'int main(void) { printf("EUID=%d\\n", (int)geteuid()); return 0; }\n')


@pytest.fixture(scope="module")
def team_ctr(users, dtctl_bin, tmp_path_factory):   # noqa: F811
    """A team-mode cluster whose agent has root's podman (private store), and the images:
    a public one (0644) and bob's own (0600, his)."""
    why = unavailable()
    if why:
        pytest.skip(why)
    if not shutil.which("cc"):
        pytest.skip("no C compiler for the setuid probe")
    # a supplementary group of alice's, opening a file to her rank only through --group-add
    subprocess.run(["groupdel", GROUP], capture_output=True)
    subprocess.run(["groupadd", GROUP], check=True)
    subprocess.run(["usermod", "-a", "-G", GROUP, ALICE], check=True)
    store = Path(tempfile.mkdtemp(prefix="dtt-ctr-", dir="/var/tmp"))
    (store / "containers.conf").write_text(CONTAINERS_CONF)
    (store / "storage.conf").write_text('[storage]\ndriver = "overlay"\ngraphroot = "%s/graph"\n'
                                        'runroot = "%s/run"\n' % (store, store))
    env = {"CONTAINERS_CONF": str(store / "containers.conf"),
           "CONTAINERS_STORAGE_CONF": str(store / "storage.conf")}
    try:
        with team_cluster(dtctl_bin, tmp_path_factory.mktemp("tctr"), env=env) as c:
            c.podman_env = dict(os.environ, **env)
            img = c.shared / "img"
            img.mkdir(mode=0o755)
            # the public image: busybox, and a setuid-root program (cc -static)
            work = Path(tempfile.mkdtemp(dir=store))
            (work / "euid.c").write_text(EUID_C)
            subprocess.run(["cc", "-static", "-O", "-o", work / "euid", work / "euid.c"],
                           check=True)
            c.image = img / "bb.tar"
            c.digest = rootfs_tar("team", c.image, extra=[(work / "euid", "bin/euid", 0o4755)])
            # bob's: his alone
            bdir = c.shared / BOB
            bdir.mkdir(mode=0o755)
            c.bob_image = bdir / "bob.tar"
            c.bob_digest = rootfs_tar("bobs", c.bob_image)
            (bdir / "secret").write_text("bob's secret\n")
            for f in (bdir, c.bob_image, bdir / "secret"):
                shutil.chown(f, BOB, BOB)
            os.chmod(c.bob_image, 0o600)
            os.chmod(bdir / "secret", 0o600)
            adir = c.shared / ALICE
            adir.mkdir(mode=0o700)
            shutil.chown(adir, ALICE, ALICE)
            c.alice_dir = adir
            gdir = c.shared / "grp"
            gdir.mkdir(mode=0o755)
            (gdir / "note").write_text("for the group\n")
            shutil.chown(gdir / "note", "root", GROUP)
            os.chmod(gdir / "note", 0o640)
            c.group_file = gdir / "note"
            yield c
    finally:
        subprocess.run(["groupdel", GROUP], capture_output=True)
        subprocess.run(["podman", "rmi", "-a", "-f"], capture_output=True, env=dict(
            os.environ, **env))
        shutil.rmtree(store, ignore_errors=True)


def ranks_out(c, user, job):
    p = as_user(c, user, "logs", job)
    return p.stdout + p.stderr


def wait_final(c, job, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        j = json.loads(c.dtctl("show", "--json", job).stdout)["job"]
        if j["state"] in ("COMPLETED", "FAILED", "CANCELLED"):
            return j
        assert time.monotonic() < deadline, j
        time.sleep(0.2)


def test_rank_in_image_runs_as_its_owner(team_ctr):
    """alice's rank in root's podman: her uid, gid and groups; a setuid-root file in the image
    gives nothing (no_new_privs); what it writes on the shared dir is hers; bob's 0600 file
    stays unreadable; her job's variables reach the rank but not root's podman."""
    c = team_ctr
    import grp
    import pwd
    pw = pwd.getpwnam(ALICE)
    groups = sorted(set([pw.pw_gid] + [g.gr_gid for g in grp.getgrall() if ALICE in g.gr_mem]))
    assert grp.getgrnam(GROUP).gr_gid in groups, groups
    script = ("echo ID=$(id -u):$(id -g):$(id -G | tr ' ' '\\n' | sort -n | tr '\\n' ' '). ; "
              "/bin/euid; echo hi > %s/out; cat %s/secret 2>/dev/null || echo NOREAD; "
              "cat %s || echo NOGROUP; "
              "echo MINE=$MINE; echo IMAGE=$(cat /IMAGE_ID); echo PWD=$(pwd)"
              % (c.alice_dir, c.shared / BOB, c.group_file))
    p = as_user(c, ALICE, "run", "--json", "-d", "-C", c.image, "-w", c.alice_dir,
                "-e", "MINE=x y", "-e", "LD_PRELOAD=/nonexistent/evil.so",
                "--shell", "--", script, timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    job = json.loads(p.stdout)["job"]["id"] if "job" in json.loads(p.stdout) else \
        json.loads(p.stdout)["id"]
    j = wait_final(c, job, 120)
    out = ranks_out(c, ALICE, job)
    assert j["state"] == "COMPLETED", (j, out)
    assert "ID=%d:%d:%s ." % (pw.pw_uid, pw.pw_gid, " ".join(str(g) for g in groups)) in out, out
    assert "for the group" in out and "NOGROUP" not in out, out
    assert "EUID=%d" % pw.pw_uid in out, out
    assert "IMAGE=team" in out and "MINE=x y" in out, out
    assert "PWD=%s" % c.alice_dir in out, out
    assert "NOREAD" in out and "bob's secret" not in out, out
    st = (c.alice_dir / "out").stat()
    assert (st.st_uid, st.st_gid) == (pw.pw_uid, pw.pw_gid), st
    # nothing of the job's environment in root's podman's: its LD_PRELOAD would be loaded
    # into podman, as root, and ld.so would say it cannot preload this one
    assert "cannot be preloaded" not in out, out
    # the variables' file is gone with the task
    assert not list(Path(c.home).glob("**/ctr-env/*.env")), list(Path(c.home).glob("**/*.env"))


def test_a_dir_outside_the_shared_dir_is_not_mounted(team_ctr):
    """root's podman would mount what the user could not reach: only the shared dir is
    mounted, a workdir elsewhere starts the rank in the image's '/', and one she cannot
    enter fails the rank."""
    c = team_ctr
    p = as_user(c, ALICE, "run", "-C", c.image, "-w", "/tmp", "--shell", "--",
                "echo PWD=$(pwd)", timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "PWD=/\n" in out or out.rstrip().endswith("PWD=/"), out
    assert "'/tmp' is not on the shared dir: in team mode only the shared dir is mounted" in out, \
        out
    # a workdir on the shared dir that she cannot enter (bob's 0700): refused as without an
    # image, although root's podman could have entered it
    priv = c.shared / BOB / "private"
    priv.mkdir(mode=0o700, exist_ok=True)
    shutil.chown(priv, BOB, BOB)
    p = as_user(c, ALICE, "run", "-C", c.image, "-w", priv, "--", "ls", timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 127, out      # the rank's, as for any rank that cannot start
    assert "cannot start: %s: Permission denied" % priv in out, out


def forge(c, user, image, digest):
    """A submit (not through dtctl, which reads and hashes the file) naming image, digest."""
    body = json.dumps({"job": {"name": "forged", "command": ["true"], "container": str(image),
                               "container_digest": digest}, "shared_dir": str(c.shared)})
    status, reply = raw(c, user, "POST", "/v1/jobs", body)
    assert status.startswith("HTTP/1.1 201"), (status, reply)
    return json.loads(reply)["job"]["id"]


def test_another_users_image_is_not_theirs(team_ctr):
    """bob's image (his 0600 file), loaded by his job: alice can neither name his file nor
    claim its digest for a file of her own; nor run an engine name (root's images)."""
    c = team_ctr
    p = as_user(c, BOB, "run", "-C", c.bob_image, "-w", c.shared / BOB, "--", "cat",
                "/IMAGE_ID", timeout=120)
    assert p.returncode == 0 and "bobs" in p.stdout, (p.stdout, p.stderr)
    # his file, with his digest: the agent reads it as alice
    j = wait_final(c, forge(c, ALICE, c.bob_image, c.bob_digest))
    assert j["state"] == "FAILED", j
    assert "cannot read the image file '%s' as the job's user" % c.bob_image in j["reason"], j
    assert "Permission denied" in j["reason"], j
    # her own file, claiming bob's digest (which the node has): hashed, refused
    mine = c.alice_dir / "mine.tar"
    rootfs_tar("alices", mine)
    shutil.chown(mine, ALICE, ALICE)
    j = wait_final(c, forge(c, ALICE, mine, c.bob_digest))
    assert j["state"] == "FAILED", j
    assert "the image file '%s' changed since the job was submitted" % mine in j["reason"], j
    # by name, root's podman would run any image it has
    p = as_user(c, ALICE, "run", "-C", "localhost/dtctl-image:" + c.bob_digest[7:], "--",
                "true", timeout=60)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "in team mode a container image must be a file on the shared dir" in p.stderr, \
        p.stderr

    # nor an mpi job in an image: orted starts its ranks as the user, who has no engine
    p = as_user(c, ALICE, "run", "--launcher", "mpi", "-C", c.image, "--", "true", timeout=60)
    assert p.returncode != 0, (p.stdout, p.stderr)
    assert "an mpi job does not run in an image in team mode" in p.stderr, p.stderr


def test_an_image_name_resolves_only_through_files_of_yours_or_roots(team_ctr):
    """`-C NAME` is <shared>/images/NAME.json (its digest) and NAME.image.  bob made
    images/ (his, 0777: the first to import, say) and put a pytorch record there, or
    swapped alice's own for his (a directory's owner may): alice's `-C pytorch` once ran
    bob's image as alice (his code, her files).  A name now resolves only through a
    directory and files of the user's own or root's; bob's are refused, naming him."""
    c = team_ctr
    images = c.shared / "images"      # root's, made when a node marked a cached image
    images.mkdir(mode=0o755, exist_ok=True)
    was = images.stat()
    try:
        shutil.chown(images, BOB, BOB)
        os.chmod(images, 0o777)
        shutil.copyfile(c.bob_image, images / "pytorch.image")
        (images / "pytorch.json").write_text(json.dumps(
            {"name": "pytorch", "digest": c.bob_digest, "size": 1}))
        for f in ("pytorch.image", "pytorch.json"):
            shutil.chown(images / f, BOB, BOB)
            os.chmod(images / f, 0o644)
        p = as_user(c, ALICE, "run", "-C", "pytorch", "-w", c.alice_dir, "--", "cat",
                    "/IMAGE_ID", timeout=120)
        assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
        assert "bobs" not in p.stdout, p.stdout
        assert "'%s' belongs to %s" % (images, BOB) in p.stderr, p.stderr
        # the same files in a directory of root's, bob's record: still not alice's to trust
        shutil.chown(images, "root", "root")
        os.chmod(images, 0o755)
        p = as_user(c, ALICE, "run", "-C", "pytorch", "--", "true", timeout=60)
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert "'%s/pytorch.json' belongs to %s" % (images, BOB) in p.stderr, p.stderr
        # root's (an admin's import) resolve for everyone
        for f in ("pytorch.image", "pytorch.json"):
            shutil.chown(images / f, "root", "root")
        shutil.copyfile(c.image, images / "pytorch.image")
        (images / "pytorch.json").write_text(json.dumps(
            {"name": "pytorch", "digest": c.digest, "size": 1}))
        p = as_user(c, ALICE, "run", "-C", "pytorch", "-w", c.alice_dir, "--", "cat",
                    "/IMAGE_ID", timeout=120)
        assert p.returncode == 0 and "team" in p.stdout, (p.stdout, p.stderr)
    finally:
        for f in ("pytorch.image", "pytorch.json"):
            (images / f).unlink(missing_ok=True)
        os.chown(images, was.st_uid, was.st_gid)
        os.chmod(images, was.st_mode & 0o7777)


def test_line_buffered_in_image(team_ctr, tmp_path):
    """line_buffered: a C program's stdout in the image reaches `logs -f` at each newline (the
    node's libstdbuf mounted in and preloaded).  The program prints a line, then waits for a
    file that the test makes only once `logs -f` has shown that line."""
    c = team_ctr
    (tmp_path / "lb.c").write_text(LB_C)
    subprocess.run(["cc", "-O", "-o", tmp_path / "lbprobe", tmp_path / "lb.c"], check=True)
    img = c.shared / "img" / "glibc.tar"
    glibc_image(img, tmp_path / "lbprobe")
    go = c.alice_dir / "lb-go"
    p = as_user(c, ALICE, "run", "-d", "--json", "--line-buffered", "-C", img, "-w", c.alice_dir,
                "--", "/bin/lbprobe", go, timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    job = json.loads(p.stdout)["job"]["id"] if "job" in json.loads(p.stdout) else \
        json.loads(p.stdout)["id"]
    f = subprocess.Popen(["runuser", "-u", ALICE, "--", str(c.exe), "-c", str(c.public), "logs",
                          "-f", job], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         stdin=subprocess.DEVNULL, cwd="/", start_new_session=True,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NO_COLOR": "1",
                              "HOME": "/nonexistent", "DTCTL_NO_SYSTEMD": "1"})
    line_buffered_seen(f, go, 60)
    assert wait_final(c, job)["state"] == "COMPLETED"


def test_squashfs_image(team_ctr, tmp_path):
    """A squashfs image (enroot's kind, made here with mksquashfs): the node converts it
    (sqfs2tar) and loads it once, cached by its digest like a tarball."""
    if not shutil.which("mksquashfs") or not shutil.which("sqfs2tar"):
        pytest.skip("squashfs-tools and squashfs-tools-ng are not installed (scripts/deps.sh)")
    c = team_ctr
    root = tmp_path / "root"
    rootfs_tar("squashed", tmp_path / "r.tar")
    root.mkdir()
    with tarfile.open(tmp_path / "r.tar") as t:
        t.extractall(root)
    img = c.shared / "img" / "bb.sqfs"
    subprocess.run(["mksquashfs", root, img, "-noappend", "-quiet", "-all-root"], check=True,
                   capture_output=True)
    os.chmod(img, 0o644)
    digest = "sha256:" + hashlib.sha256(img.read_bytes()).hexdigest()
    for first in (True, False):
        p = as_user(c, ALICE, "run", "-C", img, "-w", c.alice_dir, "--", "cat", "/IMAGE_ID",
                    timeout=120)
        out = p.stdout + p.stderr
        assert p.returncode == 0 and "squashed" in p.stdout, out
        loaded = "loaded image '%s' (%s)" % (img, digest) in out
        assert loaded == first, out


def torch_image(path, python="/usr/bin/python3"):
    """A root filesystem tarball of the host's python3 and python3-torch, no registry and no
    download: the interpreter, its stdlib, torch and numpy, every library they link (ldd),
    symlinks kept, /lib and /bin -> usr (~640 MiB, ~6 s here)."""
    py = os.path.realpath(python)
    ver = re.search(r"python(3\.\d+)$", py).group(1)
    roots = [py, "/usr/lib/python" + ver, "/usr/lib/python3/dist-packages/torch",
             "/usr/lib/python3/dist-packages/numpy",
             "/usr/lib/python3/dist-packages/typing_extensions.py"]
    files, elfs = set(), set()

    def add(p):
        p = os.path.normpath(p)
        if p.startswith(("/lib/", "/lib64/", "/bin/")):
            p = "/usr" + p
        if p in files or not os.path.lexists(p):
            return
        files.add(p)
        if os.path.islink(p):
            add(os.path.join(os.path.dirname(p), os.readlink(p)))
        elif os.path.isfile(p) and (p == py or ".so" in os.path.basename(p)):
            elfs.add(p)
    for r in roots:
        for d, dirs, fs in os.walk(r) if os.path.isdir(r) else [(os.path.dirname(r), [],
                                                                 [os.path.basename(r)])]:
            dirs[:] = [x for x in dirs if x not in ("test", "tests", "__pycache__")]
            for f in fs:
                add(os.path.join(d, f))
    done = set()
    while elfs - done:
        batch = sorted(elfs - done)
        done |= set(batch)
        for lib in re.findall(r"(/\S+) \(0x", subprocess.run(["ldd"] + batch, text=True,
                                                             capture_output=True).stdout):
            add(lib)
    with tarfile.open(path, "w") as t:
        for d in ("tmp", "dev", "proc", "sys", "etc"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            t.addfile(ti)
        for name, target in (("lib", "usr/lib"), ("lib64", "usr/lib64"), ("bin", "usr/bin"),
                             ("usr/bin/python3", os.path.basename(py))):
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname = tarfile.SYMTYPE, target
            t.addfile(ti)
        for f in sorted(files):
            t.add(f, f.lstrip("/"), recursive=False)
    os.chmod(path, 0o644)


DDP = """import os, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
m = DDP(torch.nn.Linear(4, 1))
x = torch.full((8, 4), float(r + 1))
m(x).sum().backward()                       # gradients all-reduced (averaged) by DDP
g = m.module.weight.grad[0, 0].item()       # d/dw of sum(w.x) = 8 * (mean of r+1)
t = torch.tensor([float(r + 1)])
dist.all_reduce(t)
print("DDP rank=%d world=%d grad=%.1f sum=%.0f" % (r, w, g, t.item()), flush=True)
dist.destroy_process_group()
"""


def test_ddp_gloo_in_a_torch_image(team_ctr, tmp_path):
    """A DDP gloo script with python3-torch in an image (the host's python3-torch files as a
    root filesystem, made here): two ranks on the host network, as alice, agree on the
    all-reduced gradient."""
    c = team_ctr
    try:
        subprocess.run(["/usr/bin/python3", "-c", "import torch"], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no python3-torch on /usr/bin/python3 (scripts/deps.sh)")
    img = c.shared / "img" / "torch.tar"
    torch_image(img)
    (c.alice_dir / "ddp.py").write_text(DDP)
    shutil.chown(c.alice_dir / "ddp.py", ALICE, ALICE)
    p = as_user(c, ALICE, "run", "-n", 1, "-p", 2, "-C", img, "-w", c.alice_dir, "--",
                "python3", "ddp.py", timeout=240)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    # ranks 0 and 1: inputs 1 and 2, mean 1.5, so d/dw = 8 * 1.5 = 12 on both; sum 1 + 2 = 3
    for r in (0, 1):
        assert "DDP rank=%d world=2 grad=12.0 sum=3" % r in out, out
