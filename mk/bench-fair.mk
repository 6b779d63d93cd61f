# Fair share with a deep queue (docs/BENCHMARKS.md, "fair share"):
#   bench/sched_pass.c   one scheduling pass over 10,000 pending jobs of 50 users,
#                        the fair-share pass and dtsched's former FIFO pass side by side
#   bench/bench_fair.py  dtsched's submit rate onto that queue, this build against a
#                        FIFO build (BENCH_FAIR_BASE: its bin/, e.g. a build of the
#                        commit before fair share); skipped without it
#
#   make bench-fair
#   make bench-fair BENCH_FAIR_BASE=/path/to/base/bin BENCH_FAIR_ARGS='--rounds 51'
.PHONY: bench-fair
BENCH_TARGETS += bench-fair
SCHED_PASS := $(O)/bench/sched_pass
BENCH_FAIR_ARGS ?=
BENCH_FAIR_BASE ?=

$(SCHED_PASS): bench/sched_pass.c $(O)/libsched.a $(O)/libdt.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(O)/libsched.a $(O)/libdt.a $(LIBS)

bench-fair: $(SCHED_PASS) $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtsched
	$(SCHED_PASS) $(BENCH_FAIR_ARGS)
	@if [ -n "$(BENCH_FAIR_BASE)" ]; then \
		$(PYTHON) bench/bench_fair.py --bin $(BINDIR) --base-bin $(BENCH_FAIR_BASE); \
	else echo "bench-fair: set BENCH_FAIR_BASE=<a FIFO build's bin/> for the submit rate"; fi
