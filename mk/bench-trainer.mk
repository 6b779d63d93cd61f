# dttrain (CPU) against PyTorch on the same MLP, measured in the same run
# (bench/trainer_cpu.sh, bench/trainer_torch.py).  Not part of check.
#
#   make bench-deps              installs python3-torch (Debian, large), bench-only
#   make bench-trainer           60 steps x 3 rounds, dttrain 1 and 2 ranks, torch
#   make bench-trainer BENCH_TRAINER_ARGS='100 5'
.PHONY: bench-trainer
BENCH_TARGETS += bench-trainer
BENCH_DEPS += python3-torch
BENCH_TRAINER_ARGS ?=

bench-trainer: $(BINDIR)/dttrain
	DTTRAIN=$(BINDIR)/dttrain PYTHON=$(PYTHON) bench/trainer_cpu.sh $(BENCH_TRAINER_ARGS)
