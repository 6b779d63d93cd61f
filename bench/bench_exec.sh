#!/bin/sh
# bench_exec.sh - `dtctl exec -- true` against `pdsh -R ssh` and `clush` on the
# same fake nodes, the same key and known_hosts, alternating in one run, at
# one or more cluster sizes (a growth curve); plus the time of a full
# `dtctl init` of the nodes.  Prints, per size: the load average, medians of
# wall time and of client CPU, the nodes' own sshd CPU per call, and ratios;
# then the growth per node of each tool against the sshd cost per node.
#
#   bench/bench_exec.sh [-b BINDIR] [-n "4 16 48"] [-r ROUNDS] [-f FANOUT] [-c BASE_BINDIR]
#
# -c adds a fourth tool, "base": the dtctl of another build (say, the commit
# before a change) on the same nodes and key, in the same rounds.
# -n takes one size or several (quoted, space-separated); -f is the fanout of
# all three tools (default 64: every node at once up to 64 nodes).  Needs root
# for the fake cluster (tests/cluster/fakecluster, netns mode) and pdsh +
# clustershell (make bench-deps).  The cluster is torn down at the end.
set -eu
BIN=bin SIZES=16 R=15 F=64 BASE=
while getopts b:n:r:f:c: o; do
	case $o in
	b) BIN=$OPTARG ;;
	n) SIZES=$OPTARG ;;
	r) R=$OPTARG ;;
	f) F=$OPTARG ;;
	c) BASE=$(cd "$OPTARG" && pwd)/dtctl ;;
	*) echo "usage: $0 [-b BINDIR] [-n \"4 16 48\"] [-r ROUNDS] [-f FANOUT] [-c BASE_BINDIR]" >&2; exit 2 ;;
	esac
done
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$BIN" && pwd)
FC=$REPO/tests/cluster/fakecluster
PY=/usr/bin/python3
for t in pdsh clush; do
	command -v $t >/dev/null 2>&1 || { echo "bench_exec: $t not found (make bench-deps)" >&2; exit 2; }
