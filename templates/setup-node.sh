#!/bin/sh
# setup-node.sh - dtctl's node setup template (cluster.yaml: setup: {template: ...}).
#
# `dtctl init` renders this file once per node, uploads it to ~/.dtctl/setup.sh
# and runs it there with `sh`, from the home directory, with setup.timeout.
# Its output is shown as "node: line" and saved to <shared_dir>/init/<node>.log.
# It runs again only when the rendered text changes (or with --force-setup).
#
# Variables: a double-braced name such as {{ node }} is replaced by its value,
# already shell-quoted, so use it bare: NODE={{ node }}, never inside other
# quotes.  Known names:
#   node, node_index, host, user, gpus ("auto" or a number), shared_dir,
#   cluster, bin_dir, every key of setup.vars, and env_lines: the
#   `export NAME='value'` lines of setup.env, as a list of quoted words.
#
# Checks warn unless something jobs cannot do without is missing (the shared
# dir); exit non-zero to make init report the node as failed.
set -u

NODE={{ node }}
SHARED={{ shared_dir }}
GPUS={{ gpus }}
INDEX={{ node_index }}
CLUSTER={{ cluster }}
fail=0

say() { printf '%s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }

say "setting up $NODE (node $INDEX of cluster $CLUSTER)"

# ~/.dtctl/env.sh: sourced by dtctl exec, doctor and the agents' tasks
mkdir -p "$HOME/.dtctl" && chmod 700 "$HOME/.dtctl"
tmp="$HOME/.dtctl/env.sh.tmp.$$"
{
	printf '# written by dtctl init (setup.env in cluster.yaml); do not edit\n'
	printf '%s\n' {{ env_lines }}
} > "$tmp" && chmod 600 "$tmp" && mv -f "$tmp" "$HOME/.dtctl/env.sh" || {
	rm -f "$tmp"; warn "cannot write ~/.dtctl/env.sh"; fail=1; }
# shellcheck disable=SC1091
. "$HOME/.dtctl/env.sh"

# compilers
for cc in cc gcc clang; do
	if command -v "$cc" >/dev/null 2>&1; then
		say "compiler: $cc $("$cc" -dumpversion 2>/dev/null)"
		break
	fi
done
command -v cc >/dev/null 2>&1 || warn "no C compiler (cc) on PATH"

# GPU driver and CUDA
if command -v nvidia-smi >/dev/null 2>&1; then
	say "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
	n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
	say "gpus: $n"
	if [ "$GPUS" != auto ] && [ "$n" != "$GPUS" ]; then
		warn "cluster.yaml says $GPUS GPUs, nvidia-smi sees $n"
	fi
else
	say "driver: none (no nvidia-smi; CPU-only node)"
fi
if command -v nvcc >/dev/null 2>&1; then
	say "cuda: $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
else
	say "cuda: no nvcc on PATH"
fi

# NCCL
nccl=
for f in /usr/lib/*/libnccl.so.2.* /usr/lib64/libnccl.so.2.* /usr/local/cuda*/lib64/libnccl.so.2.*; do
	[ -e "$f" ] && nccl=${f##*libnccl.so.}
done
say "nccl: ${nccl:-not found}"

# Open MPI
if command -v mpirun >/dev/null 2>&1; then
	say "mpi: $(mpirun --version 2>&1 | head -n 1)"
else
	warn "no mpirun on PATH (launcher: mpi will not work)"
fi

# the shared dir: present and writable
if [ ! -d "$SHARED" ]; then
	warn "shared dir $SHARED does not exist on $NODE (mount it, same path on every node)"
	fail=1
else
	probe="$SHARED/.dtctl-setup-probe.$NODE.$$"
	if ( : > "$probe" ) 2>/dev/null; then
		rm -f "$probe"
		say "shared dir: $SHARED writable"
	else
		warn "shared dir $SHARED is not writable by $(id -un) on $NODE"
		fail=1
	fi
fi

exit $fail
