#!/bin/sh
# bench_exec.sh - `dtctl exec -- true` against `pdsh -R ssh` and `clush` on the
# same fake nodes, the same key and known_hosts, alternating in one run; plus
# the time of a full `dtctl init` of the nodes.  Prints medians and ratios.
#
#   bench/bench_exec.sh [-b BINDIR] [-n NODES] [-r ROUNDS]
#
# Needs root for the fake cluster (tests/cluster/fakecluster, netns mode) and
# pdsh + clustershell (make bench-deps).  The cluster is torn down at the end.
set -eu
BIN=bin N=16 R=15
while getopts b:n:r: o; do
	case $o in
	b) BIN=$OPTARG ;;
	n) N=$OPTARG ;;
	r) R=$OPTARG ;;
	*) echo "usage: $0 [-b BINDIR] [-n NODES] [-r ROUNDS]" >&2; exit 2 ;;
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
cleanup() { "$FC" down >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM

"$FC" up "$N" >/dev/null
eval "$("$FC" env)"
export DTCTL_HOME="$WORK/home"
{
	echo "cluster: bench"
	echo "user: $FC_USER"
	echo "shared_dir: $FC_SHARED"
	echo "ssh: {fanout: 32}"
	echo "nodes:"
	echo "  - host: dtnode[1-$N]"
} > "$WORK/cluster.yaml"

now() { $PY -c 'import time; print("%.6f" % time.monotonic())'; }

# full init: password only, fresh home, new host keys accepted
t0=$(now)
DTCTL_PASSWORD=$FC_PASSWORD "$BIN/dtctl" init --accept-new-hosts "$WORK/cluster.yaml" >"$WORK/init.out" 2>&1 || {
	cat "$WORK/init.out" >&2; exit 1; }
t1=$(now)
INIT_S=$($PY -c "print('%.2f' % ($t1 - $t0))")
t0=$(now)
"$BIN/dtctl" init "$WORK/cluster.yaml" >"$WORK/init2.out" 2>&1
t1=$(now)
INIT2_S=$($PY -c "print('%.2f' % ($t1 - $t0))")

CFG=$DTCTL_HOME/ssh_config
HOSTS="dtnode[1-$N]"
export PDSH_SSH_ARGS="-F $CFG %h"
unset SSH_AUTH_SOCK || true

run_dtctl() { "$BIN/dtctl" exec -- true; }
run_pdsh() { pdsh -R ssh -f 32 -w "$HOSTS" true; }
run_clush() { clush -f 32 -o "-F $CFG" -w "$HOSTS" true; }

# warm up each once (and check they all work)
run_dtctl >/dev/null && run_pdsh >/dev/null && run_clush >/dev/null || {
	echo "bench_exec: a tool failed its warm-up run" >&2; exit 1; }

: > "$WORK/times"
i=1
while [ "$i" -le "$R" ]; do
	# rotate the order every round so no tool always goes first
	case $((i % 3)) in
	0) order="dtctl pdsh clush" ;;
	1) order="pdsh clush dtctl" ;;
	*) order="clush dtctl pdsh" ;;
	esac
	for tool in $order; do
		t0=$(now)
		ok=1
		run_$tool >/dev/null 2>"$WORK/err" || { ok=0; echo "bench_exec: $tool failed in round $i:" >&2; head -n 3 "$WORK/err" >&2; }
		t1=$(now)
		echo "$i $tool $ok $t0 $t1" >> "$WORK/times"
	done
	i=$((i + 1))
done

$PY - "$WORK/times" "$N" "$R" "$INIT_S" "$INIT2_S" <<'PYEOF'
import statistics, sys
path, n, r, init_s, init2_s = sys.argv[1:]
rows = [l.split() for l in open(path)]
bad = {r[0] for r in rows if r[2] != "1"}   # a round counts only if all three tools succeeded
t = {}
for rnd, tool, ok, a, b in rows:
    if rnd not in bad:
        t.setdefault(tool, []).append(float(b) - float(a))
if bad:
    print("  (%d of %s rounds dropped: a tool failed, e.g. the fake cluster was replaced)" % (len(bad), r))
if not t:
    sys.exit("bench_exec: no round where all tools succeeded")
med = {k: statistics.median(v) for k, v in t.items()}
print("dtctl exec vs pdsh/clush: `true` on %s fake nodes, %d of %s alternating rounds" % (n, len(t["dtctl"]), r))
for k in ("dtctl", "pdsh", "clush"):
    v = sorted(t[k])
    print("  %-6s median %.3f s  (min %.3f, max %.3f)" % (k, med[k], v[0], v[-1]))
print("  ratio dtctl/pdsh  %.2f  (target <= 0.5)" % (med["dtctl"] / med["pdsh"]))
print("  ratio dtctl/clush %.2f" % (med["dtctl"] / med["clush"]))
print("full dtctl init of %s nodes (password, new host keys, binaries): %s s; re-run (nothing to do): %s s"
      % (n, init_s, init2_s))
PYEOF
