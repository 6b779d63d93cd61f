"""What a dtctl call costs to start, checked without timing anything (issue 34 item 4).

dtctl is exec'd once per command, so what ld.so maps and what the start reads is paid
by every call (docs/BENCHMARKS.md, "client start"; bench/bench_start.py measures it):
  * bin/dtctl is a static front (cli/front.c): no ld.so, no library named, none loaded
    (the sonames dtctl's own code dlopens are not in it); bin/dtctl-full, which it execs
    for SSH, libcrypto and the user database, names libc.so.6 alone: libyaml, jansson and
    Nettle are linked in, libssh2 and libcrypto (lib/ssh-dl.h) and libm (lib/math-dl.h)
    are loaded by the code that uses them;
  * the command table decides which binary runs a command, before it starts: ps and
    run --detach run in the front, exec (SSH) and a call without $USER (the user
    database) or with $DTCTL_USER_KEY (libcrypto) in dtctl-full, same argv, same exit code;
  * run --detach asks dtsched for the job's id alone ("reply": "id"), not the whole job;
  * `dtctl --version` opens nothing but what ld.so opens for libc: no cluster.yaml, no
    secret, no NSS, no socket, even with a cluster set up;
  * a submit (`run --detach`) and `ps` do not look the user up in the user database
    (NSS: ~0.1 ms of a ~1.3 ms call): dtsched takes the owner from the request's proof.
No fake cluster: these read the binary and strace single calls (the last against a
one-node `host: local` head).
"""
import json
import os
import shutil
import subprocess

import pytest
from conftest import LocalCluster

# the sanitizer runtimes an ASan+UBSan build adds (BUILD=asan e2e)
SANITIZERS = ("libasan.so", "libubsan.so")


def needed(exe):
    out = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True,
                         check=True).stdout
    return [w.strip("[]") for line in out.splitlines() if "(NEEDED)" in line
            for w in line.split() if w.startswith("[")]


def front_expected(dtctl_bin):
    """the Makefile links the static front where libc.a is there, except under ASan"""
    libc_a = subprocess.run(["cc", "-print-file-name=libc.a"], capture_output=True,
                            text=True).stdout.strip()
    return os.path.isabs(libc_a) and not any(
        lib.startswith(SANITIZERS) for lib in needed(dtctl_bin / "dtctl-full"))


def test_dtctl_full_needs_libc_alone(dtctl_bin):
    libs = [lib for lib in needed(dtctl_bin / "dtctl-full") if not lib.startswith(SANITIZERS)]
    assert libs == ["libc.so.6"], (
        "bin/dtctl-full names %s: every library ld.so maps costs each dtctl call its start "
        "(docs/BENCHMARKS.md, 'client start'); link it in (Makefile CLI_STATIC) or load "
        "it where it is used (lib/ssh-dl.h, lib/math-dl.h)" % libs)


# what dtctl's own code dlopens (lib/ssh-dl.c, lib/math-dl.c)
DLOPENED = (b"libssh2.so.1", b"libcrypto.so.", b"libm.so.6")


def test_front_is_static_and_loads_nothing(dtctl_bin):
    if not front_expected(dtctl_bin):
        pytest.skip("no static front in this build (ASan, or no libc.a: Makefile FRONT)")
    exe = dtctl_bin / "dtctl"
    hdr = subprocess.run(["readelf", "-ld", str(exe)], capture_output=True, text=True,
                         check=True).stdout
    assert "INTERP" not in hdr and "(NEEDED)" not in hdr, (
        "bin/dtctl, the static front, has a program interpreter or names a library: "
        "a dynamic start costs every call ~0.15 ms (Makefile FRONT):\n" + hdr)
    front, full = exe.read_bytes(), (dtctl_bin / "dtctl-full").read_bytes()
    assert all(so in full for so in DLOPENED), "dtctl-full should name what it dlopens"
    inside = [so.decode() for so in DLOPENED if so in front]
    assert not inside, (
        "the static front holds code that dlopens %s: a static glibc program must not "
        "load libraries (a second libc); leave that code to dtctl-full (cli/front.c "
        "defines dt_ssh_lib() and dt_libm() for the front)" % inside)


