"""The head's event stream and the notifications (docs/events.md, docs/notifications.md).

Real components only: a one-node local cluster (dtsched + dtagent), an HTTPS webhook
receiver with its own CA made by openssl (receivers.py), a real sendmail (Debian's
msmtp-mta: /usr/sbin/sendmail that relays to a host and port from its user config,
no daemon) into a local SMTP sink (python3-aiosmtpd), and local commands.
"""

import json
import os
import re
import select
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import LocalCluster, free_ports
from receivers import TestCA, Webhook, smtp_sink

SECRET = "xyzzy-secret-token"


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    return TestCA(tmp_path_factory.mktemp("ca"))


def make_cluster(dtctl_bin, tmp, notify_yaml="", env=None):
    tmp.mkdir(exist_ok=True)
    c = LocalCluster(dtctl_bin / "dtctl", tmp, name="events")
    if notify_yaml:
        with open(c.home / "cluster.yaml", "a") as f:
            f.write(notify_yaml)
    if env:
        c.env.update(env)
    return c


def events(c, *args):
    p = c.dtctl("events", "--json", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def wait_events(c, pred, timeout=30, *args):
    """`dtctl events --json` once pred(events) holds (or the timeout passed), woken by
    `events -f` as soon as a new event is added, else after at most 1 s."""
    deadline = time.monotonic() + timeout
    evs = events(c, *args)
    while not pred(evs) and time.monotonic() < deadline:
        last = evs[-1]["id"] if evs else 0
        # -f answers as soon as an event after `last` is added; stop it after one batch
        p = subprocess.Popen([str(c.exe), "events", "-f", "--json", "--since", str(last)],
                             stdout=subprocess.PIPE, text=True, env=c.env,
                             stdin=subprocess.DEVNULL)
        try:
            # bounded: pred may wait on more than events (a hook's file), and no event may
            # come after `last` at all (a fresh root once hung here for an hour)
            select.select([p.stdout], [], [], max(0.0, min(1.0, deadline - time.monotonic())))
        finally:
            p.kill()
            p.wait()
        evs = events(c, *args)
    return evs


def test_events_of_a_failing_job_a_drain_and_webhooks(dtctl_bin, tmp_path, ca):
    hook = Webhook(ca)
    slack = Webhook(ca)
    try:
        c = make_cluster(dtctl_bin, tmp_path, "notify:\n  - {webhook: '%s', ca_file: %s, "
                         "on: [fail, drain]}\n" % (hook.url(), ca.ca_pem))
        job = tmp_path / "job.yaml"
        job.write_text("name: boom\ncommand: [sh, -c, 'exit 3']\nnotify:\n"
                       "  - {webhook: '%s', format: slack, ca_file: %s, on: [fail]}\n"
                       % (slack.url("/services/T0/B0/%s" % SECRET), ca.ca_pem))
        with c:
            p = c.dtctl("run", job)
            assert p.returncode == 3, p.stdout + p.stderr
            jid = c.job_id("boom")
            assert c.dtctl("drain", "local").returncode == 0
            assert c.dtctl("resume", "local").returncode == 0

            evs = events(c)
            kinds = [(e["kind"], e.get("job"), e.get("node")) for e in evs]
            assert ("job.queued", jid, None) in kinds
            assert ("job.started", jid, None) in kinds
            ended = [e for e in evs if e["kind"] == "job.ended"][0]
            assert ended["state"] == "FAILED" and ended["exit_code"] == 3
            assert ended["rank"] == 0 and ended["node"] == "local" and ended["name"] == "boom"
            assert ended["user"], ended       # the owner, for per-user visibility
            assert "exited with code 3" in ended["reason"]
            assert [e["kind"] for e in evs if e.get("node") == "local" and not e.get("job")][-2:] \
                == ["node.drained", "node.resumed"]
            drained = [e for e in evs if e["kind"] == "node.drained"][-1]
            assert drained["reason"] == "by dtctl drain"
            ids = [e["id"] for e in evs]
            assert ids == sorted(set(ids)), ids
            assert all(line["schema"] == 1 for line in evs)
            # --job filters; --since ID resumes after that id
            assert {e.get("job") for e in events(c, "--job", jid)} == {jid}
            assert [e["id"] for e in events(c, "--since", str(ids[2]))] == ids[3:]
            # people's lines name the same things
            p = c.dtctl("events", "--job", jid)
            assert re.search(r"job\.ended .*job=%s name=boom .*state=FAILED" % jid, p.stdout), p.stdout

            ok, posts = hook.wait_for(lambda ps: len(ps) >= 2)
            assert ok, posts
            by_kind = {doc["event"]["kind"]: doc for _, doc in posts}
            gen = by_kind["job.ended"]
            assert gen["event"]["job"] == jid and gen["event"]["name"] == "boom"
            assert gen["event"]["state"] == "FAILED" and "boom" in gen["text"]
            assert by_kind["node.drained"]["event"]["reason"] == "by dtctl drain"
            assert "job.started" not in by_kind and "node.resumed" not in by_kind
            ok, sposts = slack.wait_for(lambda ps: len(ps) >= 1)
            assert ok and set(sposts[0][1]) == {"text"}, sposts
            assert jid in sposts[0][1]["text"] and "FAILED" in sposts[0][1]["text"]
            assert sposts[0][0] == "/services/T0/B0/%s" % SECRET
            # the secret is never shown: show, events, the validate output, the daemon log
            dry = c.dtctl("run", "--dry-run", "--json", job)
            assert dry.returncode == 0 and "/***" in dry.stdout, dry.stdout + dry.stderr
            show = c.dtctl("show", "--json", jid)
            assert show.returncode == 0 and "T0/B0" in job.read_text()
            for out in (show.stdout, c.dtctl("events", "--json").stdout,
                        c.dtctl("validate", c.home / "cluster.yaml").stdout,
                        c.dtctl("validate", job).stdout, c.dtctl("validate", "--json", job).stdout,
                        c.dtctl("run", "--dry-run", job).stdout, dry.stdout,
                        (c.home / "dtsched.log").read_text()):
                assert SECRET not in out and "hooks/T0SECRET" not in out
            assert "https://127.0.0.1:%d/***" % slack.port in show.stdout
    finally:
        hook.close()
        slack.close()


def test_webhook_retried_after_500_and_metrics(dtctl_bin, tmp_path, ca):
    hook = Webhook(ca, fail_first=2)
    try:
        c = make_cluster(dtctl_bin, tmp_path, "notify:\n  - {webhook: '%s', ca_file: %s, "
                         "on: [done]}\n" % (hook.url(), ca.ca_pem))
        with c:
            assert c.dtctl("run", "--name", "fine", "--", "true").returncode == 0
            ok, posts = hook.wait_for(lambda ps: len(ps) >= 3, timeout=30)
            assert ok, posts
            # the same event three times: 500, 500, then 200
            assert len({p[1]["event"]["id"] for p in posts}) == 1
            assert posts[0][1]["event"]["kind"] == "job.ended"
            port = int(re.search(r"head: \{port: (\d+)", (c.home / "cluster.yaml").read_text()).group(1))
            deadline = time.monotonic() + 10
            while True:   # the 200 is counted once the thread is back from curl
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
                    text = r.read().decode()
                if 'dtsched_notifications_total{type="webhook",result="sent"} 1' in text or \
                        time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert 'dtsched_notifications_total{type="webhook",result="sent"} 1' in text, text
            assert 'dtsched_notifications_total{type="webhook",result="retried"} 2' in text
            assert 'dtsched_notifications_total{type="webhook",result="failed"} 0' in text
            promtool = shutil.which("promtool")
            if promtool:
                p = subprocess.run([promtool, "check", "metrics"], input=text,
                                   capture_output=True, text=True, timeout=30)
                assert p.returncode == 0 and not (p.stdout + p.stderr).strip(), p.stdout + p.stderr
            assert not [e for e in events(c) if e["kind"] == "notify.failed"]
    finally:
        hook.close()


def test_untrusted_certificate_refused_and_visible(dtctl_bin, tmp_path, ca):
    hook = Webhook(ca)
    try:
        # no ca_file: the system's CAs, which never signed the test CA's certificate
        c = make_cluster(dtctl_bin, tmp_path, "notify:\n  - {webhook: '%s', on: [fail]}\n"
                         % hook.url())
        with c:
            assert c.dtctl("run", "--name", "bad", "--", "false").returncode == 1
            evs = wait_events(c, lambda es: any(e["kind"] == "notify.failed" for e in es),
                              timeout=40)
            failed = [e for e in evs if e["kind"] == "notify.failed"]
            assert failed, evs
            f = failed[0]
            assert f["type"] == "webhook" and f["event_kind"] == "job.ended"
            assert f["target"] == "https://127.0.0.1:%d/***" % hook.port
            assert "certificate" in f["error"].lower(), f
            assert f["tries"] == 4
            assert SECRET not in json.dumps(evs)
            assert not hook.posts   # refused before any request was sent
    finally:
        hook.close()


def test_exec_and_email_targets(dtctl_bin, tmp_path):
    if not Path("/usr/sbin/sendmail").exists() or not shutil.which("msmtp"):
        pytest.skip("no msmtp sendmail (Debian: msmtp-mta; make deps)")
    pytest.importorskip("aiosmtpd")
    port = free_ports(1)[0]
    ctl, sink = smtp_sink(port)
    xdg = tmp_path / "xdg"
    (xdg / "msmtp").mkdir(parents=True)
    conf = xdg / "msmtp" / "config"
    conf.write_text("account default\nhost 127.0.0.1\nport %d\nfrom dtsched@head.test\n"
                    "auth off\ntls off\n" % port)
    conf.chmod(0o600)
    out = tmp_path / "got.json"
    hook = tmp_path / "hook.py"
    hook.write_text("#!/usr/bin/python3\nimport sys\nopen(sys.argv[1], 'a').write(sys.stdin.read())\n")
    hook.chmod(0o755)
    try:
        # exec: the operator's (cluster.yaml); a job's own exec: never runs as root
        c = make_cluster(dtctl_bin, tmp_path / "c", "notify:\n  - {exec: [%s, %s], "
                         "on: [fail]}\n" % (hook, out), env={"XDG_CONFIG_HOME": str(xdg)})
        job = tmp_path / "job.yaml"
        job.write_text("name: mailme\ncommand: [sh, -c, 'exit 5']\nnotify:\n"
                       "  - {email: me@lab.test, on: [fail]}\n")
        with c:
            assert c.dtctl("run", job).returncode == 5
            jid = c.job_id("mailme")
            with sink.cond:
                assert sink.cond.wait_for(lambda: sink.messages, 30), events(c)
            rcpt, msg = sink.messages[0]
            assert rcpt == ["me@lab.test"]
            assert re.search(r"^Subject: .*job %s \(mailme\) FAILED" % jid, msg, re.M), msg
            evs = wait_events(c, lambda es: out.exists() and out.read_text().strip())
            got = [json.loads(line) for line in out.read_text().splitlines()]
            assert got[0]["kind"] == "job.ended" and got[0]["job"] == jid
            assert got[0]["state"] == "FAILED" and got[0]["exit_code"] == 5
            assert not [e for e in evs if e["kind"] == "notify.failed"], evs
    finally:
        ctl.stop()


def test_log_pattern_fires_once_per_match_naming_rank_and_node(dtctl_bin, tmp_path):
    out = tmp_path / "matches.json"
    hook = tmp_path / "hook.py"
    hook.write_text("#!/usr/bin/python3\nimport sys\nopen(sys.argv[1], 'a').write(sys.stdin.read())\n")
    hook.chmod(0o755)
    c = make_cluster(dtctl_bin, tmp_path / "c", "notify:\n  - {exec: [%s, %s], "
                     "match: 'NaN|CUDA error'}\n" % (hook, out))
    job = tmp_path / "job.yaml"
    # rank 1 prints one NaN line, rank 0 a CUDA error; both keep running a while
    job.write_text("name: watch\nprocs_per_node: 2\nshell: true\n"
                   "command: 'echo step 1 loss 0.5; if [ $RANK = 1 ]; then echo step 2 loss NaN; "
                   "else echo CUDA error: out of memory; fi; echo done; sleep 2'\n")
    with c:
        p = c.dtctl("run", job)
        assert p.returncode == 0, p.stdout + p.stderr
        jid = c.job_id("watch")
        evs = wait_events(c, lambda es: len([e for e in es if e["kind"] == "log.match"]) >= 2)
        m = sorted((e for e in evs if e["kind"] == "log.match"), key=lambda e: e["rank"])
        assert [(e["rank"], e["node"], e["job"]) for e in m] == [(0, "local", jid), (1, "local", jid)]
        assert "CUDA error" in m[0]["line"] and "NaN" in m[1]["line"]
        assert all(e["pattern"] == "NaN|CUDA error" for e in m)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (not out.exists() or
                                               out.read_text().count("\n") < 2):
            wait_events(c, lambda es: False, 1)
        got = [json.loads(line) for line in out.read_text().splitlines()]
        assert sorted(g["rank"] for g in got) == [0, 1]
        # once per match: nothing more after the job ended and the watch read its last lines
        assert len([e for e in events(c) if e["kind"] == "log.match"]) == 2


def test_follow_resumes_across_a_head_restart(dtctl_bin, tmp_path):
    c = make_cluster(dtctl_bin, tmp_path)
    with c:
        f = subprocess.Popen([str(c.exe), "events", "-f", "--json"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=c.env,
                             stdin=subprocess.DEVNULL)
        try:
            assert c.dtctl("run", "--name", "before", "--", "true").returncode == 0
            assert c.dtctl("head", "stop").returncode == 0
            p = c.dtctl("head", "start")
            assert p.returncode == 0, p.stderr
            c.wait_up()
            assert c.dtctl("run", "--name", "after", "--", "true").returncode == 0
            after = c.job_id("after")
            seen = []
            while True:
                line = f.stdout.readline()
                assert line, "events -f ended: %s" % f.stderr.read()
                seen.append(json.loads(line))
                if seen[-1]["kind"] == "job.ended" and seen[-1].get("job") == after:
                    break
        finally:
            f.kill()
            f.wait()
        all_evs = events(c)
        upto = [e for e in all_evs if e["id"] <= seen[-1]["id"]]
        assert [e["id"] for e in seen] == [e["id"] for e in upto]   # no loss, no repeat
        assert seen == upto
        assert any(e["kind"] == "job.ended" and e["name"] == "before" for e in seen)


def test_notify_errors_are_located(dtctl_bin, tmp_path):
    bad = tmp_path / "job.yaml"
    cases = [
        ("notify:\n  - {webhook: 'http://x.test/%s', on: [fail]}\n" % SECRET,
         r"job.yaml:3:15: key 'notify\[0\]\.webhook': expected an https:// URL .*found "
         r"'http://x.test/\*\*\*'"),
        ("notify:\n  - {email: me@lab, on: [fail, sometimes]}\n",
         r"job.yaml:3:32: key 'notify\[0\]\.on': expected a list of events: fail, done.*found 'sometimes'"),
        ("notify:\n  - {email: me@lab, webhook: 'https://a.test/x', on: [fail]}\n",
         r"job.yaml:3:5: key 'notify\[0\]': a target is one of 'webhook', 'email' or 'exec'"),
        ("notify:\n  - {exec: [relative/cmd], on: [done]}\n",
         r"job.yaml:3:12: key 'notify\[0\]\.exec': expected a command: an absolute path"),
        ("notify:\n  - {email: me@lab, match: '(unclosed'}\n",
         r"job.yaml:3:28: key 'notify\[0\]\.match': expected a valid POSIX extended"),
        ("notify:\n  - {email: me@lab, on: [fail], insecure: true}\n",
         r"job.yaml:3:33: unknown key 'notify\[0\]\.insecure'"),
    ]
    for text, want in cases:
        bad.write_text("command: [true]\n" + text)
        p = subprocess.run([str(dtctl_bin / "dtctl"), "validate", str(bad)], capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 2, (text, p.stdout, p.stderr)
        assert re.search(want, p.stderr), (want, p.stderr)
        assert SECRET not in p.stderr


def test_sweep_best_and_done_reach_the_webhook(dtctl_bin, tmp_path, ca):
    hook = Webhook(ca)
    try:
        c = make_cluster(dtctl_bin, tmp_path / "c")
        sweep = tmp_path / "sweep.yaml"
        # one trial at a time, in grid order: 3 is the first best, 1 the next, 2 is not
        sweep.write_text(
            "method: grid\nmetric: {name: loss, goal: minimize}\nparallel: 1\n"
            "parameters:\n  x: {values: [3, 1, 2]}\n"
            "job: {name: b-trial, procs_per_node: 1,\n"
            "      command: [sh, -c, 'echo \"DTCTL_METRIC {\\\"loss\\\": {x}}\"']}\n"
            "notify:\n  - {webhook: '%s', format: discord, ca_file: %s, on: [best, done]}\n"
            % (hook.url(), ca.ca_pem))
        with c:
            p = c.dtctl("sweep", sweep, timeout=120)
            assert p.returncode == 0, p.stdout + p.stderr
            evs = events(c)
            best = [e for e in evs if e["kind"] == "sweep.best"]
            assert [(e["trial"], e["value"], e["metric"]) for e in best] == \
                [(1, 3.0, "loss"), (2, 1.0, "loss")], best
            ended = [e for e in evs if e["kind"] == "sweep.ended"]
            assert len(ended) == 1 and ended[0]["state"] == "COMPLETED"
            sid = ended[0]["sweep"]
            assert all(e["sweep"] == sid for e in best)
            # best twice, the sweep done, and each trial's job done: discord's payload
            ok, posts = hook.wait_for(lambda ps: len(ps) >= 6)
            assert ok, posts
            texts = [doc["content"] for _, doc in posts]
            assert all(set(doc) == {"content", "allowed_mentions"} and
                       doc["allowed_mentions"] == {"parse": []} for _, doc in posts), posts
            assert len([t for t in texts if "sweep.best" in t]) == 2
            assert any("sweep.best" in t and "loss = 1" in t for t in texts), texts
            assert len([t for t in texts if "sweep.ended" in t and "COMPLETED" in t]) == 1
            assert len([t for t in texts if "job.ended" in t]) == 3
    finally:
        hook.close()


def test_curl_is_linked_into_dtsched_only(dtctl_bin):
    def libs(prog):
        p = subprocess.run(["ldd", str(dtctl_bin / prog)], capture_output=True, text=True)
        if "statically linked" in p.stdout or "not a dynamic executable" in p.stderr:
            return ""           # the static front (cli/front.c): nothing loaded at start
        assert p.returncode == 0, p.stderr
        return p.stdout

    assert "libcurl" in libs("dtsched")
    assert "libcurl" not in libs("dtctl")
    if (dtctl_bin / "dtctl-full").exists():
        assert "libcurl" not in libs("dtctl-full")


@pytest.mark.skipif(os.geteuid() != 0, reason="dtsched runs as root only in a root test run")
def test_a_jobs_exec_target_never_runs_as_root(dtctl_bin, tmp_path):
    out = tmp_path / "ran"
    c = make_cluster(dtctl_bin, tmp_path / "c")
    job = tmp_path / "job.yaml"
    job.write_text("name: sneaky\ncommand: [true]\nnotify:\n"
                   "  - {exec: [/usr/bin/touch, %s], on: [done]}\n" % out)
    with c:
        assert c.dtctl("run", job).returncode == 0
        evs = wait_events(c, lambda es: any(e["kind"] == "notify.failed" for e in es))
        f = [e for e in evs if e["kind"] == "notify.failed"]
        assert f and f[0]["type"] == "exec" and f[0]["tries"] == 1, evs
        assert "runs as root" in f[0]["error"] and "cluster.yaml" in f[0]["error"], f
        assert not out.exists()


def test_the_stream_is_bounded_and_ids_never_repeat(dtctl_bin, tmp_path):
    # the bound lowered to 20 (DTSCHED_TEST_EVENTS_KEEP; 100,000 otherwise): trimmed
    # every 2 events to the newest 20, ids going on
    c = make_cluster(dtctl_bin, tmp_path, env={"DTSCHED_TEST_EVENTS_KEEP": "20"})
    with c:
        for _ in range(15):
            assert c.dtctl("drain", "local").returncode == 0
            assert c.dtctl("resume", "local").returncode == 0
        evs = events(c)
        ids = [e["id"] for e in evs]
        assert 20 <= len(evs) <= 22, ids
        assert ids == list(range(ids[0], ids[-1] + 1)) and ids[-1] >= 30, ids
        assert c.dtctl("head", "stop").returncode == 0
        assert c.dtctl("head", "start").returncode == 0
        assert c.dtctl("drain", "local").returncode == 0
        after = events(c, "--since", str(ids[-1]))
        assert [e["kind"] for e in after] == ["node.drained"] and after[0]["id"] == ids[-1] + 1


def dead_receiver(backlog):
    """A local server that accepts (the kernel does, up to backlog) and never answers a
    TLS handshake: (its socket, to close; its port)."""
    import socket
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead.listen(backlog)
    return dead, dead.getsockname()[1]


def test_a_dead_receiver_neither_blocks_jobs_nor_holds_up_a_stop(dtctl_bin, tmp_path):
    dead, port = dead_receiver(16)
    try:
        c = make_cluster(dtctl_bin, tmp_path, "notify:\n  - {webhook: 'https://127.0.0.1:%d/x', "
                         "on: [done], timeout: 60s}\n" % port)
        with c:
            for i in range(3):   # each job's end queues a delivery that hangs
                assert c.dtctl("run", "--name", "j%d" % i, "--", "true").returncode == 0
            head = int(re.search(r"head: \{port: (\d+)", (c.home / "cluster.yaml").read_text()).group(1))
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % head, timeout=10) as r:
                assert "dtsched_notifications_queued 3" in r.read().decode()
            t0 = time.monotonic()
            assert c.dtctl("head", "stop").returncode == 0
            took = time.monotonic() - t0
            # the delivery in progress is aborted, not waited for (its timeout is 60 s)
            assert took < 20, took
            assert c.dtctl("head", "start").returncode == 0
            # the aborted and the queued ones are owed still, not failed: queued again
            assert not [e for e in events(c) if e["kind"] == "notify.failed"]
            assert "dtsched_notifications_queued 3" in metrics_text(c)
    finally:
        dead.close()


def test_one_users_dead_receivers_delay_and_crowd_out_nobody_else(dtctl_bin, tmp_path, ca):
    # One delivery thread once served every user's targets in turn: a job whose 16
    # targets hang (10 minutes a try, 4 tries each) held everyone's notifications for
    # hours, and its deliveries could fill the whole queue so that others' were dropped.
    # Now a user's deliveries take one thread at a time and a quarter of the queue.
    dead, port = dead_receiver(1024)
    hook = Webhook(ca)
    try:
        c = make_cluster(dtctl_bin, tmp_path / "c")
        hers = tmp_path / "hers.yaml"
        hers.write_text("name: flood\ncommand: [true]\nnotify:\n" + "".join(
            "  - {webhook: 'https://127.0.0.1:%d/t%d', on: [start, done], timeout: 10m}\n"
            % (port, i) for i in range(16)))
        mine = tmp_path / "mine.yaml"
        mine.write_text("name: mine\ncommand: [true]\nnotify:\n"
                        "  - {webhook: '%s', ca_file: %s, on: [done]}\n" % (hook.url("/mine"), ca.ca_pem))
        with c:
            mallory = c.key_user("mallory", tmp_path)
            for i in range(9):   # 9 jobs x 16 targets x 2 events: 288 deliveries, all hanging
                p = subprocess.run([str(c.exe), "run", str(hers)], capture_output=True, text=True,
                                   env=mallory)
                assert p.returncode == 0, p.stderr
            assert c.dtctl("run", mine).returncode == 0
            ok, posts = hook.wait_for(lambda ps: any(p[0] == "/mine" for p in ps), timeout=60)
            assert ok, (posts, metrics_text(c))
            assert posts[0][1]["event"]["name"] == "mine", posts
            # her share of the queue is a quarter of it: the rest of hers dropped, counted
            # (the drops may be reported in more than one notify.dropped event)
            evs = wait_events(c, lambda es: sum(e["count"] for e in es
                                                if e["kind"] == "notify.dropped") >= 288 - 256)
            assert sum(e["count"] for e in evs if e["kind"] == "notify.dropped") == 288 - 256, evs
            deadline = time.monotonic() + 30
            while metric(c, "dtsched_notifications_queued") != 256 and \
                    time.monotonic() < deadline:   # mine leaves the queue once curl is back
                time.sleep(0.1)
            assert metric(c, "dtsched_notifications_queued") == 256, metrics_text(c)
    finally:
        hook.close()
        dead.close()


def test_owners_whose_receivers_all_hang_hold_nobody_else(dtctl_bin, tmp_path, ca):
    # Four delivery threads once served every owner: the operator's own target and three
    # users' that accept and never answer (10 minutes a try) held all four, and every
    # other user's notifications waited a whole try.  Now each owner with a due delivery
    # gets a thread of its own (up to 64): the fifth owner's webhook arrives at once.
    dead, port = dead_receiver(64)
    hook = Webhook(ca)
    try:
        c = make_cluster(dtctl_bin, tmp_path / "c", "notify:\n  - {webhook: "
                         "'https://127.0.0.1:%d/ops', on: [start], timeout: 10m}\n" % port)
        theirs = tmp_path / "theirs.yaml"
        theirs.write_text("name: theirs\ncommand: [true]\nnotify:\n  - {webhook: "
                          "'https://127.0.0.1:%d/user', on: [start], timeout: 10m}\n" % port)
        mine = tmp_path / "mine.yaml"
        mine.write_text("name: mine\ncommand: [true]\nnotify:\n"
                        "  - {webhook: '%s', ca_file: %s, on: [done]}\n" % (hook.url("/mine"), ca.ca_pem))
        with c:
            for user in ("mallory", "trent", "victor"):
                p = subprocess.run([str(c.exe), "run", str(theirs)], capture_output=True,
                                   text=True, env=c.key_user(user, tmp_path))
                assert p.returncode == 0, p.stderr
            # 3 starts for the operator's target and one for each user's: all hang, and
            # none can settle for 10 minutes
            deadline = time.monotonic() + 60
            while metric(c, "dtsched_notifications_queued") < 6 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert metric(c, "dtsched_notifications_queued") == 6, metrics_text(c)
            assert c.dtctl("run", mine).returncode == 0
            ok, posts = hook.wait_for(lambda ps: any(p[0] == "/mine" for p in ps), timeout=60)
            assert ok, (posts, metrics_text(c))
            assert posts[0][1]["event"]["name"] == "mine", posts
            # the four owners' tries still hang, one each, on threads of their own (mine's
            # try ends once curl is back)
            deadline = time.monotonic() + 30
            while metric(c, "dtsched_notifications_in_progress") != 4 and \
                    time.monotonic() < deadline:
                time.sleep(0.1)
            assert metric(c, "dtsched_notifications_in_progress") == 4, metrics_text(c)
            assert metric(c, "dtsched_notifications_threads") <= 64, metrics_text(c)
    finally:
        hook.close()
        dead.close()


def metrics_text(c):
    port = int(re.search(r"head: \{port: (\d+)", (c.home / "cluster.yaml").read_text()).group(1))
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.read().decode()


def metric(c, sample):
    m = re.search(r"^%s (\S+)$" % re.escape(sample), metrics_text(c), re.M)
    return float(m.group(1)) if m else 0.0


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_queued_notifications_survive_a_head_restart(dtctl_bin, tmp_path, ca, how):
    port = free_ports(1)[0]   # nothing listens there yet: the receiver is down
    c = make_cluster(dtctl_bin, tmp_path, "notify:\n  - {webhook: 'https://127.0.0.1:%d/T/%s', "
                     "ca_file: %s, on: [done]}\n  - {exec: [/bin/false], on: [done]}\n"
                     % (port, SECRET, ca.ca_pem))
    hook = None
    try:
        with c:
            for i in range(2):
                assert c.dtctl("run", "--name", "q%d" % i, "--", "true").returncode == 0
            job = tmp_path / "job.yaml"   # and a job's own target (found again by its job)
            job.write_text("name: q2\ncommand: [true]\nnotify:\n  - {webhook: "
                           "'https://127.0.0.1:%d/own/%s', ca_file: %s, on: [done]}\n"
                           % (port, SECRET, ca.ca_pem))
            assert c.dtctl("run", job).returncode == 0
            ended = {e["id"] for e in events(c) if e["kind"] == "job.ended"}
            own = {e["id"] for e in events(c) if e["kind"] == "job.ended" and e["name"] == "q2"}
            assert len(ended) == 3 and len(own) == 1
            # each webhook delivery has failed a try (refused) and waits for its next
            sample = 'dtsched_notifications_total{type="webhook",result="retried"}'
            deadline = time.monotonic() + 30
            while metric(c, sample) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert metric(c, sample) >= 4, metrics_text(c)
            if how == "kill":
                os.kill(int((c.home / "dtsched.pid").read_text().split()[0]), 9)
            else:
                assert c.dtctl("head", "stop").returncode == 0
            hook = Webhook(ca, port=port)   # the receiver is up again
            p = c.dtctl("head", "start")
            assert p.returncode == 0, p.stdout + p.stderr
            def ids(ps, prefix):
                return {d["event"]["id"] for path, d in ps if path.startswith(prefix)}

            ok, posts = hook.wait_for(lambda ps: ids(ps, "/T/") >= ended and ids(ps, "/own/") >= own,
                                      timeout=40)
            assert ok, (posts, events(c))
            # every one (at least once: a receiver dedupes by the event's id), nothing else
            assert ids(posts, "/T/") == ended and ids(posts, "/own/") == own
            assert all(d["event"]["kind"] == "job.ended" for _, d in posts)
            # the exec target really fails: one notify.failed per event, after 4 tries
            # all told; the webhook's tries before the restart failed nothing
            evs = wait_events(c, lambda es: len([e for e in es if e["kind"] == "notify.failed"])
                              >= 3, timeout=40)
            failed = [e for e in evs if e["kind"] == "notify.failed"]
            assert sorted(e["event_id"] for e in failed) == sorted(ended), failed
            assert all(e["type"] == "exec" and e["tries"] == 4 for e in failed), failed
            assert SECRET not in json.dumps(evs)
    finally:
        if hook:
            hook.close()


def test_stall_and_hang_events_and_an_exec_timeout(dtctl_bin, tmp_path):
    out = tmp_path / "got.json"
    hook = tmp_path / "hook.py"
    hook.write_text("#!/usr/bin/python3\nimport sys\nopen(sys.argv[1], 'a').write(sys.stdin.read())\n")
    hook.chmod(0o755)
    # a second target that never finishes: killed at its timeout, each try, then failed
    c = make_cluster(dtctl_bin, tmp_path / "c", "notify:\n  - {exec: [%s, %s], on: [stall, hang]}\n"
                     "  - {exec: [/bin/sleep, '987.25'], on: [stall], timeout: 300ms}\n"
                     % (hook, out))
    with c:
        p = c.dtctl("run", "--name", "quiet", "--stall-after", "2s", "--", "sh", "-c",
                    "echo started; sleep 8")
        assert p.returncode == 0, p.stdout + p.stderr
        jid = c.job_id("quiet")
        evs = wait_events(c, lambda es: any(e["kind"] == "notify.failed" for e in es), timeout=40)
        stalled = [e for e in evs if e["kind"] == "job.stalled"]
        assert len(stalled) == 1, evs   # the first scan only, not one per scan
        assert stalled[0]["job"] == jid and stalled[0]["rank"] == 0 and stalled[0]["node"] == "local"
        assert stalled[0]["stall_after_ms"] == 2000
        hang = [e for e in evs if e["kind"] == "job.hang"]
        assert hang and hang[0]["job"] == jid and hang[0]["auto"] is True and hang[0]["reason"], evs
        got = [json.loads(l)["kind"] for l in out.read_text().splitlines()]
        assert "job.stalled" in got and "job.hang" in got, got
        f = [e for e in evs if e["kind"] == "notify.failed"][0]
        assert f["type"] == "exec" and f["target"] == "/bin/sleep" and f["tries"] == 4, f
        assert "did not finish within 300 ms (killed)" in f["error"], f
        p = subprocess.run(["pgrep", "-f", "sleep 987.25"], capture_output=True, text=True)
        assert p.returncode == 1, "a timed-out command is still running: %s" % p.stdout


def test_a_jobs_ca_file_never_blocks_the_deliveries(dtctl_bin, tmp_path, ca):
    # A job's webhook names its own ca_file: a FIFO (or /dev/zero) there once held
    # the delivery thread forever (libcurl opened it as dtsched, root here), and every
    # later notification of every user waited behind it, a stop included.
    hook = Webhook(ca)
    fifo = tmp_path / "ca.fifo"
    os.mkfifo(fifo)
    try:
        c = make_cluster(dtctl_bin, tmp_path / "c", "notify:\n  - {webhook: '%s', ca_file: %s, "
                         "on: [done]}\n" % (hook.url(), ca.ca_pem))
        job = tmp_path / "job.yaml"
        with c:
            for i, bad in enumerate((fifo, "/dev/zero")):
                job.write_text("name: bad%d\ncommand: [true]\nnotify:\n"
                               "  - {webhook: '%s', ca_file: %s, on: [done]}\n"
                               % (i, hook.url("/own"), bad))
                assert c.dtctl("run", job).returncode == 0
            assert c.dtctl("run", "--name", "after", "--", "true").returncode == 0
            # the operator's webhook hears all three jobs end
            ok, posts = hook.wait_for(lambda ps: len([p for p in ps if p[0] != "/own"]) >= 3,
                                      timeout=60)
            assert ok, (posts, events(c))
            assert not [p for p in posts if p[0] == "/own"], posts
            evs = wait_events(c, lambda es: len([e for e in es
                                                 if e["kind"] == "notify.failed"]) >= 2)
            failed = [e for e in evs if e["kind"] == "notify.failed"]
            assert len(failed) == 2 and all(f["tries"] == 1 for f in failed), failed
            assert all("ca_file" in f["error"] for f in failed), failed
            assert str(fifo) in failed[0]["error"] + failed[1]["error"], failed
            t0 = time.monotonic()
            assert c.dtctl("head", "stop").returncode == 0
            assert time.monotonic() - t0 < 20
    finally:
        hook.close()


def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.M).group(1))


