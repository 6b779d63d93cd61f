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

# dttrain --model gpt against the same transformer in PyTorch (bench/trainer_gpt_torch.py):
# tokens/s, same run, interleaved rounds, on /usr/share/common-licenses/GPL-3.
#   make bench-trainer-gpt BENCH_TRAINER_GPT_ARGS='--steps 50 --rounds 5 --threads 2'
.PHONY: bench-trainer-gpt
BENCH_TARGETS += bench-trainer-gpt
BENCH_TRAINER_GPT_ARGS ?=

bench-trainer-gpt: $(BINDIR)/dttrain
	$(PYTHON) bench/trainer_gpt_torch.py --dttrain $(BINDIR)/dttrain $(BENCH_TRAINER_GPT_ARGS)

# dttrain on a GPU against PyTorch eager and torch.compile, and the cuBLAS GEMM ceiling
# (bench/trainer_gpu.py; on a lent GPU machine: scripts/gpu-remote.sh bench).
#   make bench-trainer-gpu BENCH_TRAINER_GPU_ARGS='--rounds 3 --steps 200'
.PHONY: bench-trainer-gpu
BENCH_TRAINER_GPU_ARGS ?=

bench-trainer-gpu: $(BINDIR)/dttrain
	$(PYTHON) bench/trainer_gpu.py --dttrain $(BINDIR)/dttrain $(BENCH_TRAINER_GPU_ARGS)
