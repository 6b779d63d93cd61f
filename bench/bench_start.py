#!/usr/bin/python3
"""bench_start.py - what one dtctl call costs to start, beside static C binaries doing
the same syscalls, in one run (issue 34 item 4: a client call <= 1.2x a bare start of a
static binary).

Side by side, alternating in rounds on the same machine (the CPU, user + sys, of each
child from wait4's rusage, and its page faults; medians over the rounds of each
round's mean):

  * static_version: a static C program that writes "dtctl 0.1.0\\n" (what `dtctl
    --version` does, with nothing linked dynamically); dynamic_version: the same
    program linked dynamically (libc only): what ld.so alone adds;
  * busybox true (busybox-static), the anchor bench_submit.py uses;
  * dtctl --version, of this build (--bin) and of an older one (--old, optional);
  * static_client: a static C program doing what `dtctl ps` does on the wire: read
    cluster.yaml and the secret, 16 random bytes, connect to dtsched, one POST with
    its reply (unsigned, so a 401), one line out;
  * dtctl ps and dtctl run --detach against a live head (a one-node `host: local`
    cluster, bench_submit.py's, a blocker job holding its slots so that ps has one
    row and the submits queue; they are cancelled after each batch, so that every
    ps sees the same queue), of both builds.

Printed: one JSON object per command (cpu_ms, minflt) and the ratios: each dtctl call
to static_version (the issue's bare static start) and the head calls to
static_client (the same syscalls, statically linked).  The 1-minute load average is
printed at the start and at the end.  Then one "summary" object per build: its three
calls as x static_version, beside the floor, static_client's own ratio: the least
any client that reads its files and makes one request reaches on this machine (when
the floor is above the 1.2x goal, the goal is out of reach of every such client).
Not part of check.

bin/dtctl is the static front (cli/front.c); --also full=bin/dtctl-full measures the
dynamic binary it hands SSH and NSS commands to, the same sources.

    bench/bench_start.py [--bin bin] [--old build/base/dtctl] [--also LABEL=DTCTL]...
                         [--runs 100] [--rounds 7]
"""
import argparse
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_submit import BUSYBOX, REPO, local_cluster, start_local_cluster

VERSION_C = r"""
#include <unistd.h>
int main(void) { return write(1, "dtctl 0.1.0\n", 12) == 12 ? 0 : 1; }
"""

# what `dtctl ps` does on the wire, with nothing else: argv = cluster.yaml, secret, port
CLIENT_C = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

static char buf[1 << 16];

