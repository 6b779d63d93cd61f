# dtctl inside a Slurm allocation against Slurm's own launch (bench/bench_slurm.py,
# docs/slurm.md): a 4-node no-op, `dtctl run` (cold: head + agents' step each time;
# warm: once `dtctl slurm-agents` is up) vs `srun -N 4 true`, interleaved in one salloc.
#   flock /tmp/dtctl-fakecluster.lock make bench-slurm [BENCH_SLURM_ARGS='--rounds 20']
.PHONY: bench-slurm
BENCH_TARGETS += bench-slurm
bench-slurm: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched
	$(PYTHON) bench/bench_slurm.py --bin $(BINDIR) $(BENCH_SLURM_ARGS)
