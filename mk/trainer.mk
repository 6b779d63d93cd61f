# dttrain: the built-in trainer.  trainer/dttrain.c holds main(); every other
# trainer/*.c goes into libtrainer.a (linked by unit tests too); trainer/*.cu are
# compiled by nvcc when CUDA is detected (DT_HAVE_CUDA), else skipped.
TRAINER_SRC := $(filter-out trainer/dttrain.c,$(wildcard trainer/*.c))
TRAINER_CU := $(if $(HAVE_CUDA),$(wildcard trainer/*.cu),)
TRAINER_DEFS := $(if $(HAVE_CUDA),-DDT_HAVE_CUDA) $(if $(HAVE_NCCL),-DDT_HAVE_NCCL) \
	$(if $(HAVE_MPI),-DDT_HAVE_MPI) $(if $(HAVE_BLAS),-DDT_HAVE_BLAS)
TRAINER_CFLAGS := $(MPI_CFLAGS) $(BLAS_CFLAGS) $(if $(HAVE_OPENMP),-fopenmp) $(TRAINER_DEFS) \
	$(if $(HAVE_CUDA),-I$(CUDA_HOME)/include)
# -O3 for the trainer outside sanitizer builds: the memory-bound loops (bias +
# activation, optimisers) only vectorise at -O3 (baseline SSE2: binaries are
# copied to other nodes, so no -march=native).
TRAINER_OPT := $(if $(filter asan% fuzz%,$(BUILD)),,-O3)
TRAINER_CFLAGS += $(TRAINER_OPT)
comma := ,
CUDA_LINK := -L$(CUDA_HOME)/lib64 -Wl$(comma)-rpath$(comma)$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt
TRAINER_LINK := $(MPI_LIBS) $(BLAS_LIBS) $(if $(HAVE_OPENMP),-fopenmp) \
	$(if $(HAVE_CUDA),$(CUDA_LINK)) \
	$(if $(HAVE_NCCL),-lnccl)
TRAINER_LIB := $(O)/libtrainer.a

$(O)/trainer/%.o: trainer/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) -c $< -o $@

$(O)/trainer/%.cu.o: trainer/%.cu
	@mkdir -p $(@D)
	$(NVCC) -O3 -std=c++17 -Ilib -I. -arch=sm_90 $(TRAINER_DEFS) -c $< -o $@

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
.PHONY: trainer-gpu-test
trainer-gpu-test: $(TRAINER_GPU_TEST)
	$(if $(TRAINER_GPU_TEST),$(TRAINER_GPU_TEST),@echo "trainer-gpu-test: built without CUDA; skipped")