def test_a_flood_of_matching_lines_costs_the_head_no_memory(dtctl_bin, tmp_path):
    # Any job can print what cluster.yaml's `match:` looks for.  The watch once kept every
    # matching line of a tick before the burst limit (10 a minute) dropped all but ten:
    # 300,000 lines printed at once were ~200 MB more in dtsched.
    c = make_cluster(dtctl_bin, tmp_path / "c", "notify:\n  - {exec: [/bin/true], "
                     "match: 'NaN'}\n")
    job = tmp_path / "job.yaml"
    job.write_text("name: flood\ncommand: [/usr/bin/python3, -c, \"import sys, time; "
                   "sys.stdout.write(('loss NaN ' + 'x' * 190 + '\\\\n') * 300000); sys.stdout.flush(); "
                   "time.sleep(3)\"]\n")
    with c:
        pid = int((c.home / "dtsched.pid").read_text().split()[0])
        before = vm_hwm_kib(pid)
        assert c.dtctl("run", job).returncode == 0
        jid = c.job_id("flood")
        deadline = time.monotonic() + 60
        while True:   # polled: `events -f` would wait for good if fewer came
            m = [e for e in events(c) if e["kind"] == "log.match"]
            if len(m) >= 10 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(m) == 10 and all(e["job"] == jid for e in m), m
        grown = vm_hwm_kib(pid) - before
        assert grown < 40 * 1024, "dtsched's peak RSS grew by %d KiB" % grown


