# dtctl - top-level build.
#
#   make            build bin/dtctl bin/dtagent bin/dtshim bin/dtsched bin/dttrain (developer build)
#   make deps       install the Debian packages the project needs (only what is missing)
#   make check      deps + build + unit tests under ASan/UBSan + end-to-end tests
#   make demo       deps (build set) + build + the main job on a one-node local cluster
#   make check-fresh  ./dt demo + ./dt check in a bare Debian 12 root (mmdebstrap; slow, not CI)
#   make lint       cppcheck + clang-tidy
#   make fuzz       libFuzzer targets (clang), FUZZ_SECONDS each
#   make bench      benchmarks (not part of check)
#   make man        man pages from the option tables into build/<BUILD>/man (dtctl help --man)
#   make install PREFIX=/usr/local   (programs, templates, man pages, bash completion)
#
# Sources are found by wildcard: a new lib/foo.c or cli/cmd-foo.c needs no edit here.
# Each program's main lives in one file (cli/dtctl.c, agent/dtagent.c,
# scheduler/dtsched.c, trainer/dttrain.c); every other file of its folder goes into
# an archive that unit tests link too.  Area-specific rules live in mk/*.mk.

SHELL := /bin/bash
VERSION := 0.1.0
PREFIX ?= /usr/local
CC ?= cc
BUILD ?= dev
O := build/$(BUILD)
PYTHON ?= /usr/bin/python3

PKGS := libssh2 yaml-0.1 libmicrohttpd jansson sqlite3 libcrypto nettle
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# libssh2 and libcrypto are not linked: lib/ssh-dl.c loads them when an SSH command
# needs them (mapping them cost every process 1.6 ms at start; docs/BENCHMARKS.md)
PKG_LIBS := $(shell pkg-config --libs $(filter-out libssh2 libcrypto,$(PKGS)) 2>/dev/null)

WARN := -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wformat=2 -Wvla
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -DDT_VERSION='"$(VERSION)"' -g -Ilib -I. -MMD -MP

ifneq ($(filter asan%,$(BUILD)),)
  OPT := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
  LDOPT := -fsanitize=address,undefined
  NO_CUDA := 1
else ifneq ($(filter fuzz%,$(BUILD)),)
  CC := clang
  OPT := -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -DDT_FUZZING
  LDOPT := -fsanitize=address,undefined
  NO_CUDA := 1
else
  OPT := -O2
  LDOPT :=
endif

CFLAGS ?=
CFLAGS := $(BASE_CFLAGS) $(WARN) $(OPT) $(PKG_CFLAGS) $(CFLAGS)
LDFLAGS := $(LDOPT) $(LDFLAGS)
LIBS := $(PKG_LIBS) -lm -lpthread -ldl
# libcurl (notifications, scheduler/notify.c) only where it is used: dtsched and
# the programs that link its archive whole (unit tests); never dtctl, whose
# every start would load its TLS, HTTP/2, LDAP and Kerberos libraries
CURL_LIBS := $(shell pkg-config --libs libcurl 2>/dev/null || echo -lcurl)
SCHED_LIBS = $(LIBS) $(CURL_LIBS)

# --- component detection (printed as a ✓/✗ table by `make detect`) -------------
CUDA_HOME ?= $(or $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)),/usr/local/cuda)
NVCC := $(wildcard $(CUDA_HOME)/bin/nvcc)
# NCCL: the toolkit's, the system's, or NCCL_HOME (include/ + lib/, e.g. PyTorch's
# nvidia-nccl wheel: scripts/gpu-remote.sh)
NCCL_HOME ?=
HAVE_NCCL := $(if $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h \
	$(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h)),1,)
ifneq ($(NO_CUDA),)
  NVCC :=
  HAVE_NCCL :=
endif
HAVE_CUDA := $(if $(NVCC),1,)
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS := $(shell pkg-config --libs ompi-c 2>/dev/null)
HAVE_MPI := $(if $(MPI_LIBS),1,)
HAVE_BLAS := $(if $(shell pkg-config --exists openblas 2>/dev/null && echo y),1,)
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS := $(shell pkg-config --libs openblas 2>/dev/null)
HAVE_OPENMP := $(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo 1)

.PHONY: all detect deps check check-fresh unit e2e demo lint fuzz bench install clean help man
# Side-by-side work trees: BUILD=dev-NAME / asan-NAME put everything under build/NAME.
ifeq ($(BUILD),dev)
BINDIR := bin
else
BINDIR := $(O)/bin
endif
PROGRAMS = $(BINDIR)/dtctl $(BINDIR)/dtctl-full $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched $(BINDIR)/dttrain
all: detect $(PROGRAMS)

help:
	@sed -n '3,14p' Makefile | sed 's/^# \{0,1\}//'