static int slurp(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf));

	if (fd >= 0)
		close(fd);
	return n < 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
	static const char body[] = "{\"user\":null,\"all\":false,\"format\":\"tsv\"}";
	char req[512], nonce[16], *end, *cl;
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct pollfd p;
	size_t got = 0;
	int fd, one = 1, n;

	if (argc != 4 || slurp(argv[1]) || slurp(argv[2]) ||
	    getrandom(nonce, sizeof(nonce), 0) != sizeof(nonce))
		return 2;
	a.sin_port = htons(atoi(argv[3]));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
		return 3;
	n = snprintf(req, sizeof(req), "POST /v1/joblist HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
		     strlen(body), body);
	if (send(fd, req, n, MSG_NOSIGNAL) != n)
		return 3;
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	while (got < sizeof(buf) - 1 && poll(&p, 1, 10000) == 1) {
		ssize_t r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);

		if (r <= 0)
			break;
		got += r;
		buf[got] = 0;
		if ((end = strstr(buf, "\r\n\r\n")) && (cl = strcasestr(buf, "content-length:")) &&
		    got >= (size_t)(end + 4 - buf) + strtoul(cl + 15, NULL, 10))
			break;
	}
	close(fd);
	printf("%.12s\n", buf);
	return got ? 0 : 3;
}
"""


def build(cc, src, out, *flags):
    c = out.with_suffix(".c")
    c.write_text(src)
    subprocess.run([cc, "-O2", *flags, "-o", str(out), str(c)], check=True)
    return str(out)


def needed(path):
    """the shared libraries a binary names (DT_NEEDED): what ld.so maps at its start"""
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    return [w.strip("[]") for w in out.split() if w.startswith("[") and ".so" in w]


def measure(argv, env, n):
    """argv run n times back to back: (mean CPU ms, mean minor faults, failures)."""
    cpu = flt = 0.0
    bad = 0
    for _ in range(n):
        pid = os.posix_spawn(argv[0], argv, env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)])
        _, status, ru = os.wait4(pid, 0)
        cpu += ru.ru_utime + ru.ru_stime
        flt += ru.ru_minflt
        bad += os.waitstatus_to_exitcode(status) != 0
    return 1000 * cpu / n, flt / n, bad


def cancel_submitted(run):
    """cancel the jobs the submits queued, so that every `ps` sees the same queue (the
    blocker alone): dtsched sends ps the queued and running jobs only"""
    p = run("ps", "--json")
    assert p.returncode == 0, p.stderr
    ids = [j["id"] for j in json.loads(p.stdout)["jobs"]
           if j.get("name") == "b" and j.get("state") == "PENDING"]
    if ids:
        p = run("cancel", *ids)
        assert p.returncode == 0, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "bin"))
    ap.add_argument("--old", help="an older build's dtctl, measured beside --bin's")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=DTCTL",
                    help="another dtctl to measure beside them (e.g. a static-pie link)")
    ap.add_argument("--runs", type=int, default=100, help="starts per command per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cc", default="cc")
    a = ap.parse_args()
    new = str(Path(a.bin).resolve() / "dtctl")
    tmp = Path(tempfile.mkdtemp(prefix="bench-start-"))
    home, env, run = local_cluster(new, tmp)
    # a login's environment (USER set): without it the cluster file's default ssh user
    # is looked up in the user database (NSS) by every call
    env.setdefault("USER", pwd.getpwuid(os.getuid()).pw_name)
    port = next(line.split("port:")[1].strip(" }\n") for line in
                (home / "cluster.yaml").read_text().splitlines() if line.startswith("head:"))
    try:
        start_local_cluster(run)
        p = run("run", "--detach", "-p", "2", "--name", "blocker", "--", "sleep", "600")
        assert p.returncode == 0, p.stderr
        builds = [("new", new)] + ([("old", str(Path(a.old).resolve()))] if a.old else []) + \
            [(x.split("=", 1)[0], str(Path(x.split("=", 1)[1]).resolve())) for x in a.also]
        cmds = [("static_version", [build(a.cc, VERSION_C, tmp / "sv", "-static")]),
                ("dynamic_version", [build(a.cc, VERSION_C, tmp / "dv")]),
                ("static_client", [build(a.cc, CLIENT_C, tmp / "sc", "-static"),
                                   str(home / "cluster.yaml"), str(home / "secret"), port])]
        if BUSYBOX:
            cmds.append(("busybox_true", [BUSYBOX, "true"]))
        for tag, d in builds:
            cmds += [("%s --version" % tag, [d, "--version"]),
                     ("%s ps" % tag, [d, "ps"]),
                     ("%s run --detach" % tag,
                      [d, "run", "--detach", "-p", "1", "--name", "b", "--", "sleep", "600"])]
        print(json.dumps({"load_average": os.getloadavg()[0], "cores": os.cpu_count(),
                          "runs": a.runs, "rounds": a.rounds,
                          "needed": {t: needed(d) for t, d in builds}}), flush=True)
        per = {name: [] for name, _ in cmds}
        for r in range(a.rounds):
            order = cmds if r % 2 == 0 else cmds[::-1]
            for name, argv in order:
                per[name].append(measure(argv, env, a.runs))
                if name.endswith("--detach"):
                    cancel_submitted(run)
        res = {}
        for name, _ in cmds:
            res[name] = {"cpu_ms": round(statistics.median(x[0] for x in per[name]), 3),
                         "minflt": round(statistics.median(x[1] for x in per[name]), 1),
                         "failed": sum(x[2] for x in per[name])}
        sv, sc = res["static_version"]["cpu_ms"], res["static_client"]["cpu_ms"]
        for name, r in res.items():
            r["x_static_version"] = round(r["cpu_ms"] / sv, 2)
            if name.endswith(" ps") or name.endswith("--detach"):
                r["x_static_client"] = round(r["cpu_ms"] / sc, 2)
            print(json.dumps(dict(command=name, **r)), flush=True)
        print(json.dumps({"load_average_end": os.getloadavg()[0]}))
        floor = res["static_client"]["x_static_version"]
        for tag, _ in builds:
            print(json.dumps({"summary": tag, "goal": 1.2, "floor_static_client": floor,
                              **{c: res["%s %s" % (tag, c)]["x_static_version"]
                                 for c in ("--version", "ps", "run --detach")}}))
        if floor > 1.2:
            print("bench_start: the minimal static client is %.2fx a static start here: "
                  "1.2x is below what any client making one request reaches on this "
                  "machine" % floor)
        if any(r["failed"] for n, r in res.items() if n != "static_client"):
            sys.exit("bench_start: some calls failed (see 'failed')")
    finally:
        run("agents", "stop")
        run("head", "stop")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