done
WORK=$(mktemp -d /tmp/bench-exec.XXXXXX)
# dtsched of the size being measured (init starts one on the head): stopped after each
stop_head() { [ -z "${DTCTL_HOME:-}" ] || "$BIN/dtctl" head stop >/dev/null 2>&1 || true; }
cleanup() { stop_head; "$FC" down >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM
unset SSH_AUTH_SOCK || true

now() { $PY -c 'import time; print("%.6f" % time.monotonic())'; }

for N in $SIZES; do
	"$FC" up "$N" >/dev/null
	eval "$("$FC" env)"
	export DTCTL_HOME="$WORK/home$N"
	# a free port for dtsched: other sessions' heads may hold the default 7071
	HP=$($PY -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
	{
		echo "cluster: bench"
		echo "user: $FC_USER"
		echo "shared_dir: $FC_SHARED"
		echo "ssh: {fanout: $F}"
		echo "head: {port: $HP}"
		echo "nodes:"
		echo "  - host: dtnode[1-$N]"
	} > "$WORK/cluster$N.yaml"

	# full init: password only, fresh home, new host keys accepted
	t0=$(now)
	DTCTL_PASSWORD=$FC_PASSWORD "$BIN/dtctl" init --accept-new-hosts "$WORK/cluster$N.yaml" \
		>"$WORK/init.out" 2>&1 || { cat "$WORK/init.out" >&2; exit 1; }
	t1=$(now)
	"$BIN/dtctl" init "$WORK/cluster$N.yaml" >"$WORK/init2.out" 2>&1
	t2=$(now)

	# the rounds: the three tools alternating, order rotated, each call timed
	# (wall, its own CPU with its children's, the nodes' sshd CPU meanwhile)
	PDSH_SSH_ARGS="-F $DTCTL_HOME/ssh_config %h" "$PY" - "$N" "$R" "$F" "$BIN/dtctl" \
		"$DTCTL_HOME/ssh_config" "$FC_STATE" "$t0" "$t1" "$t2" "$BASE" >> "$WORK/results" <<'PYEOF'
import glob, os, statistics, subprocess, sys, time
n, r, f, dtctl, cfg, state, t0, t1, t2, base = sys.argv[1:]
hosts = "dtnode[1-%s]" % n
cmds = {"dtctl": [dtctl, "exec", "--", "true"],
        "pdsh": ["pdsh", "-R", "ssh", "-f", f, "-w", hosts, "true"],
        "clush": ["clush", "-f", f, "-o", "-F " + cfg, "-w", hosts, "true"]}
if base:
    cmds["base"] = [base, "exec", "--", "true"]
tck = os.sysconf("SC_CLK_TCK")
pids = [open(p).read().split()[0] for p in glob.glob(state + "/node*/sshd.pid")]

def sshd():
    """CPU seconds of the nodes' sshds and their reaped children, and how many
    children (connections) they still have."""
    cpu = kids = 0
    for pid in pids:
        with open("/proc/%s/stat" % pid) as fh:
            cpu += sum(int(x) for x in fh.read().rsplit(")", 1)[1].split()[11:15])
        for t in glob.glob("/proc/%s/task/*/children" % pid):
            with open(t) as fh:
                kids += len(fh.read().split())
    return cpu / tck, kids

def settled():
    """Wait until every node's sshd has reaped the last call's connections."""
    for _ in range(500):
        c, kids = sshd()
        if not kids:
            return c
        time.sleep(0.01)
    return sshd()[0]

def call(tool):
    c0 = settled()
    a = time.monotonic()
    p = subprocess.Popen(cmds[tool], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    b = time.monotonic()
    c1 = settled()
    ok = os.waitstatus_to_exitcode(status) == 0
    if not ok:
        print("  bench_exec: %s failed: %s" % (tool, err.decode(errors="replace").strip()[:300]))
    return ok, b - a, ru.ru_utime + ru.ru_stime, c1 - c0

for tool in cmds:   # warm up (and check they all work)
    if not call(tool)[0]:
        sys.exit("bench_exec: %s failed its warm-up run" % tool)
load = open("/proc/loadavg").read().split()[:3]
rows = {k: [] for k in cmds}
dropped = 0
names = list(cmds)
for i in range(int(r)):
    # rotate the order every round so no tool always goes first
    k = i % len(names)
    got = {tool: call(tool) for tool in names[k:] + names[:k]}
    if all(g[0] for g in got.values()):   # a round counts only if every tool succeeded
        for tool, g in got.items():
            rows[tool].append(g[1:])
    else:
        dropped += 1
if not rows["dtctl"]:
    sys.exit("bench_exec: no round at %s nodes where all tools succeeded" % n)
med = {k: [statistics.median(x[j] for x in v) for j in range(3)] for k, v in rows.items()}
load2 = open("/proc/loadavg").read().split()[:3]
print("N %s load %s -> %s rounds %d dropped %d init %.2f reinit %.2f" % (
    n, "/".join(load), "/".join(load2), len(rows["dtctl"]), dropped,
    float(t1) - float(t0), float(t2) - float(t1)))
for k, (wall, cpu, sshd_cpu) in med.items():
    v = sorted(x[0] for x in rows[k])
    print("T %s %s %.4f %.4f %.4f %.4f %.4f" % (n, k, wall, v[0], v[-1], cpu, sshd_cpu))
PYEOF
	stop_head
done

"$PY" - "$WORK/results" <<'PYEOF'
import sys
lines = [l.split() for l in open(sys.argv[1])]
t = {}
for l in lines:
    if l[0] == "N":
        print("%s nodes: load average %s before, %s after; %s rounds (%s dropped: a tool failed); "
              "dtctl init %s s, again with nothing to do %s s" % (l[1], l[3], l[5], l[7], l[9], l[11], l[13]))
    elif l[0] == "T":
        t[(int(l[1]), l[2])] = [float(x) for x in l[3:]]
    else:
        print(" ".join(l))
sizes = sorted({k[0] for k in t})
print()
print("%5s %-6s %9s %7s %7s %9s %10s %10s %11s" % ("nodes", "tool", "median s", "min", "max",
      "client s", "sshd s", "dtctl/tool", "sshd/node s"))
for n in sizes:
    for tool in ("dtctl", "base", "pdsh", "clush"):
        if (n, tool) not in t:
            continue
        w, lo, hi, cpu, sc = t[(n, tool)]
        print("%5d %-6s %9.3f %7.3f %7.3f %9.3f %10.3f %10.2f %11.4f" % (
            n, tool, w, lo, hi, cpu, sc, t[(n, "dtctl")][0] / w, sc / n))
if len(sizes) > 1:
    print()
    print("growth per added node (wall time, between sizes), against the nodes' own sshd CPU per node")
    for a, b in zip(sizes, sizes[1:]):
        g = {tool: (t[(b, tool)][0] - t[(a, tool)][0]) / (b - a) for tool in ("dtctl", "pdsh", "clush")}
        s = (t[(b, "dtctl")][4] / b + t[(a, "dtctl")][4] / a) / 2
        print("  %d -> %d nodes: dtctl %+.4f s/node, pdsh %+.4f, clush %+.4f; sshd CPU %.4f s/node "
              "(dtctl's growth %s it)" % (a, b, g["dtctl"], g["pdsh"], g["clush"], s,
                                            "within" if g["dtctl"] <= s else "ABOVE"))
        if (a, "base") in t:
            print("  %d -> %d nodes: base %+.4f s/node" % (a, b, (t[(b, "base")][0] - t[(a, "base")][0]) / (b - a)))
print()
for n in sizes:
    print("ratio dtctl/pdsh at %d nodes: %.2f (target <= 0.3)%s" % (
        n, t[(n, "dtctl")][0] / t[(n, "pdsh")][0],
        "; base/pdsh %.2f" % (t[(n, "base")][0] / t[(n, "pdsh")][0]) if (n, "base") in t else ""))
PYEOF
