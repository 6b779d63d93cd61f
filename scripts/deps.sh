#!/bin/sh
# Install the Debian packages dtctl needs, only those missing, and say which.
#
#   scripts/deps.sh            everything: build, demo, tests, lint (`make deps`, `make check`)
#   scripts/deps.sh --build    what building and `make demo` need
#   scripts/deps.sh PKG...     just these packages (./dt: make and a compiler)
#
# Idempotent: a run with nothing missing installs nothing and prints "deps: all present".
# apt-get and dpkg write to build/deps.log only; the terminal gets one line
# ("deps: installed 23 packages (log: build/deps.log)"), or on failure the log's tail.
# As a normal user it installs with sudo.  DT_EXTRA_DEPS adds packages (bench-deps).
set -eu
cd "$(dirname "$0")/.."
BUILD_PKGS="make build-essential pkg-config libssh2-1-dev libyaml-dev libmicrohttpd-dev
libjansson-dev libsqlite3-dev libssl-dev nettle-dev libcurl4-openssl-dev openmpi-bin libopenmpi-dev libopenblas-dev"
TEST_PKGS="libcmocka-dev python3 python3-pytest python3-yaml python3-torch openssh-server openssh-client
iproute2 procps psmisc time gdb strace clang cppcheck clang-tidy valgrind chromium prometheus bindfs
podman runc uidmap busybox-static squashfs-tools squashfs-tools-ng python3-aiosmtpd msmtp-mta openssl libjs-chart.js
slurmctld slurmd slurm-client munge"
case "${1:-}" in
--build) PKGS=$BUILD_PKGS ;;
"") PKGS="$BUILD_PKGS $TEST_PKGS" ;;
-*) echo "usage: scripts/deps.sh [--build | PKG...]" >&2; exit 2 ;;
*) PKGS=$* ;;
esac
[ -n "${DT_EXTRA_DEPS:-}" ] && PKGS="$PKGS $DT_EXTRA_DEPS"

installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }
missing=""
for p in $PKGS; do
	installed "$p" || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "deps: all present"
	exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 ||
		{ echo "deps: missing:$missing; installing needs root: run as root or install sudo" >&2; exit 1; }
	SUDO=sudo
fi
command -v apt-get >/dev/null 2>&1 ||
	{ echo "deps: missing:$missing, and apt-get is not here (Debian 12 expected): install them yourself" >&2; exit 1; }
mkdir -p build
LOG=build/deps.log
count() { dpkg-query -W -f='${db:Status-Status}\n' 2>/dev/null | grep -cx installed || true; }
before=$(count)
echo "deps: installing:$missing (apt-get; log: $LOG)"
fail() {
	echo "deps: $1 failed (exit $2); the end of $LOG:" >&2
	tail -n 25 "$LOG" >&2
	echo "deps: fix the above (network? apt sources? disk space?) and run it again" >&2
	exit 1
}
{ echo "== $(date '+%F %T') installing:$missing"; } >>"$LOG"
rc=0
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >>"$LOG" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "apt-get update" $rc
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	-o Dpkg::Use-Pty=0 $missing >>"$LOG" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "apt-get install" $rc
echo "deps: installed $(( $(count) - before )) packages (log: $LOG)"
