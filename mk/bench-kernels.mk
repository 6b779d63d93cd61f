# CUDA kernel micro-benchmarks (bench/cuda/*.c, harness in bench/cuda/common.c):
# each kernel of trainer/kernels.cu against its CPU twin, validated, then timed.
# Built with the e2e programs whenever nvcc is found (so they do not rot on
# machines without a GPU); run by `make bench-kernels`, where without a GPU each
# says "skipped" and exits 0 (1 under DT_REQUIRE_GPU).
#
#   make bench-kernels                      every program
#   make bench-kernels BENCH_KERNELS=gemm   one
.PHONY: bench-kernels
BENCH_TARGETS += bench-kernels
BENCH_KERNEL_SRC := $(filter-out bench/cuda/common.c,$(wildcard bench/cuda/*.c))
BENCH_KERNELS ?= $(patsubst bench/cuda/%.c,%,$(BENCH_KERNEL_SRC))

ifneq ($(HAVE_CUDA),)
BENCH_KERNEL_BIN := $(patsubst bench/cuda/%.c,$(O)/bench-cuda/%,$(BENCH_KERNEL_SRC))
$(O)/bench-cuda/%.o: bench/cuda/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) -c $< -o $@
$(O)/bench-cuda/%: $(O)/bench-cuda/%.o $(O)/bench-cuda/common.o $(O)/libtrainer.a $(O)/libdt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) $(TRAINER_LINK) -lstdc++
e2e: $(BENCH_KERNEL_BIN)
bench-kernels: $(BENCH_KERNEL_BIN)
	@rc=0; for b in $(BENCH_KERNELS); do $(O)/bench-cuda/$$b || rc=1; done; exit $$rc
else
bench-kernels:
	@echo "bench-kernels: built without CUDA (no nvcc); skipped"
endif
