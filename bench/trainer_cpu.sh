#!/bin/sh
# bench/trainer_cpu.sh - dttrain (CPU) against PyTorch on the same MLP, same run.
#
# Workload: MLP 784-1024-1024-10 (ReLU), global batch 256, SGD momentum 0.9, cosine lr,
# synthetic data.  Samples/s over steps [10, STEPS) (start-up excluded), best of ROUNDS
# rounds, the contenders interleaved within each round so machine load hits all alike:
#
#   dttrain 1 rank         --threads 2 (OpenBLAS 2 threads, our loops 1)
#   dttrain 2 ranks        mpirun -np 2, --threads 1 each (global batch 256 = 2 x 128)
#   torch best             torch.set_num_threads(1), OPENBLAS_NUM_THREADS=2
#   torch default          default threads (oversubscribes 2 cores)
#
# Usage: bench/trainer_cpu.sh [STEPS [ROUNDS]]   (DTTRAIN=path/to/dttrain, default bin/dttrain)
# Needs /usr/bin/python3 with torch (make bench-deps) and mpirun; prints a table and the
# ratio dttrain / best PyTorch (the faster of its two thread settings in this run).
set -eu
STEPS=${1:-60}
ROUNDS=${2:-3}
DTTRAIN=${DTTRAIN:-bin/dttrain}
PY=${PYTHON:-/usr/bin/python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader

[ -x "$DTTRAIN" ] || { echo "trainer_cpu.sh: '$DTTRAIN' not built (make, or set DTTRAIN)" >&2; exit 2; }
have_torch=1
"$PY" -c 'import torch' 2>/dev/null || { have_torch=0; echo "note: no torch for $PY (make bench-deps); dttrain only" >&2; }
have_mpi=1
command -v mpirun >/dev/null || have_mpi=0

COMMON="--hidden 1024,1024 --input-dim 784 --classes 10 --train-size 16384 --val-size 0
	--batch 256 --lr 0.01 --optimizer sgd --momentum 0.9 --steps $STEPS --log-every 10
	--device cpu -q"

# rate over steps [10, STEPS) from the metrics file's "time" field
rate() {
	"$PY" - "$1" "$STEPS" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"samples_per_s"' in l]
t = {r["step"]: r["time"] for r in rows}
steps = int(sys.argv[2])
print(f"{(steps - 10) * 256 / (t[steps] - t[10]):.0f}")
PYEOF
}

best() { sort -n | tail -1; }

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
: > "$TMP/d1"; : > "$TMP/d2"; : > "$TMP/tb"; : > "$TMP/td"
for r in $(seq "$ROUNDS"); do
	"$DTTRAIN" $COMMON --threads 2 --metrics "$TMP/m1" > /dev/null
	rate "$TMP/m1" >> "$TMP/d1"
	if [ $have_torch = 1 ]; then
		OPENBLAS_NUM_THREADS=2 "$PY" bench/trainer_torch.py --threads 1 --steps "$STEPS" |
			awk '{print $3}' >> "$TMP/tb"
		"$PY" bench/trainer_torch.py --steps "$STEPS" | awk '{print $3}' >> "$TMP/td"
	fi
	if [ $have_mpi = 1 ]; then
		mpirun --oversubscribe -np 2 "$DTTRAIN" $COMMON --threads 1 --metrics "$TMP/m2" > /dev/null
		rate "$TMP/m2" >> "$TMP/d2"
	fi
done

D1=$(best < "$TMP/d1")
echo "load average before/after: $LOAD0 / $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-34s %10s   %s\n' "contender (best of $ROUNDS)" "samples/s" "each round"
printf '%-34s %10s   %s\n' "dttrain, 1 rank, 2 threads" "$D1" "$(tr '\n' ' ' < "$TMP/d1")"
if [ $have_mpi = 1 ]; then
	D2=$(best < "$TMP/d2")
	printf '%-34s %10s   %s\n' "dttrain, 2 ranks x 1 thread (mpi)" "$D2" "$(tr '\n' ' ' < "$TMP/d2")"
fi
if [ $have_torch = 1 ]; then
	TB=$(best < "$TMP/tb")
	TD=$(best < "$TMP/td")
	printf '%-34s %10s   %s\n' "torch, 1 thread + OpenBLAS 2" "$TB" "$(tr '\n' ' ' < "$TMP/tb")"
	printf '%-34s %10s   %s\n' "torch, default threads" "$TD" "$(tr '\n' ' ' < "$TMP/td")"
	awk -v d="$D1" -v t="$TB" -v u="$TD" \
		'BEGIN { b = t > u ? t : u; printf "ratio dttrain / best torch: %.2fx\n", d / b }'
fi
if [ $have_mpi = 1 ]; then
	awk -v a="$D2" -v b="$D1" 'BEGIN { printf "ratio 2 ranks / 1 rank: %.2fx\n", a / b }'
fi