detect:
	@printf '%s CUDA     %s\n' $(if $(HAVE_CUDA),'✓','✗') '$(if $(HAVE_CUDA),$(NVCC),not found (CPU-only dttrain; set CUDA_HOME or put nvcc on PATH))'
	@printf '%s NCCL     %s\n' $(if $(HAVE_NCCL),'✓','✗') '$(if $(HAVE_NCCL),found,not found)'
	@printf '%s MPI      %s\n' $(if $(HAVE_MPI),'✓','✗') '$(if $(HAVE_MPI),Open MPI,not found (make deps))'
	@printf '%s OpenBLAS %s\n' $(if $(HAVE_BLAS),'✓','✗') '$(if $(HAVE_BLAS),found,not found (make deps))'
	@printf '%s OpenMP   %s\n' $(if $(HAVE_OPENMP),'✓','✗') '$(if $(HAVE_OPENMP),found,not found)'

# --- sources -------------------------------------------------------------------
LIB_SRC := $(wildcard lib/*.c)
CLI_SRC := $(filter-out cli/dtctl.c cli/front.c,$(wildcard cli/*.c))
AGENT_SRC := $(filter-out agent/dtagent.c agent/dtshim.c,$(wildcard agent/*.c))
SCHED_SRC := $(filter-out scheduler/dtsched.c,$(wildcard scheduler/*.c))

objs = $(patsubst %.c,$(O)/%.o,$(1))

$(O)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(O)/libdt.a: $(call objs,$(LIB_SRC))
$(O)/libcli.a: $(call objs,$(CLI_SRC))
$(O)/libagent.a: $(call objs,$(AGENT_SRC))
$(O)/libsched.a: $(call objs,$(SCHED_SRC))
$(O)/%.a:
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^


PROG_LIBS = $(O)/libcli.a $(O)/libagent.a $(O)/libsched.a $(O)/libdt.a

, := ,
# dtctl is exec'd once per command (a submit is one run): libyaml, jansson and Nettle go
# in statically where their -dev packages installed the archives, which saves the dynamic
# loader ~0.2 ms of CPU per run (three objects to map and relocate; docs/BENCHMARKS.md,
# "submit rate").  libc stays shared (NSS, the dlopen of libssh2); libm is not linked
# (--as-needed: lib/math-dl.h loads it for the sweep code that uses it), so ld.so maps
# libc alone (docs/BENCHMARKS.md, "client start"; tests/e2e/test_client_start.py).
CLI_STATIC := $(if $(and $(filter /%,$(shell $(CC) -print-file-name=libyaml.a)),\
	$(filter /%,$(shell $(CC) -print-file-name=libjansson.a)),\
	$(filter /%,$(shell $(CC) -print-file-name=libnettle.a))),-lyaml -ljansson -lnettle)
CLI_LIBS := $(if $(CLI_STATIC),-Wl$(,)-Bstatic $(CLI_STATIC) -Wl$(,)-Bdynamic) \
	$(filter-out $(CLI_STATIC),$(LIBS))

$(BINDIR)/dtctl-full: $(O)/cli/dtctl.o $(PROG_LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -Wl,--as-needed $(CLI_LIBS)

# bin/dtctl is a static-pie front of the same sources (cli/front.c): no ld.so at all,
# ~0.15-0.2 ms less per call (docs/BENCHMARKS.md, "client start").  The commands and
# modes that need SSH, libcrypto or the user and host databases (NSS) run in
# bin/dtctl-full, which the front execv()s from its own folder before they start.
# The wrapped NSS calls hand over too, and dt_ssh_lib()/dt_libm() are front.c's, so
# the front never dlopens (tests/e2e/test_client_start.py).  Under ASan/UBSan or
# without libc.a (libc6-dev) and the three archives, dtctl is dtctl-full's link.
FRONT_WRAP := getpwuid getpwnam getpwent setpwent endpwent getaddrinfo freeaddrinfo
FRONT := $(if $(filter asan% fuzz%,$(BUILD)),,$(and $(CLI_STATIC),\
	$(filter /%,$(shell $(CC) -print-file-name=libc.a)),$(filter /%,$(shell $(CC) -print-file-name=libm.a))))
ifneq ($(FRONT),)
$(O)/cli/dtctl-front.o: cli/dtctl.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DDT_FRONT -c $< -o $@
# --fatal-warnings: glibc marks its NSS calls and dlopen with a link-time warning ("Using
# 'X' in statically linked applications ..."), so code of the front that reaches one fails
# the build: wrap it in cli/front.c and FRONT_WRAP, or leave the command to dtctl-full.
$(BINDIR)/dtctl: $(O)/cli/dtctl-front.o $(O)/cli/front.o $(PROG_LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -static-pie -Wl,--fatal-warnings -o $@ $^ $(FRONT_WRAP:%=-Wl$(,)--wrap=%) \
		$(CLI_STATIC) -lm
else
$(BINDIR)/dtctl: $(O)/cli/dtctl.o $(PROG_LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -Wl,--as-needed $(CLI_LIBS)
endif
$(BINDIR)/dtagent: $(O)/agent/dtagent.o $(PROG_LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)
# dtshim: exec'd per task and per MPI rank, so it links only what it uses
# (--as-needed drops microhttpd, SQLite, libssh2 and their TLS stacks: see agent/dtshim.c)
# and, as dtctl, libyaml, jansson and Nettle statically: ld.so maps libc alone (a sweep's
# every trial pays a dtshim start; docs/BENCHMARKS.md, "sweep overhead")
$(BINDIR)/dtshim: $(O)/agent/dtshim.o $(O)/libagent.a $(O)/libdt.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -Wl,--as-needed $(CLI_LIBS)
# (libcli.a once more after libsched.a: the dashboard's sweep page is the sweep
# report of cli/sweep-report.c, a pure function)
$(BINDIR)/dtsched: $(O)/scheduler/dtsched.o $(PROG_LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(O)/libcli.a $(SCHED_LIBS)

# Area rules: trainer (dttrain, CUDA), unit tests, fuzzing, benchmarks, ...
include $(sort $(wildcard mk/*.mk))

# Benchmarks: each mk/bench-*.mk appends its target to BENCH_TARGETS and its
# package installs to BENCH_DEPS (bench-only tools: pdsh, clustershell, torch, optuna).
.PHONY: bench bench-deps
bench-deps:
	@DT_EXTRA_DEPS="$(sort $(BENCH_DEPS))" scripts/deps.sh
bench: all bench-deps $(BENCH_TARGETS)
	@echo "bench: figures and commands are in docs/BENCHMARKS.md"

# --- the README's commands -----------------------------------------------------
deps:
	@scripts/deps.sh

check:
	@MAKE="$(MAKE)" scripts/check.sh

# the README's commands on a bare Debian 12 (mmdebstrap), from a clone under /root
check-fresh:
	@scripts/check-fresh.sh

# deps first, then the build in a new make: this one computed pkg-config's flags
# (and found no MPI, BLAS or OpenMP) before the packages were there.
demo:
	@scripts/deps.sh --build
	@$(MAKE) --no-print-directory -j2 all
	@DTCTL_BIN=$(CURDIR)/$(BINDIR) scripts/demo.sh

LINT_SRC = $(LIB_SRC) $(CLI_SRC) cli/dtctl.c $(AGENT_SRC) agent/dtagent.c agent/dtshim.c $(SCHED_SRC) \
	scheduler/dtsched.c $(wildcard trainer/*.c)
lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
		--inline-suppr --suppress=missingIncludeSystem --library=tests/lint/jansson.cfg \
		--std=c11 -Ilib -I. \
		-D_GNU_SOURCE -DDT_VERSION='"$(VERSION)"' $(LINT_SRC)
	clang-tidy --quiet $(LINT_SRC) -- $(BASE_CFLAGS) $(PKG_CFLAGS) $(MPI_CFLAGS) $(BLAS_CFLAGS) \
		-DDT_HAVE_MPI -DDT_HAVE_BLAS 2>&1 | grep -v 'warnings generated' ; \
		exit $${PIPESTATUS[0]}
	$(MAKE) --no-print-directory lint-callgraph

# dtsched's files are layers: no file calls up into a file that calls it, no
# circle (tests/lint/callgraph.py reads the objects' symbols; docs/architecture.md)
.PHONY: lint-callgraph
lint-callgraph: $(call objs,$(SCHED_SRC) scheduler/dtsched.c)
	$(PYTHON) tests/lint/callgraph.py $(O)

# Man pages: rendered by dtctl from the same option tables, usage lines and command
# summaries as --help, so they are generated, not committed (nothing to go stale).
MANDIR := $(O)/man
man: $(BINDIR)/dtctl
	@mkdir -p $(MANDIR)
	@rm -f $(MANDIR)/*.1
	$(BINDIR)/dtctl help --man > $(MANDIR)/dtctl.1
	@for c in $$($(BINDIR)/dtctl __complete | grep -v -e '^-' -e '^help$$'); do \
		$(BINDIR)/dtctl help --man $$c > $(MANDIR)/dtctl-$$c.1 || exit 1; done
	@echo "man: $$(ls $(MANDIR) | wc -l) pages in $(MANDIR) (man -l $(MANDIR)/dtctl.1)"

install: all man
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/dtctl/templates
	install -m 0755 bin/dtctl bin/dtctl-full bin/dtagent bin/dtshim bin/dtsched bin/dttrain $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 templates/* $(DESTDIR)$(PREFIX)/share/dtctl/templates/
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 0644 $(MANDIR)/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 scripts/dtctl-completion.bash \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions/dtctl

clean:
	rm -rf build bin

-include $(shell find build/$(BUILD) -name '*.d' 2>/dev/null)
