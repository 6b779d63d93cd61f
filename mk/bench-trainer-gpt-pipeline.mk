# dttrain --model gpt split into pipeline stages (P = 2, 4) against one rank with 1 and 2
# threads: tokens/s and the measured bubble (bench/trainer_gpt_pipeline.py).
# Not part of check; figures in docs/BENCHMARKS.md ("dttrain --model gpt, pipeline stages").
#
#   make bench-trainer-gpt-pipeline
#   make bench-trainer-gpt-pipeline BENCH_TRAINER_GPT_PIPELINE_ARGS='--steps 40 --rounds 5'
.PHONY: bench-trainer-gpt-pipeline
BENCH_TARGETS += bench-trainer-gpt-pipeline
BENCH_TRAINER_GPT_PIPELINE_ARGS ?=

bench-trainer-gpt-pipeline: $(BINDIR)/dttrain
	$(PYTHON) bench/trainer_gpt_pipeline.py --dttrain $(BINDIR)/dttrain $(BENCH_TRAINER_GPT_PIPELINE_ARGS)