def need_strace(exe):
    if not shutil.which("strace"):
        pytest.skip("strace is not installed (scripts/deps.sh installs it)")
    if any(lib.startswith(SANITIZERS) for lib in needed(exe)):
        pytest.skip("an ASan build: its runtime reads /proc at start and LSan cannot run "
                    "under strace")


def traced(cmd, env, trace, timeout=60):
    """cmd under strace -f (file and network calls) into trace: (result, the calls)"""
    p = subprocess.run(["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=%file,%network",
                        *map(str, cmd)], env=env, capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    calls = [line.split(None, 1)[1] for line in trace.read_text().splitlines()
             if line.split(None, 1)[1:] and not line.split(None, 1)[1].startswith("+++")]
    return p, calls


def test_version_opens_only_libc(dtctl_bin, tmp_path):
    exe = dtctl_bin / "dtctl"
    need_strace(exe)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    # a cluster set up, so that reading its files at start would show
    (home / "cluster.yaml").write_text("cluster: c\nshared_dir: %s\nnodes:\n  - {host: local}\n"
                                       % tmp_path)
    (home / "secret").write_text("0" * 64 + "\n")
    (home / "secret").chmod(0o600)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "DTCTL_HOME": str(home)}          # no USER: a login-name lookup would show
    p, calls = traced([exe, "--version"], env, tmp_path / "trace")
    assert p.returncode == 0 and p.stdout.startswith("dtctl "), p.stdout + p.stderr
    assert calls and calls[0].startswith("execve("), calls
    seen = []
    for c in calls[1:]:
        name, _, rest = c.partition("(")
        path = rest.split('"')[1] if rest.count('"') >= 2 else ""
        if path in ("/etc/ld.so.preload", "/etc/ld.so.cache") or path.endswith("/libc.so.6"):
            continue                # ld.so finding and mapping libc
        if name == "readlink" and path == "/proc/self/exe":
            continue                # a static-pie start (glibc's own)
        if name in ("newfstatat", "fstat") and path == "":
            continue                # fstat of an open fd (stdout, the library)
        seen.append(c)
    assert not seen, ("dtctl --version made these calls beyond loading libc: each one is "
                      "paid by every dtctl call:\n  " + "\n  ".join(seen))


@pytest.fixture(scope="module")
def local(dtctl_bin, tmp_path_factory):
    """one one-node `host: local` head for the tests below"""
    with LocalCluster(dtctl_bin / "dtctl", tmp_path_factory.mktemp("start")) as c:
        yield c


def test_submit_and_ps_read_no_user_database(local, tmp_path):
    need_strace(local.exe)
    c = local
    # a login's environment: USER and HOME set, so only a user lookup reads NSS
    env = dict(c.env, USER="dt-start-test", HOME=str(tmp_path))
    for i, args in enumerate((("run", "--detach", "-p", "1", "--name", "nss", "--", "true"),
                              ("ps",))):
        p, calls = traced([c.exe, *args], env, tmp_path / ("trace%d" % i))
        assert p.returncode == 0, p.stdout + p.stderr
        nss = [x for x in calls if "/etc/passwd" in x or "nsswitch.conf" in x or
               "/nscd/" in x]
        assert not nss, ("dtctl %s looked the user up (NSS, ~0.1 ms of each call):\n  %s"
                         % (" ".join(args), "\n  ".join(nss)))
        execs = [x for x in calls if x.startswith("execve(")]
        if front_expected(c.exe.parent):
            assert len(execs) == 1, ("dtctl %s should run in the static front alone:\n  %s"
                                     % (" ".join(args), "\n  ".join(execs)))


