"""The live dashboard's first page (scheduler/dashboard.c, docs/dashboard.md) in a real
headless Chromium (Debian's chromium): a one-node local cluster with two fake GPUs, one job
running on a GPU and one that waits; the page's GPU table and queue match `dtctl nodes
--json` and `dtctl ps --json`, it loads without console messages, its screenshot is not
blank (kept as a test artefact), the login link works once, and nothing is served
without a session or beyond 127.0.0.1.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import LocalCluster
from test_sweep_report import read_png

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                reason="no %s (scripts/deps.sh installs chromium)" % CHROMIUM)


@pytest.fixture(scope="module")
def cluster(dtctl_bin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dash")
    c = LocalCluster(dtctl_bin / "dtctl", tmp, name="dash", gpus="2")
    with c:
        for args in (("-g", "1", "--name", "training"), ("-g", "2", "--name", "waits")):
            p = c.dtctl("run", "--detach", *args, "--", "sleep", "120")
            assert p.returncode == 0, p.stderr
        yield c
        for j in json.loads(c.dtctl("ps", "--json").stdout)["jobs"]:
            c.dtctl("cancel", j["id"])


def login_url(c):
    p = c.dtctl("dashboard", "--print-url")
    assert p.returncode == 0, p.stderr
    url = p.stdout.strip()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/ui/login/[0-9a-f]{64}", url), url
    return url


def chromium(tmp_path, url, *extra):
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--force-color-profile=srgb", "--hide-scrollbars", "--user-data-dir=" + profile,
           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000"] + list(extra) + [url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    shutil.rmtree(profile, ignore_errors=True)
    return r


def cells(tr):
    return [re.sub(r"<[^>]+>", "", td) for td in re.findall(r"<td[^>]*>(.*?)</td>", tr)]


def test_gpu_table_and_queue_match_the_cli(cluster, tmp_path):
    c = cluster
    r = chromium(tmp_path, login_url(c), "--dump-dom")
    dom = r.stdout
    assert '<body data-loaded="1">' in dom, dom[-3000:] + r.stderr[-2000:]
    console = [l for l in r.stderr.splitlines() if ":CONSOLE" in l]
    assert not console, console

    nodes = json.loads(c.dtctl("nodes", "--json").stdout)["nodes"]
    rows = re.findall(r'<tr data-node="([^"]*)" data-gpu="(\d+)">(.*?)</tr>', dom)
    assert sorted({n for n, _, _ in rows}) == sorted(n["name"] for n in nodes)
    for n in nodes:
        mine = [(int(g), cells(tr)) for name, g, tr in rows if name == n["name"]]
        assert [g for g, _ in mine] == list(range(n["gpus_total"])), mine
        assert all(cl[1] == n["state"] and cl[2].startswith(n["health"]) for _, cl in mine), mine
        assert sum(cl[5] == "yes" for _, cl in mine) == n["gpus_used"] == 1, (mine, n)

    jobs = json.loads(c.dtctl("ps", "--json").stdout)["jobs"]
    queue = {j: cells(tr) for j, tr in re.findall(r'<tr data-job="([^"]*)">(.*?)</tr>', dom)}
    assert sorted(queue) == sorted(j["id"] for j in jobs), (queue, jobs)
    for j in jobs:
        row = queue[j["id"]]
        assert row[1:4] == [j["name"], j["user"], j["state"]], (row, j)
        if j["state"] == "PENDING":
            assert row[5] == j["reason"] and "waiting for" in row[5], (row, j)   # why
        else:
            assert row[5] == ",".join(p["node"] for p in j["placement"]), (row, j)
    assert {j["state"] for j in jobs} == {"RUNNING", "PENDING"}

    evs = re.findall(r'<tr data-event="(\d+)">(.*?)</tr>', dom)
    assert any(cells(tr)[2] == "job.started" for _, tr in evs), evs


def test_screenshot_is_not_blank(cluster, tmp_path):
    shot = Path(os.environ.get("DASHBOARD_SHOT") or tmp_path / "dashboard.png")
    r = chromium(tmp_path, login_url(cluster), "--screenshot=" + str(shot),
                 "--window-size=1200,800")
    assert shot.exists(), "chromium wrote no screenshot (exit %d): %s" % (r.returncode,
                                                                         r.stderr[-2000:])
    w, h, rows = read_png(shot)
    assert (w, h) == (1200, 800)
    text = sum(1 for y in range(0, h, 2) for x in range(0, w, 2) if max(rows[y][x]) < 100)
    green = sum(1 for y in range(0, h, 2) for x in range(0, w, 2)
                if rows[y][x][1] > rows[y][x][0] + 40 and rows[y][x][1] > rows[y][x][2] + 40)
    assert text > 2000, "expected text on the page, %d dark pixels" % text   # tables drawn
    assert green > 20, "expected UP/RUNNING in green, %d green pixels" % green


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_login_once_sessions_required_and_localhost_only(cluster):
    url = login_url(cluster)
    status, page = get(url)
    assert status == 200, page
    session = re.search(r"/ui/s/([0-9a-f]{64})/", page).group(1)
    base = url.split("/ui/")[0]
    status, again = get(url)
    assert status == 403 and "Not signed in" in again     # the link works once
    status, state = get("%s/ui/s/%s/api/state" % (base, session))
    assert status == 200 and {n["name"] for n in json.loads(state)["nodes"]} == {"local"}
    for bad in ("0" * 64, session[:-1] + ("0" if session[-1] != "0" else "1")):
        assert get("%s/ui/s/%s/api/state" % (base, bad))[0] == 403
        assert get("%s/ui/s/%s/" % (base, bad))[0] == 403
    # only on 127.0.0.1: the listening socket's local address
    port = int(base.rsplit(":", 1)[1])
    with open("/proc/net/tcp") as f:
        listen = [l.split()[1] for l in f.read().splitlines()[1:] if l.split()[3] == "0A"]
    assert "0100007F:%04X" % port in listen, listen
    assert not [a for a in listen if a.endswith(":%04X" % port) and a != "0100007F:%04X" % port]


def test_pages_may_run_only_their_own_scripts(cluster):
    """Every reply carries a Content-Security-Policy that runs the dashboard's own scripts
    only (its files and each page's inline script by its SHA-256: a job name, log line or
    sweep parameter that ever reached a page as markup could run nothing), lets the page
    talk to the dashboard only, and may not be framed (clickjacking the cancel button);
    no MIME sniffing, no Referer (the session is in the path), nothing cached.  The login
    page moves on without a script."""
    import base64
    import hashlib

    def head(url):
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status, r.headers, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read().decode()

    url = login_url(cluster)
    base = url.split("/ui/")[0]
    status, hdr, login = head(url)
    assert status == 200 and "<script" not in login, login
    session = re.search(r"url=/ui/s/([0-9a-f]{64})/", login).group(1)
    status, hdr, page = head("%s/ui/s/%s/" % (base, session))
    assert status == 200, page
    csp = {d.split()[0]: d.split()[1:] for d in hdr["Content-Security-Policy"].split("; ")}
    assert csp["default-src"] == ["'none'"] and csp["frame-ancestors"] == ["'none'"], csp
    assert csp["connect-src"] == ["'self'"] and csp["base-uri"] == ["'none'"], csp
    assert "'unsafe-inline'" not in csp["script-src"] and "'unsafe-eval'" not in csp["script-src"]
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert scripts, page
    for body in scripts:
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert "'sha256-%s'" % digest in csp["script-src"], (digest, csp)
    for path in ("/ui/s/%s/" % session, "/ui/s/%s/api/state" % session,
                 "/ui/s/%s/jobs/x" % session, "/ui/s/%s/" % ("0" * 64)):
        status, hdr, _ = head(base + path)
        assert hdr["Content-Security-Policy"] and hdr["X-Frame-Options"] == "DENY", path
        assert hdr["X-Content-Type-Options"] == "nosniff", path
        assert hdr["Referrer-Policy"] == "no-referrer" and hdr["Cache-Control"] == "no-store"


def test_one_user_cannot_sign_everyone_else_out(cluster, tmp_path):
    """Links and sessions are kept 64 at a time, and a new one took the place of the one
    nearest its end, whoever's: one user minting and using 70 links signed everyone else
    out (and voided their unused links).  Now each user holds at most 8 of each, their
    own oldest giving way; the owner's session and link outlive eve's flood."""
    c = cluster
    url = login_url(c)
    status, page = get(url)
    assert status == 200, page
    base, session = url.split("/ui/")[0], re.search(r"/ui/s/([0-9a-f]{64})/", page).group(1)
    unused = login_url(c)
    eve = c.key_user("eve", tmp_path)
    hers = []
    for _ in range(70):
        p = subprocess.run([str(c.exe), "dashboard", "--print-url"], capture_output=True,
                           text=True, env=eve, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr
        status, page = get(p.stdout.strip())
        assert status == 200, page
        hers.append(re.search(r"/ui/s/([0-9a-f]{64})/", page).group(1))
    status, state = get("%s/ui/s/%s/api/state" % (base, session))
    assert status == 200 and json.loads(state)["user"] != "eve", state
    assert get(unused)[0] == 200
    assert get("%s/ui/s/%s/api/state" % (base, hers[-1]))[0] == 200
    assert get("%s/ui/s/%s/api/state" % (base, hers[0]))[0] == 403   # her own gave way


def test_dashboard_needs_the_head(dtctl, tmp_path):
    p = dtctl("dashboard")
    assert p.returncode == 3, p.stdout + p.stderr


def test_cancel_from_the_page_for_the_owner_only(cluster, tmp_path):
    from dtapi import DtApi, read_secret
    c = cluster
    p = c.dtctl("run", "--detach", "-g", "1", "--name", "victim", "--", "sleep", "120")
    assert p.returncode == 0, p.stderr
    victim = c.job_id("victim")
    owner = json.loads(c.dtctl("ps", "--json").stdout)["jobs"][0]["user"]
    head = int(re.search(r"head: \{port: (\d+)", (c.home / "cluster.yaml").read_text()).group(1))
    api = DtApi("127.0.0.1", head, read_secret(str(c.home)))

    # mallory: a user of the cluster with her own key (docs/team.md), not the job's owner
    as_mallory = c.key_user("mallory", tmp_path)

    def session_for(user):
        """A session of `user`: whom the login request proves (a "user" it names is
        not believed), the cluster secret for the owner, her key for mallory."""
        if user == "mallory":
            p = subprocess.run([str(c.exe), "dashboard", "--print-url"], capture_output=True,
                               text=True, env=as_mallory, stdin=subprocess.DEVNULL)
            assert p.returncode == 0, p.stderr
            url = p.stdout.strip()
        else:
            status, body = api.request("POST", "/v1/dashboard/login", {"user": "mallory"})
            assert status == 200, body
            url = body["url"]
        status, page = get(url)
        return url.split("/ui/")[0], re.search(r"/ui/s/([0-9a-f]{64})/", page).group(1)

    def get_json(url):
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def post(url):
        req = urllib.request.Request(url, data=b"", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def state_of(job):
        return [j for j in json.loads(c.dtctl("ps", "--all", "--json").stdout)["jobs"]
                if j["id"] == job][0]["state"]

    # another user's session: refused, the job runs on; its page, logs and metrics are
    # not hers either (what a user of the API could not read, the page does not show)
    base, other = session_for("mallory")
    status, body = post("%s/ui/s/%s/api/jobs/%s/cancel" % (base, other, victim))
    assert status == 403 and "only its owner" in body["error"], body
    for what in ("", "/logs/0", "/metrics"):
        status, body = get_json("%s/ui/s/%s/api/jobs/%s%s" % (base, other, victim, what))
        assert status == 403, (what, status, body)
    status, body = get_json("%s/ui/s/%s/api/state" % (base, other))
    assert status == 200 and body["user"] == "mallory", body
    seen = [j for j in body["jobs"] if j["id"] == victim]
    assert seen and seen[0].get("redacted") is True and "spec" not in seen[0], seen
    assert state_of(victim) in ("RUNNING", "PENDING")
    # the owner's page has a cancel button on the job's row, and the owner's cancel works
    r = chromium(tmp_path, login_url(c), "--dump-dom")
    row = re.search(r'<tr data-job="%s">(.*?)</tr>' % victim, r.stdout).group(1)
    assert "<button>cancel</button>" in row, row
    base, mine = session_for(owner)
    status, body = post("%s/ui/s/%s/api/jobs/%s/cancel" % (base, mine, victim))
    assert status == 200, body
    # its end, as the event stream says it (long-poll, no sleeps)
    f = subprocess.Popen([str(c.exe), "events", "-f", "--json", "--job", victim],
                         stdout=subprocess.PIPE, text=True, env=c.env, stdin=subprocess.DEVNULL)
    try:
        for line in f.stdout:
            if json.loads(line)["kind"] == "job.ended":
                break
    finally:
        f.kill()
        f.wait()
    assert state_of(victim) == "CANCELLED"
    show = json.loads(c.dtctl("show", "--json", victim).stdout)["job"]
    assert show["reason"] == "cancelled from the dashboard by %s" % owner, show
    assert post("%s/ui/s/%s/api/jobs/%s/cancel" % (base, "f" * 64, victim))[0] == 403


def test_job_page_ranks_logs_that_follow_and_events(cluster, tmp_path):
    import time
    c = cluster
    p = c.dtctl("run", "--detach", "-p", "2", "--name", "chatty", "--", "sh", "-c",
                'echo "hello from rank $RANK"; i=0; while [ $i -lt 60 ]; do i=$((i+1)); '
                'echo "tick $i rank $RANK"; sleep 0.25; done')
    assert p.returncode == 0, p.stderr
    job = c.job_id("chatty")
    status, page = get(login_url(c))
    base = login_url(c).split("/ui/")[0]
    session = re.search(r"/ui/s/([0-9a-f]{64})/", page).group(1)
    logs = "%s/ui/s/%s/api/jobs/%s/logs/" % (base, session, job)

    def fetch(cursor):
        status, body = get(logs + str(cursor))
        assert status == 200, body
        return json.loads(body)

    first = fetch(0)
    deadline = time.monotonic() + 30
    while len({l["rank"] for l in first["lines"]}) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)   # polling the condition: both ranks have written
        first = fetch(0)
    assert {l["rank"] for l in first["lines"]} == {0, 1}, first
    # follow: only what came after the cursor, nothing twice
    more = fetch(first["last"])
    while not more["lines"] and time.monotonic() < deadline:
        time.sleep(0.2)
        more = fetch(first["last"])
    assert more["lines"] and all(l["ts"] > first["last"] for l in more["lines"]), more
    seen = [(l["ts"], l["rank"], l["text"]) for l in first["lines"] + more["lines"]]
    assert len(seen) == len(set(seen))
    assert all(re.fullmatch(r"(hello from|tick \d+) rank %d" % l["rank"] if "tick" in l["text"]
                            else r"hello from rank %d" % l["rank"], l["text"])
               for l in first["lines"] + more["lines"]), seen

    r = chromium(tmp_path, "%s/ui/s/%s/jobs/%s" % (base, session, job), "--dump-dom")
    dom = r.stdout
    assert '<body data-loaded="1">' in dom, dom[-2000:] + r.stderr[-2000:]
    assert not [l for l in r.stderr.splitlines() if ":CONSOLE" in l]
    show = json.loads(c.dtctl("show", "--json", job).stdout)["job"]
    ranks = {int(k): cells(tr) for k, tr in re.findall(r'<tr data-rank="(\d+)">(.*?)</tr>', dom)}
    assert sorted(ranks) == sorted(k["rank"] for k in show["ranks"]) == [0, 1]
    for k in show["ranks"]:
        assert ranks[k["rank"]][1:3] == [k["node"], k["state"]], (ranks, show["ranks"])
    text = re.sub(r"<[^>]+>", "", re.search(r'<pre id="logs">(.*?)</pre>', dom, re.S).group(1))
    assert "[local 0] hello from rank 0" in text and "[local 1] hello from rank 1" in text, text
    assert re.search(r"<td>job\.started</td>", dom)
    c.dtctl("cancel", job)


def read_bytes(pid):
    """What process pid has read so far (its rchar in /proc/PID/io: read and pread)."""
    return int(re.search(r"^rchar: (\d+)$", Path("/proc/%d/io" % pid).read_text(), re.M).group(1))


def test_a_huge_log_costs_its_pages_bounded_bytes(cluster, tmp_path):
    # A job's log grows to 200 MB (10M lines are minutes of a chatty job); its
    # page's first look and follow-ups read bounded bytes on the dashboard's one
    # thread, so another job's page still answers while they are polled, and
    # no line after a cursor is lost or doubled.
    import threading
    import time
    c = cluster
    p = c.dtctl("run", "--detach", "--name", "huge", "--", "sh", "-c", "echo first; sleep 120")
    assert p.returncode == 0, p.stderr
    job = c.job_id("huge")
    other = c.job_id("training")
    status, page = get(login_url(c))
    base = login_url(c).split("/ui/")[0]
    session = re.search(r"/ui/s/([0-9a-f]{64})/", page).group(1)
    api = "%s/ui/s/%s/api/jobs/" % (base, session)
    log = [f for f in c.shared.rglob("logs/0.log") if job in str(f)]
    deadline = time.monotonic() + 30
    while not (log and b" O first\n" in log[0].read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.2)
        log = [f for f in c.shared.rglob("logs/0.log") if job in str(f)]
    assert log and b" O first\n" in log[0].read_bytes(), log
    t0 = int(time.time() * 1e6) + 1000000

    def lines(start, n):   # stamped as the agent stamps them, one microsecond apart
        out = []
        for i in range(start, start + n):
            t = t0 + i
            out.append("%s.%06dZ O line %08d %s\n" % (
                time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t // 1000000)), t % 1000000, i,
                "x" * 55))
        return "".join(out).encode()

    block = 200000
    with open(log[0], "ab") as f:
        for k in range(0, 2000000, block):   # 2M lines of 100 bytes
            f.write(lines(k, block))
    size = log[0].stat().st_size
    assert size > 190e6, size
    pid = int((c.home / "dtsched.pid").read_text().split()[0])

    def fetch(cursor):
        status, body = get(api + job + "/logs/" + str(cursor))
        assert status == 200, body
        return json.loads(body)

    before = read_bytes(pid)
    first = fetch(0)
    assert read_bytes(pid) - before < 32 << 20, "a first look read %d bytes" % (
        read_bytes(pid) - before)
    assert [l["text"] for l in first["lines"]] == [
        "line %08d %s" % (i, "x" * 55) for i in range(2000000 - 500, 2000000)], first["lines"][:2]
    # a follow-up from a cursor deep in the file: bisected, not read from the start
    mid = first["lines"][0]["ts"] - 1000000
    before = read_bytes(pid)
    more = fetch(mid)
    assert read_bytes(pid) - before < 32 << 20, "a follow-up read %d bytes" % (
        read_bytes(pid) - before)
    assert [l["ts"] for l in more["lines"]] == list(range(mid + 1, mid + 2001))
    # the page's follow: appended lines come once, none lost
    with open(log[0], "ab") as f:
        f.write(lines(2000000, 300))
    follow = fetch(first["last"])
    assert [l["text"][:13] for l in follow["lines"]] == [
        "line %08d" % i for i in range(2000000, 2000300)]

    # while its page is polled from two threads, another job's page answers
    stop = threading.Event()
    errors = []

    def poll():
        while not stop.is_set():
            try:
                fetch(0)
            except Exception as e:   # noqa: BLE001 (reported below)
                errors.append(e)

    pollers = [threading.Thread(target=poll) for _ in range(2)]
    for t in pollers:
        t.start()
    try:
        for _ in range(10):
            start = time.monotonic()
            status, body = get(api + other)
            took = time.monotonic() - start
            assert status == 200 and took < 5, (status, took)
    finally:
        stop.set()
        for t in pollers:
            t.join()
    assert not errors, errors
    c.dtctl("cancel", job)


@pytest.mark.skipif(not os.path.exists("/usr/share/javascript/chart.js/chart.min.js"),
                    reason="no Debian libjs-chart.js (scripts/deps.sh installs it)")
def test_a_running_jobs_loss_is_plotted(cluster, tmp_path):
    c = cluster
    # the loss falls over 20 steps, written to the job's metrics file, then it runs on
    p = c.dtctl("run", "--detach", "-p", "1", "--name", "learner", "--", "python3", "-c",
                "import json, os, time\n"
                "with open(os.environ['DT_METRICS_FILE'], 'a') as f:\n"
                "    for s in range(1, 21):\n"
                "        f.write(json.dumps({'step': s, 'loss': 2.0 / s, 'lr': 0.1}) + '\\n')\n"
                "print('written', flush=True)\n"
                "time.sleep(60)\n")
    assert p.returncode == 0, p.stderr
    job = c.job_id("learner")
    status, page = get(login_url(c))
    base = login_url(c).split("/ui/")[0]
    session = re.search(r"/ui/s/([0-9a-f]{64})/", page).group(1)
    import time
    deadline = time.monotonic() + 30
    while True:   # polling the condition: the 20 points are in the file
        status, body = get("%s/ui/s/%s/api/jobs/%s/metrics" % (base, session, job))
        assert status == 200, body
        points = json.loads(body)["points"]
        if len(points) == 20 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [p["loss"] for p in points] == [2.0 / s for s in range(1, 21)], points
    assert json.loads(get("%s/ui/s/%s/api/jobs/%s" % (base, session, job))[1])["job"]["state"] \
        == "RUNNING"

    url = "%s/ui/s/%s/jobs/%s" % (base, session, job)
    r = chromium(tmp_path, url, "--dump-dom")
    assert '<canvas data-metric="loss"' in r.stdout and '<canvas data-metric="lr"' in r.stdout, \
        r.stdout[-3000:]
    assert not [l for l in r.stderr.splitlines() if ":CONSOLE" in l]
    shot = Path(os.environ.get("DASHBOARD_JOB_SHOT") or tmp_path / "job.png")
    r = chromium(tmp_path, url, "--screenshot=" + str(shot), "--window-size=1200,900")
    w, h, rows = read_png(shot)
    line = sum(1 for y in range(h) for x in range(0, w, 2)
               if abs(rows[y][x][0] - 0x3b) < 40 and abs(rows[y][x][1] - 0x78) < 40
               and abs(rows[y][x][2] - 0xc3) < 40)
    assert line > 200, "expected the plotted lines in the screenshot, %d blue pixels" % line
    c.dtctl("cancel", job)


def test_sweep_page_is_the_report(cluster, tmp_path):
    c = cluster
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("name: dash-sweep\nmethod: grid\nmetric: {name: loss, goal: minimize}\n"
                     "parameters:\n  x: {values: [3, 1, 2]}\n"
                     "job: {name: d-trial, procs_per_node: 1,\n"
                     "      command: [sh, -c, 'echo \"DTCTL_METRIC {\\\"loss\\\": {x}}\"']}\n")
    p = c.dtctl("sweep", sweep, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    sid = [w for w in json.loads(c.dtctl("sweep", "list", "--json").stdout)["sweeps"]
           if w["name"] == "dash-sweep"][0]["id"]
    status, page = get(login_url(c))
    base = login_url(c).split("/ui/")[0]
    session = re.search(r"/ui/s/([0-9a-f]{64})/", page).group(1)
    r = chromium(tmp_path, "%s/ui/s/%s/" % (base, session), "--dump-dom")
    row = re.search(r'<tr data-sweep="%s">(.*?)</tr>' % sid, r.stdout)
    assert row and 'href="sweeps/%s"' % sid in row.group(1), r.stdout[-3000:]
    assert cells(row.group(1))[1:3] == ["dash-sweep", "COMPLETED"], row.group(1)
    # the sweep's page: the same report `dtctl sweep report` writes, from the same export
    status, html = get("%s/ui/s/%s/sweeps/%s" % (base, session, sid))
    assert status == 200, html
    export = tmp_path / "export.json"
    export.write_text(c.dtctl("sweep", "export", "--json", sid).stdout)
    out = tmp_path / "report.html"
    p = c.dtctl("sweep-report-file", export, "-o", out)
    assert p.returncode == 0, p.stderr
    assert html == out.read_text()
    assert get("%s/ui/s/%s/sweeps/%s" % (base, "a" * 64, sid))[0] == 403
    r = chromium(tmp_path, "%s/ui/s/%s/sweeps/%s" % (base, session, sid), "--dump-dom")
    assert not [l for l in r.stderr.splitlines() if ":CONSOLE" in l]


def test_configured_address_and_port(dtctl_bin, tmp_path):
    """head.dashboard_address and head.dashboard_port in cluster.yaml (docs/config.md): the
    dashboard listens there and only there, and the login link names it."""
    from conftest import free_ports
    port = free_ports(1)[0]
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path, name="dashcfg", gpus="1")
    y = c.home / "cluster.yaml"
    y.write_text(re.sub(r"head: \{port: (\d+)\}",
                        r"head: {port: \1, dashboard_address: 127.0.0.2, dashboard_port: %d}" % port,
                        y.read_text()))
    with c:
        p = c.dtctl("dashboard", "--print-url")
        assert p.returncode == 0, p.stderr
        url = p.stdout.strip()
        assert url.startswith("http://127.0.0.2:%d/ui/login/" % port), url
        status, page = get(url)
        assert status == 200 and "/ui/s/" in page, page
        with open("/proc/net/tcp") as f:
            listen = [l.split()[1] for l in f.read().splitlines()[1:] if l.split()[3] == "0A"]
        assert [a for a in listen if a.endswith(":%04X" % port)] == ["0200007F:%04X" % port], listen
    bad = tmp_path / "bad.yaml"
    bad.write_text(re.sub(r"dashboard_port: \d+", "dashboard_port: 70000", y.read_text()))
    p = c.dtctl("validate", str(bad))
    assert p.returncode == 2 and "key 'head.dashboard_port'" in p.stderr, p.stderr
