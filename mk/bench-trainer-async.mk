# dttrain --sync async (local SGD) against sync data parallelism with one slow rank:
# 2 MPI ranks on this machine, rank 1 slowed by --slow-rank (bench/trainer_async.py).
# Not part of check; figures in docs/BENCHMARKS.md ("dttrain: async vs sync").
#
#   make bench-trainer-async
#   make bench-trainer-async BENCH_TRAINER_ASYNC_ARGS='--steps 480 --slow-ms 100'
.PHONY: bench-trainer-async
BENCH_TARGETS += bench-trainer-async
BENCH_TRAINER_ASYNC_ARGS ?=

bench-trainer-async: $(BINDIR)/dttrain
	$(PYTHON) bench/trainer_async.py --dttrain $(BINDIR)/dttrain $(BENCH_TRAINER_ASYNC_ARGS)
