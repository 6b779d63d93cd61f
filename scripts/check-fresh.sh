#!/bin/sh
# `make check-fresh`: the README's two commands on a bare Debian 12, as root, from a
# clone under /root (0700) -- what a new user on a new machine does.  Slow (about 400
# packages, two builds and the whole suite: 7 minutes on an idle 2-core VM); not part of CI.
#
#   1. bootstrap: mmdebstrap --variant=minbase --include=git,ca-certificates bookworm ROOT
#   2. git clone this checkout's HEAD into ROOT/root/dtctl (uncommitted changes are not in it)
#   3. ./dt demo, then ./dt check in it, each in new pid + mount namespaces with ROOT
#      pivot_root'ed to / and a clean environment (env -i).  Not a plain chroot: `ip netns`
#      needs / to be a mount point, and `nsenter --mount` (entering a fake node) would
#      land in the host's / instead of ROOT.
#
# The demo and the package installs use the host's network (the Debian archive).  The
# check runs in a network namespace of its own (only lo), after `./dt deps` installed its
# packages: the fake cluster's bridge, 10.88.0.0/24 and the test ports are then private to
# it, so it cannot clash with e2e runs on the machine and needs no lock.  FRESH_NET=host
# runs it in the host's network instead, holding /tmp/dtctl-fakecluster.lock (flock) like
# every e2e run there.  Prints each stage's time and ends with the check's
# "N passed, N failed, N skipped" line; logs and timings are in build/check-fresh/.
#
# Environment: FRESH_ROOT (default /var/tmp/dtctl-fresh.PID; must not exist), FRESH_KEEP=1
# keeps it, FRESH_MIRROR (http://deb.debian.org/debian), FRESH_DEMO_TIMEOUT (1800 s),
# FRESH_CHECK_TIMEOUT (5400 s), FRESH_NET (private | host), FRESH_LOCK_WAIT (3600 s, host only).
set -eu
cd "$(dirname "$0")/.."
SRC=$PWD
ROOT=${FRESH_ROOT:-/var/tmp/dtctl-fresh.$$}
MIRROR=${FRESH_MIRROR:-http://deb.debian.org/debian}
LOCK=/tmp/dtctl-fakecluster.lock
OUT=$SRC/build/check-fresh

die() { echo "check-fresh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (mmdebstrap, unshare, pivot_root): run it as root"
[ ! -e "$ROOT" ] || die "$ROOT already exists: remove it or set FRESH_ROOT to a new path"
for t in unshare pivot_root flock timeout git; do
	command -v $t >/dev/null 2>&1 || die "$t not found (Debian: util-linux, coreutils, git)"
done
command -v mmdebstrap >/dev/null 2>&1 || scripts/deps.sh mmdebstrap ||
	die "mmdebstrap is missing and could not be installed: apt-get install mmdebstrap"
REV=$(git rev-parse HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
	echo "check-fresh: note: uncommitted changes are not tested (the clone is HEAD, $(git rev-parse --short HEAD))"

rm -rf "$OUT"
mkdir -p "$OUT"
: >"$OUT/timings.txt"
cleanup() {
	rc=$?
	if [ "${FRESH_KEEP:-}" = 1 ]; then
		echo "check-fresh: root kept in $ROOT"
	elif [ -d "$ROOT" ]; then
		rm -rf --one-file-system "$ROOT"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s; }
took() { # took STAGE START: print and record a stage's time
	echo "$1 $(( $(now) - $2 )) s" >>"$OUT/timings.txt"
	echo "check-fresh: $1 took $(( $(now) - $2 )) s"
}
show_failure() { # show_failure WHAT LOG RC
	echo "check-fresh: $1 FAILED (exit $3); the end of $2:" >&2
	tail -n 30 "$2" >&2
}

# --- 1. a bare Debian 12 ---------------------------------------------------------
echo "check-fresh: bootstrapping a minbase Debian 12 in $ROOT (log: $OUT/bootstrap.log)"
t=$(now)
mmdebstrap --variant=minbase --include=git,ca-certificates bookworm "$ROOT" "$MIRROR" \
	</dev/null >"$OUT/bootstrap.log" 2>&1 ||
	{ show_failure "mmdebstrap" "$OUT/bootstrap.log" $?; exit 1; }
took bootstrap "$t"
# what mmdebstrap leaves out: /etc/hosts, and a policy that keeps
# package installs (openssh-server) from starting services
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
	"$(hostname)" >"$ROOT/etc/hosts"
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod 755 "$ROOT/usr/sbin/policy-rc.d"
chmod 700 "$ROOT/root"
git clone -q "$SRC" "$ROOT/root/dtctl" && git -C "$ROOT/root/dtctl" checkout -q "$REV" ||
	die "git clone of $SRC into $ROOT/root/dtctl failed"

# inroot [--net] LOG CMD: run CMD (sh) in /root/dtctl of ROOT as root, in new pid +
# mount namespaces with ROOT as /, proc, /sys, /dev and a fresh /run; env -i.  --net:
# also a new network namespace with only lo (up).  The shell that is pid 1 there does
# not exec CMD, so it reaps orphans (daemons) while it waits.
inroot() {
	net=""
	[ "$1" != --net ] || { net=--net; shift; }
	unshare --mount --pid --fork --kill-child --propagation private $net /bin/sh -eu -c '
		root=$1
		[ -z "$3" ] || ip link set lo up
		mount --bind "$root" "$root"
		cd "$root"
		mount -t proc proc proc
		mount --rbind /sys sys
		mount --rbind /dev dev
		mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs run
		mkdir -p run/netns run/lock mnt
		chmod 1777 run/lock
		pivot_root . mnt
		cd /
		umount -l /mnt
		env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/sh LANG=C.UTF-8 TERM=dumb \
			PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			/bin/sh -c "cd /root/dtctl && $2"
		' check-fresh-init "$ROOT" "$2" "$net" >"$1" 2>&1 </dev/null
}

# --- 2. the demo -----------------------------------------------------------------
echo "check-fresh: ./dt demo in the fresh root (log: $OUT/demo.log)"
t=$(now)
rc=0
inroot "$OUT/demo.log" "timeout ${FRESH_DEMO_TIMEOUT:-1800} ./dt demo" || rc=$?
if [ $rc -ne 0 ]; then show_failure "./dt demo" "$OUT/demo.log" $rc; exit 1; fi
took demo "$t"
grep -E '^deps: |^demo: ' "$OUT/demo.log" | sed 's/^/check-fresh:   /'

# --- 3. the check -----------------------------------------------------------------
echo "check-fresh: ./dt check in the fresh root (log: $OUT/check.log)"
t=$(now)
rc=0
if [ "${FRESH_NET:-private}" = host ]; then
	exec 9>>"$LOCK"
	flock -n 9 || echo "check-fresh: waiting for $LOCK (another e2e run on this machine)"
	flock -w "${FRESH_LOCK_WAIT:-3600}" 9 || die "$LOCK still held after ${FRESH_LOCK_WAIT:-3600} s: try later"
	inroot "$OUT/check.log" "timeout ${FRESH_CHECK_TIMEOUT:-5400} ./dt check" || rc=$?
	exec 9>&-
else
	# packages first, with the host's network; then the check, offline in its own
	# network namespace (its deps step finds everything present)
	inroot "$OUT/deps.log" "./dt deps" || rc=$?
	if [ $rc -ne 0 ]; then show_failure "./dt deps" "$OUT/deps.log" $rc; exit 1; fi
	took "check (its deps step)" "$t"
	cat "$OUT/deps.log" >"$OUT/check.log"
	inroot --net "$OUT/check.log.part" "timeout ${FRESH_CHECK_TIMEOUT:-5400} ./dt check" || rc=$?
	cat "$OUT/check.log.part" >>"$OUT/check.log" && rm -f "$OUT/check.log.part"
fi
took check "$t"
grep -E '^deps: ' "$OUT/check.log" | sed 's/^/check-fresh:   /'
last=$(tail -n 1 "$OUT/check.log")
echo "$last" >>"$OUT/timings.txt"
[ $rc -eq 0 ] || show_failure "./dt check" "$OUT/check.log" $rc
echo "check-fresh: timings in $OUT/timings.txt: $(tr '\n' ';' <"$OUT/timings.txt")"
echo "$last"
exit $rc
