# dtsched's submit rate: `dtctl run --detach` from 1, 4, 16, 64 client threads on a
# one-node `host: local` cluster, beside the exec floor (the same clients running
# /bin/true) and the same SQLite writes alone (docs/BENCHMARKS.md, "submit rate").
# No fake cluster, no root.  Not part of check.
#
#   make bench-submit
#   make bench-submit BENCH_SUBMIT_ARGS='--seconds 5 --perf /tmp/dtsched.perf'
.PHONY: bench-submit
BENCH_TARGETS += bench-submit
BENCH_SUBMIT_ARGS ?=

bench-submit: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched
	$(PYTHON) bench/bench_submit.py --bin $(BINDIR) $(BENCH_SUBMIT_ARGS)