def test_others_events_are_redacted_like_their_jobs(dtctl_bin, tmp_path):
    # The stream once gave every user every event whole: a log.match quotes the matching
    # line of another user's rank log (which `logs` refuses them), a sweep.best their
    # results, a notify.failed their targets.  Others' events now carry what `ps` shows
    # of others' jobs (docs/team.md), and "redacted": true.
    c = make_cluster(dtctl_bin, tmp_path / "c", "notify:\n  - {exec: [/bin/true], "
                     "match: 'token'}\n")
    job = tmp_path / "job.yaml"
    # its own exec target fails (dtsched runs as root here): a notify.failed naming it
    job.write_text("name: private\ncommand: [sh, -c, 'echo token hunter2-abc; sleep 2; exit 4']\n"
                   "notify:\n  - {exec: [/usr/local/bin/page-owner-7], on: [fail]}\n")
    with c:
        mallory = c.key_user("mallory", tmp_path)
        assert c.dtctl("run", job).returncode == 4
        jid = c.job_id("private")
        # the owner's view: the line, the failed target
        evs = wait_events(c, lambda es: {"log.match", "notify.failed"} <= {e["kind"] for e in es})
        assert [e for e in evs if e["kind"] == "log.match" and "hunter2" in e["line"]], evs
        mine = subprocess.run([str(c.exe), "run", "--name", "hers", "--", "sh", "-c", "exit 6"],
                              capture_output=True, text=True, env=mallory)
        assert mine.returncode == 6, mine.stderr
        for args in ([], ["--job", jid]):
            p = subprocess.run([str(c.exe), "events", "--json"] + args, capture_output=True,
                               text=True, env=mallory)
            assert p.returncode == 0, p.stderr
            seen = [json.loads(line) for line in p.stdout.splitlines()]
            assert "hunter2" not in p.stdout and "page-owner" not in p.stdout, p.stdout
            others = [e for e in seen if e.get("job") == jid]
            assert {e["kind"] for e in others} >= {"job.queued", "log.match", "job.ended",
                                                    "notify.failed"}, seen
            assert all(e.get("redacted") is True and e["user"] != "mallory" for e in others)
            ended = [e for e in others if e["kind"] == "job.ended"][0]
            assert ended["state"] == "FAILED" and ended["name"] == "private", ended
            m = [e for e in others if e["kind"] == "log.match"][0]
            assert "line" not in m and "pattern" not in m, m
        hers = [json.loads(line) for line in subprocess.run(
            [str(c.exe), "events", "--json"], capture_output=True, text=True,
            env=mallory).stdout.splitlines() if '"hers"' in line]
        ended = [e for e in hers if e["kind"] == "job.ended"]
        assert ended and ended[0]["exit_code"] == 6 and "redacted" not in ended[0], hers
