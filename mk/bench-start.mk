# What one dtctl call costs to start (issue 34 item 4): dtctl --version, ps and
# run --detach against a live one-node `host: local` head, beside static C programs
# doing the same syscalls, busybox true, and an older build's dtctl when given
# (docs/BENCHMARKS.md, "client start").  No fake cluster, no root.  Not part of check.
#
#   make bench-start
#   make bench-start BENCH_START_ARGS='--old build/base/bin/dtctl --rounds 9'
.PHONY: bench-start
BENCH_TARGETS += bench-start
BENCH_START_ARGS ?=

bench-start: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched
	$(PYTHON) bench/bench_start.py --bin $(BINDIR) $(BENCH_START_ARGS)
