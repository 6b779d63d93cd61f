# dttrain: the built-in trainer.  trainer/dttrain.c holds main(); every other
# trainer/*.c goes into libtrainer.a (linked by unit tests too); trainer/*.cu are
# compiled by nvcc when CUDA is detected (DT_HAVE_CUDA), else skipped.
TRAINER_SRC := $(filter-out trainer/dttrain.c,$(wildcard trainer/*.c))
TRAINER_CU := $(if $(HAVE_CUDA),$(wildcard trainer/*.cu),)
TRAINER_DEFS := $(if $(HAVE_CUDA),-DDT_HAVE_CUDA) $(if $(HAVE_NCCL),-DDT_HAVE_NCCL) \
	$(if $(HAVE_MPI),-DDT_HAVE_MPI) $(if $(HAVE_BLAS),-DDT_HAVE_BLAS)
TRAINER_CFLAGS := $(MPI_CFLAGS) $(BLAS_CFLAGS) $(if $(HAVE_OPENMP),-fopenmp) $(TRAINER_DEFS) \
	$(if $(HAVE_CUDA),-I$(CUDA_HOME)/include) $(if $(NCCL_HOME),-I$(NCCL_HOME)/include)
# -O3 for the trainer outside sanitizer builds: the memory-bound loops (bias +
# activation, optimisers) only vectorise at -O3 (baseline SSE2: binaries are
# copied to other nodes, so no -march=native).
TRAINER_OPT := $(if $(filter asan% fuzz%,$(BUILD)),,-O3)
TRAINER_CFLAGS += $(TRAINER_OPT)
comma := ,
CUDA_LINK := -L$(CUDA_HOME)/lib64 -Wl$(comma)-rpath$(comma)$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt
TRAINER_LINK := $(MPI_LIBS) $(BLAS_LIBS) $(if $(HAVE_OPENMP),-fopenmp) \
	$(if $(HAVE_CUDA),$(CUDA_LINK)) \
	$(if $(HAVE_NCCL),$(if $(NCCL_HOME),-L$(NCCL_HOME)/lib -Wl$(comma)-rpath$(comma)$(NCCL_HOME)/lib) -lnccl)
TRAINER_LIB := $(O)/libtrainer.a

$(O)/trainer/%.o: trainer/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) -c $< -o $@

# CUDA architectures.  dttrain is copied to every node of a job, so the kernels
# must load on whatever GPU a node has: a binary with only sm_90 code failed
# with "no kernel image" on A100/L40S/consumer cards.
#   release (make install, or CUDA_FAT=1): machine code for every architecture
#     `nvcc --list-gpu-arch` lists from sm_70 up (what this toolkit supports;
#     CUDA 13 starts at sm_75), ~8x the compile time of one architecture;
#   dev (everything else, make check included): machine code for the GPUs
#     nvidia-smi sees here, else sm_90, so a rebuild stays a few seconds;
#   both: PTX of the lowest architecture, which the driver compiles at load
#     time on any other GPU (newer than the toolkit too), so even a dev binary
#     runs everywhere, only slower to start the first time.
# CUDA_ARCHS="80 90" (or 80,90 / sm_80) overrides the machine-code list,
# CUDA_PTX=NN the PTX architecture (empty: none).
CUDA_LIST_ARCHS = $(shell $(NVCC) --list-gpu-arch 2>/dev/null | sed -n 's/^compute_//p' | \
	awk '$$1 >= 70' | sort -n)
CUDA_LOCAL_ARCHS = $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | \
	tr -d '. ' | sort -un)
CUDA_FAT ?= $(if $(filter install,$(MAKECMDGOALS)),1,)
ifeq ($(origin CUDA_ARCHS),undefined)
  CUDA_ARCHS = $(if $(CUDA_FAT),$(CUDA_LIST_ARCHS),\
	$(or $(filter $(CUDA_LIST_ARCHS),$(CUDA_LOCAL_ARCHS)),90))
endif
CUDA_PTX ?= $(firstword $(CUDA_LIST_ARCHS))
cuda_arch_list = $(patsubst sm_%,%,$(patsubst compute_%,%,$(subst $(comma), ,$(1))))
NVCC_ARCH_FLAGS = $(foreach a,$(call cuda_arch_list,$(CUDA_ARCHS)),-gencode arch=compute_$(a)$(comma)code=sm_$(a)) \
	$(if $(CUDA_PTX),-gencode arch=compute_$(CUDA_PTX)$(comma)code=compute_$(CUDA_PTX))
NVCC_FLAGS = -O3 -std=c++17 -Ilib -I. $(TRAINER_DEFS) $(NVCC_ARCH_FLAGS) \
	$(if $(word 2,$(call cuda_arch_list,$(CUDA_ARCHS))),--threads 2)

# The flags are part of what the object is built from: this file changes (and
# kernels.cu.o is rebuilt) only when they do, e.g. between dev and install.
$(O)/trainer/nvcc-flags: FORCE
	@mkdir -p $(@D)
	@echo '$(NVCC_FLAGS)' | cmp -s - $@ || echo '$(NVCC_FLAGS)' > $@
.PHONY: FORCE
FORCE:

# -MMD -MP: kernels.cu.d lists gpu.h, kernels.h, check.h (read with the other
# .d files by the top Makefile), so editing a header rebuilds the object.
$(O)/trainer/%.cu.o: trainer/%.cu $(O)/trainer/nvcc-flags
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -MMD -MP -c $< -o $@

.PHONY: cuda-archs
cuda-archs:
	@echo 'machine code: $(or $(call cuda_arch_list,$(CUDA_ARCHS)),none)'
	@echo 'PTX:          $(or $(CUDA_PTX),none)'

$(O)/libtrainer.a: $(call objs,$(TRAINER_SRC)) $(patsubst %.cu,$(O)/%.cu.o,$(TRAINER_CU))

$(BINDIR)/dttrain: $(O)/trainer/dttrain.o $(O)/libtrainer.a $(O)/libdt.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) $(TRAINER_LINK) $(if $(HAVE_CUDA),-lstdc++)

# The CUDA twin tests (tests/unit/test_trainer_gpu.c) built WITH CUDA; the
# unit-test build (ASan) compiles the same file without CUDA, where it only
# reports a skip.  tests/e2e/test_trainer_gpu.py runs this program and skips
# visibly when it is missing or finds no GPU.
ifneq ($(HAVE_CUDA),)
TRAINER_GPU_TEST := $(O)/gpu-tests/test_trainer_gpu
$(TRAINER_GPU_TEST): tests/unit/test_trainer_gpu.c $(O)/libtrainer.a $(O)/libdt.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) -Itests/unit -o $@ $< $(LDFLAGS) $(O)/libtrainer.a \
		$(O)/libdt.a $(LIBS) $(TRAINER_LINK) -lcmocka -lstdc++
e2e: $(TRAINER_GPU_TEST)
endif
# Where nvidia-smi lists a GPU, a skip would be a pass that tested nothing (a
# driver too old for the runtime used to look like "no GPU"): DT_REQUIRE_GPU=1
# turns every skip into a failure.  An explicit DT_REQUIRE_GPU wins.
GPU_SEEN = $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
TRAINER_REQUIRE_GPU = $${DT_REQUIRE_GPU:-$(if $(filter-out 0,$(GPU_SEEN)),1,0)}
.PHONY: trainer-gpu-test
trainer-gpu-test: $(TRAINER_GPU_TEST)
ifneq ($(TRAINER_GPU_TEST),)
	DT_REQUIRE_GPU=$(TRAINER_REQUIRE_GPU) $(TRAINER_GPU_TEST)
else
	@if [ "$(TRAINER_REQUIRE_GPU)" != 0 ]; then \
		echo "trainer-gpu-test: a GPU is required (DT_REQUIRE_GPU, or nvidia-smi lists one)," \
			"but this build has no CUDA: put nvcc on PATH or set CUDA_HOME" >&2; exit 1; fi
	@echo "trainer-gpu-test: built without CUDA; skipped"
endif
