# Jobs in a container image against the same jobs bare (bench/bench_container.py):
# per-rank start overhead and a 4-node job, on the fake cluster with rootless podman.
# Needs root (fake cluster).  Not part of check.
#
#   make bench-container
#   make bench-container BENCH_CONTAINER_ARGS='--rounds 10'
.PHONY: bench-container
BENCH_TARGETS += bench-container
BENCH_CONTAINER_ARGS ?=

bench-container: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched
	$(PYTHON) bench/bench_container.py --bin $(BINDIR) $(BENCH_CONTAINER_ARGS)
