# Hang detection and attribution latency: 20 injected dttrain hangs (one rank stopped in
# data loading, the all-reduce or the optimizer) on 2 fake nodes, p50/p99 of hang ->
# STALLED and STALLED -> culprit named, against torch's default process-group timeouts.
# Needs root (fake cluster).  Not part of check.
#
#   make bench-hang                          20 rounds, stall_after 10 s
#   make bench-hang BENCH_HANG_ARGS='--rounds 5 --stall-after 30'
.PHONY: bench-hang
BENCH_TARGETS += bench-hang
BENCH_HANG_ARGS ?=

bench-hang: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched $(BINDIR)/dttrain
	$(PYTHON) bench/bench_hang.py --bin $(BINDIR) $(BENCH_HANG_ARGS)
