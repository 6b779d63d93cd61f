#!/bin/sh
# Install the Debian packages dtctl needs, only those missing, and say which.
# Idempotent: a second run installs nothing and prints "deps: all present".
set -eu
PKGS="build-essential pkg-config libssh2-1-dev libyaml-dev
libmicrohttpd-dev libjansson-dev libsqlite3-dev libssl-dev openmpi-bin libopenmpi-dev
libopenblas-dev libcmocka-dev python3 python3-pytest python3-yaml openssh-server
openssh-client iproute2 procps psmisc clang cppcheck clang-tidy valgrind chromium"
[ -n "${DT_EXTRA_DEPS:-}" ] && PKGS="$PKGS $DT_EXTRA_DEPS"
missing=""
for p in $PKGS; do
	st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$st" = installed ] || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "deps: all present"
	exit 0
fi
echo "deps: installing:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
