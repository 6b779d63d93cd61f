# Fuzzing: every tests/fuzz/fuzz_<name>.c is one libFuzzer target.
#
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_BUILD=fuzz]
#
# builds each target in build/$(FUZZ_BUILD) with clang (the Makefile's fuzz*
# BUILD sets CC=clang, -fsanitize=fuzzer-no-link,address,undefined and
# -DDT_FUZZING for the library objects) and runs it FUZZ_SECONDS.  Seeds live
# in tests/fuzz/corpus/<name>/ and are only read; what the fuzzer finds goes
# to build/$(FUZZ_BUILD)/fuzz/corpus-<name>/, crashes to build/$(FUZZ_BUILD)/fuzz/.
# A target links libdt.a unless it sets fuzz_<name>_LIBS.
.PHONY: fuzz fuzz-build
FUZZ_SECONDS ?= 60
FUZZ_BUILD ?= fuzz
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))

fuzz_config_LIBS = $(O)/libdt.a
fuzz_heartbeat_LIBS = $(O)/libsched.a $(O)/libcli.a $(O)/libagent.a $(O)/libsched.a $(O)/libdt.a
fuzz_specs_LIBS = $(O)/libsched.a $(O)/libcli.a $(O)/libagent.a $(O)/libsched.a $(O)/libdt.a

ifneq ($(filter fuzz%,$(BUILD)),)
$(O)/fuzz/%: tests/fuzz/%.c $(O)/libdt.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(or $($*_LIBS),$(O)/libdt.a) \
		$(LDFLAGS) -fsanitize=fuzzer $(LIBS)

$(O)/fuzz/fuzz_heartbeat: $(O)/libsched.a $(O)/libcli.a $(O)/libagent.a
$(O)/fuzz/fuzz_specs: $(O)/libsched.a $(O)/libcli.a $(O)/libagent.a

fuzz-build: $(addprefix $(O)/fuzz/,$(FUZZ_TARGETS))

fuzz: fuzz-build
	@set -e; for t in $(FUZZ_TARGETS); do \
		name=$${t#fuzz_}; seeds=tests/fuzz/corpus/$$name; work=$(O)/fuzz/corpus-$$name; \
		mkdir -p $$work $$seeds; \
		echo "fuzz: $$t for $(FUZZ_SECONDS)s (seeds: $$seeds)"; \
		ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(O)/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
			-artifact_prefix=$(O)/fuzz/ -print_final_stats=1 $$work $$seeds; \
	done
else
fuzz:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) fuzz
endif
