# A dead webhook receiver never slows scheduling: submit rate and jobs ended with
# no notify: and with a receiver that never answers, in the same run
# (bench/bench_notify.py, docs/BENCHMARKS.md "notifications").  Not part of check.
#
#   make bench-notify BENCH_NOTIFY_ARGS='--seconds 10 --clients 4'
.PHONY: bench-notify
BENCH_TARGETS += bench-notify
BENCH_NOTIFY_ARGS ?=

bench-notify: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched
	$(PYTHON) bench/bench_notify.py --bin $(BINDIR) $(BENCH_NOTIFY_ARGS)
