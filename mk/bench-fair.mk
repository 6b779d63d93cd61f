# The queue's scheduling cost with 10,000 pending jobs of 50 users: the
# fair-share pass (scheduler/fairshare.c) and dtsched's former FIFO pass side
# by side in one run (bench/sched_pass.c; docs/BENCHMARKS.md, "fair share").
#
#   make bench-fair
#   make bench-fair BENCH_FAIR_ARGS='--pending 20000 --rounds 51'
.PHONY: bench-fair
BENCH_TARGETS += bench-fair
SCHED_PASS := $(O)/bench/sched_pass
BENCH_FAIR_ARGS ?=

$(SCHED_PASS): bench/sched_pass.c $(O)/libsched.a $(O)/libdt.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(O)/libsched.a $(O)/libdt.a $(LIBS)

bench-fair: $(SCHED_PASS)
	$(SCHED_PASS) $(BENCH_FAIR_ARGS)
