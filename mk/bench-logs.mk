# dtctl logs against `LC_ALL=C sort -m` and `cat` (4 rank files x 65 MB, 2.0 M
# lines, timestamps interleaved; time and peak RSS by /usr/bin/time -v, medians of
# paired rounds) and dtctl logs -f against tail -F (delay of each line from its
# write, and the reader's CPU, with inotify and with DTCTL_LOGS_POLL=1).  Needs no
# cluster and no root.  Not part of check (docs/BENCHMARKS.md, "dtctl logs").
#
#   make bench-logs                      5 rounds, 20 s of following per mode
#   make bench-logs BENCH_LOGS_ARGS='--rounds 7 --base-bin /tmp/base/bin'
.PHONY: bench-logs
BENCH_TARGETS += bench-logs
BENCH_LOGS_ARGS ?=

bench-logs: $(BINDIR)/dtctl
	$(PYTHON) bench/bench_logs.py --bin $(BINDIR) $(BENCH_LOGS_ARGS)

# Following by polling (DTCTL_LOGS_POLL=1, as on NFS) a writer of one line after a
# silence of 1-10 s (the training-log pattern), beside tail -F; not in `make bench`
# (5 minutes).  BENCH_FOLLOW_ARGS='--period 1.2 --seconds 90 --base-bin /tmp/base/bin'
.PHONY: bench-follow-poll
BENCH_FOLLOW_ARGS ?= --period 1:10 --seconds 300

bench-follow-poll: $(BINDIR)/dtctl
	$(PYTHON) bench/bench_logs.py --bin $(BINDIR) --only follow-poll $(BENCH_FOLLOW_ARGS)
