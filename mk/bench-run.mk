# dtctl run against bare mpirun (mpi and agent launchers, 8 no-op ranks on 4 fake
# nodes, alternating in one run) and dtctl logs -f against tail -F (follow latency,
# merged throughput over 16 rank files).  Needs root (fake cluster).  Not part of check.
#
#   make bench-run                       5 rounds
#   make bench-run BENCH_RUN_ARGS='--rounds 10'
.PHONY: bench-run
BENCH_TARGETS += bench-run
BENCH_RUN_ARGS ?=

bench-run: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched
	$(PYTHON) bench/bench_run.py --bin $(BINDIR) $(BENCH_RUN_ARGS)
