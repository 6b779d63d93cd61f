#!/bin/bash
# `make demo`: the main job on this machine as a one-node cluster.
#
# Builds nothing (make demo built the programs first).  Uses a private
# DTCTL_HOME under build/demo (cluster.yaml with the `host: local` node, which
# is reached by direct exec: no sshd needed) and a shared dir under it; starts
# dtsched and the local dtagent, runs a 2-rank CPU dttrain job with the mpi
# launcher attached (logs streamed, every line prefixed with node and rank),
# shows `dtctl ps --all` and `dtctl logs --dedup`, runs a 4-trial sweep of a tiny
# dttrain (2 at a time) and prints its best parameters, and stops both daemons at
# the end, also when something failed.  Ports: DEMO_PORT (dtsched, 27071) and
# DEMO_PORT-1 (the agent).  DTCTL_BIN picks the programs (default bin/).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${DTCTL_BIN:-$ROOT/bin}
DEMO=$ROOT/build/demo
PORT=${DEMO_PORT:-27071}
export DTCTL_HOME=$DEMO/home DTCTL_NO_SYSTEMD=1
unset DTCTL_CLUSTER DTCTL_SHARED_DIR

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
	say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
	say() { printf '\n== %s\n' "$*"; }
fi
dtctl() { "$BIN/dtctl" "$@"; }

for p in dtctl dtagent dtshim dtsched dttrain; do
	[ -x "$BIN/$p" ] || { echo "demo: $BIN/$p is missing (run make)"; exit 2; }
done
command -v mpirun >/dev/null || { echo "demo: mpirun not found (run make deps: Open MPI)"; exit 2; }

cleanup() {
	rc=$?
	say "stopping the agent and dtsched"
	dtctl agents stop || true
	dtctl head stop || true
	if [ $rc -ne 0 ]; then
		echo "demo: FAILED (exit $rc); daemon logs: $DTCTL_HOME/dtsched.log, $DTCTL_HOME/agent.log"
	else
		echo "demo: OK"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# a fresh home and shared dir each time (an old dtsched of this home first)
if [ -d "$DTCTL_HOME" ]; then
	dtctl agents stop >/dev/null 2>&1 || true
	dtctl head stop >/dev/null 2>&1 || true
fi
rm -rf "$DEMO"
mkdir -p "$DEMO/shared" && mkdir -m 700 "$DTCTL_HOME" || exit 1
cat > "$DTCTL_HOME/cluster.yaml" <<YAML
# the demo's one-node cluster: this machine, reached by direct exec
cluster: demo
shared_dir: $DEMO/shared
nodes:
  - {host: local, gpus: 0, slots: 2}
agent: {port: $((PORT - 1)), heartbeat: 500ms, dead_after: 5s}
head: {port: $PORT}
YAML
cat > "$DEMO/job.yaml" <<'YAML'
# 2 CPU ranks of the built-in trainer, data-parallel over MPI
name: demo-mlp
nodes: 1
procs_per_node: 2
launcher: mpi
trainer: {model: mlp, hidden: [256, 256], epochs: 2, batch: 256, lr: 0.05, data: synthetic,
          train_size: 8192, val_size: 1024, log_every: 8}
timeout: 5m
YAML

say "starting dtsched and the local agent (home $DTCTL_HOME)"
dtctl head start || exit 3
dtctl agents start || exit 3
for i in $(seq 1 50); do
	dtctl nodes 2>/dev/null | grep -q '^local *UP' && break
	sleep 0.2
done
dtctl nodes || exit 3

say "dtctl run $DEMO/job.yaml"
dtctl run "$DEMO/job.yaml"
rc=$?
job=$(ls "$DEMO/shared/jobs" | tail -1)

say "dtctl ps --all"
dtctl ps --all

say "dtctl logs --dedup $job"
dtctl logs --dedup --shared-dir "$DEMO/shared" "$job"
[ $rc -eq 0 ] || exit $rc

# a small sweep: 4 random trials of a tiny dttrain, 2 at a time, run by dtsched
cat > "$DEMO/sweep.yaml" <<'YAML'
name: demo-sweep
method: random
metric: {name: val_loss, goal: minimize}
parameters:
  lr: {distribution: log_uniform_values, min: 1.0e-3, max: 0.1}
  batch: {values: [32, 64, 128]}
job:
  name: demo-trial
  procs_per_node: 1
  launcher: agent
  trainer: {model: mlp, hidden: 64, epochs: 3, data: synthetic, train_size: 4096,
            val_size: 512, threads: 1}
max_trials: 4
parallel: 2
seed: 1
YAML
say "dtctl sweep $DEMO/sweep.yaml"
dtctl sweep "$DEMO/sweep.yaml" || exit $?

say "dtctl sweep best demo-sweep"
dtctl sweep best demo-sweep
exit $rc
