# The fabric test's own overhead (dtctl doctor --fabric [--quick] against the same
# `mpirun dttrain --fabric` typed on a node) and what `preflight: true` adds to a 3-node
# job's start, on 4 fake nodes.  Needs root (fake cluster).  Not part of check.
#
#   make bench-fabric                        5 rounds
#   make bench-fabric BENCH_FABRIC_ARGS='--rounds 10'
.PHONY: bench-fabric
BENCH_TARGETS += bench-fabric
BENCH_FABRIC_ARGS ?=

bench-fabric: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched $(BINDIR)/dttrain
	$(PYTHON) bench/bench_fabric.py --bin $(BINDIR) $(BENCH_FABRIC_ARGS)
