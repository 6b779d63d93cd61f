# dtctl with `backend: slurm` against Slurm's own tools (bench/bench_slurm_backend.py,
# docs/slurm-backend.md): a 4-node no-op (dtctl run vs srun -N 4 true) and the submit
# rate (dtctl run -d vs sbatch), and N one-second trials on 8 GPUs (separate Slurm jobs
# through dtctl vs a bare sbatch loop vs one packed allocation vs one job array,
# makespan / ideal), side by side on 4 fake nodes
# with a real Slurm.  Needs root.  Not part of check.
#   flock /tmp/dtctl-fakecluster.lock make bench-slurm-backend [BENCH_SLURM_BACKEND_ARGS='--rounds 10 --submits 50 --trials 16']
.PHONY: bench-slurm-backend
BENCH_TARGETS += bench-slurm-backend
BENCH_SLURM_BACKEND_ARGS ?=

bench-slurm-backend: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched
	$(PYTHON) bench/bench_slurm_backend.py --bin $(BINDIR) $(BENCH_SLURM_BACKEND_ARGS)
