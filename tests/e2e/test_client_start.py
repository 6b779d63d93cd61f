"""What a dtctl call costs to start, checked without timing anything (issue 34 item 4).

dtctl is exec'd once per command, so what ld.so maps and what the start reads is paid
by every call (docs/BENCHMARKS.md, "client start"; bench/bench_start.py measures it):
  * dtctl names libc.so.6 alone: libyaml, jansson and Nettle are linked in, libssh2 and
    libcrypto (lib/ssh-dl.h) and libm (lib/math-dl.h) are loaded by the code that uses
    them;
  * `dtctl --version` opens nothing but what ld.so opens for libc: no cluster.yaml, no
    secret, no NSS, no socket, even with a cluster set up;
  * a submit (`run --detach`) and `ps` do not look the user up in the user database
    (NSS: ~0.1 ms of a ~1.3 ms call): dtsched takes the owner from the request's proof.
No fake cluster: these read the binary and strace single calls (the last against a
one-node `host: local` head).
"""
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


def test_dtctl_needs_libc_alone(dtctl_bin):
    libs = [lib for lib in needed(dtctl_bin / "dtctl") if not lib.startswith(SANITIZERS)]
    assert libs == ["libc.so.6"], (
        "bin/dtctl names %s: every library ld.so maps costs each dtctl call its start "
        "(docs/BENCHMARKS.md, 'client start'); link it in (Makefile CLI_STATIC) or load "
        "it where it is used (lib/ssh-dl.h, lib/math-dl.h)" % libs)


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
        if name in ("newfstatat", "fstat") and path == "":
            continue                # fstat of an open fd (stdout, the library)
        seen.append(c)
    assert not seen, ("dtctl --version made these calls beyond loading libc: each one is "
                      "paid by every dtctl call:\n  " + "\n  ".join(seen))


def test_submit_and_ps_read_no_user_database(dtctl_bin, tmp_path):
    need_strace(dtctl_bin / "dtctl")
    with LocalCluster(dtctl_bin / "dtctl", tmp_path) as c:
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