def execs_of(cmd, env, trace):
    """cmd under strace -f -e execve: (result, the programs exec'd with their argv)"""
    p = subprocess.run(["strace", "-f", "-qq", "-s", "256", "-o", str(trace), "-e",
                        "trace=execve", *map(str, cmd)], env=env, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    return p, [line.split(None, 1)[1] for line in trace.read_text().splitlines()
               if "execve(" in line and "= 0" in line]


def test_the_table_sends_ssh_and_nss_modes_to_dtctl_full(local, tmp_path):
    """exec (SSH), a call without $USER (the user database) and one with $DTCTL_USER_KEY
    (libcrypto) run in dtctl-full: the same argv, the exit code and output of a direct
    call; ps with a login's environment stays in the front"""
    if not front_expected(local.exe.parent):
        pytest.skip("no static front in this build (ASan, or no libc.a: Makefile FRONT)")
    need_strace(local.exe)
    full = local.exe.parent / "dtctl-full"
    login = dict(local.env, USER="dt-start-test", HOME=str(tmp_path))
    no_user = {k: v for k, v in login.items() if k != "USER"}
    key = tmp_path / "missing-key"
    cases = [("exec", ["exec", "--nodes", "nosuchnode", "--", "true"], login, True),
             # a global option before the command: dtctl-full gets it too
             ("no $USER", ["-c", local.home / "cluster.yaml", "ps"], no_user, True),
             ("$DTCTL_USER_KEY", ["ps"], dict(login, DTCTL_USER_KEY=str(key)), True),
             ("ps", ["ps"], login, False)]
    for i, (what, args, env, to_full) in enumerate(cases):
        p, execs = execs_of([local.exe, *args], env, tmp_path / ("x%d" % i))
        want = ['"%s"' % local.exe] + (['"%s"' % full] if to_full else [])
        assert [e.split("(", 1)[1].split(",", 1)[0] for e in execs] == want, (what, execs)
        if to_full:
            # argv unchanged: the front's own argv[0] and arguments
            assert execs[1].split("[", 1)[1].split("]", 1)[0] == \
                execs[0].split("[", 1)[1].split("]", 1)[0], (what, execs)
            direct = subprocess.run([str(full), *args], env=env, capture_output=True,
                                    text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert (p.returncode, p.stdout) == (direct.returncode, direct.stdout), (
                what, p.returncode, p.stderr, direct.returncode, direct.stderr)
    assert p.returncode == 0, p.stderr


def test_detach_asks_for_the_id_alone(local, tmp_path):
    """run --detach sends "reply": "id" and dtsched answers with the id alone: parsing
    the whole job was a third of the client's own instructions per submit"""
    need_strace(local.exe)
    trace = tmp_path / "net"
    p = subprocess.run(["strace", "-f", "-qq", "-s", "65536", "-o", str(trace), "-e",
                        "trace=sendmsg,sendto,write,recvfrom,read", str(local.exe), "run",
                        "--detach", "-p", "1", "--name", "idonly", "--", "true"],
                       env=local.env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and p.stdout.startswith("j-"), p.stdout + p.stderr
    text = trace.read_text()
    sent = [ln for ln in text.splitlines() if "POST /v1/jobs " in ln]
    assert sent and '\\"reply\\":\\"id\\"' in text, sent
    got = [ln for ln in text.splitlines() if "HTTP/1.1 201" in ln]
    assert got, text[-2000:]
    body = got[0].split("\\r\\n\\r\\n", 1)[1]
    assert '\\"id\\":\\"%s\\"' % p.stdout.strip() in body and '\\"state\\"' not in body, got[0]
    # --json still prints the whole job
    p = local.dtctl("run", "--detach", "--json", "-p", "1", "--name", "full", "--", "true")
    assert p.returncode == 0 and json.loads(p.stdout)["job"]["state"], p.stdout + p.stderr


def test_front_without_dtctl_full_says_so(dtctl_bin, tmp_path):
    """a front copied alone still runs its own commands; one it hands over fails with
    exit 1 naming the missing dtctl-full, and does nothing"""
    if not front_expected(dtctl_bin):
        pytest.skip("no static front in this build (ASan, or no libc.a: Makefile FRONT)")
    lone = tmp_path / "bin"
    lone.mkdir()
    shutil.copy2(dtctl_bin / "dtctl", lone / "dtctl")
    env = dict(os.environ, DTCTL_HOME=str(tmp_path / "home"), USER="dt-start-test",
               HOME=str(tmp_path))
    p = subprocess.run([str(lone / "dtctl"), "--version"], env=env, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0 and p.stdout.startswith("dtctl "), p.stdout + p.stderr
    p = subprocess.run([str(lone / "dtctl"), "hosts", "list"], env=env, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 1 and str(lone / "dtctl-full") in p.stderr, p.stdout + p.stderr
    assert not (tmp_path / "home").exists(), "the front did something before handing over"
