# Sweep search quality: dtctl's TPE + ASHA (scheduler/search.c, asha.c) against
# Optuna's TPESampler + SuccessiveHalvingPruner on simulated learning curves,
# both driven the same way and measured in the same run.  Not part of check.
#
#   make bench-deps              installs python3-optuna (Debian), bench-only
#   make bench-sweep             build bench/sweep_sim, run 10 seeds x 3 objectives
#   make bench-sweep BENCH_SWEEP_ARGS='--seeds 3 --objectives branin'
#   make bench-sweep BENCH_SWEEP_ARGS='--seed-start 100 --seeds 100 --cache $(O)/optuna-cache.json'
#                                choosing defaults: never on the reported seeds 0-9
.PHONY: bench-sweep
BENCH_TARGETS += bench-sweep
BENCH_DEPS += python3-optuna
SWEEP_SIM := $(O)/bench/sweep_sim
BENCH_SWEEP_ARGS ?=

$(SWEEP_SIM): bench/sweep_sim.c $(O)/libsched.a $(O)/libdt.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(O)/libsched.a $(O)/libdt.a $(LIBS)

bench-sweep: $(SWEEP_SIM)
	$(PYTHON) bench/bench_sweep_quality.py --sim $(SWEEP_SIM) $(BENCH_SWEEP_ARGS)


# The search at scale: 200, 2,000 and 10,000 trials of 0.1 s on 64 simulated slots,
# random and TPE: CPU per trial, suggestion latency, makespan/ideal with the
# controller's own CPU on the clock (bench/sweep_sim.c --epoch-seconds)
.PHONY: bench-sweep-scale
BENCH_TARGETS += bench-sweep-scale
bench-sweep-scale: $(SWEEP_SIM)
	@uptime
	@for m in random bayes; do for n in 200 2000 10000; do printf '%-6s %5d trials: ' $$m $$n; \
		$(SWEEP_SIM) hartmann6 --method $$m --no-asha --epochs 1 --duration-sigma 0 \
			--workers 64 --budget $$n --epoch-seconds 0.1 | tail -1 || exit 1; done; done
