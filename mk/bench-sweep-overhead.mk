# Sweep controller overhead: 200 trials of `sleep 1` on the 8 slots of a one-node
# local cluster (dtsched + one dtagent on this machine), makespan over the ideal
# trials x duration / slots.  Target <= 1.05.  Not part of check.
#
#   make bench-sweep-overhead
#   make bench-sweep-overhead BENCH_SWEEP_OVERHEAD_ARGS='--trials 80 --slots 4'
.PHONY: bench-sweep-overhead
BENCH_TARGETS += bench-sweep-overhead
BENCH_SWEEP_OVERHEAD_ARGS ?=

bench-sweep-overhead: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched
	$(PYTHON) bench/bench_sweep_overhead.py --bin $(BINDIR) --work $(O)/bench-sweep-overhead \
		$(BENCH_SWEEP_OVERHEAD_ARGS)
