# dtctl with `backend: slurm` against Slurm's own tools (bench/bench_slurm_backend.py):
# a 4-node no-op (dtctl run vs srun -N 4 true) and the submit rate (dtctl run -d vs
# sbatch), side by side on 4 fake nodes with a real Slurm.  Needs root.  Not part of check.
#
#   make bench-slurm
#   make bench-slurm BENCH_SLURM_ARGS='--rounds 10 --submits 50'
.PHONY: bench-slurm
BENCH_TARGETS += bench-slurm
BENCH_SLURM_ARGS ?=

bench-slurm: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched
	$(PYTHON) bench/bench_slurm_backend.py --bin $(BINDIR) $(BENCH_SLURM_ARGS)
