# Unit tests: every tests/unit/test_*.c is one cmocka program, linked against all
# program archives, built with BUILD=asan by `make check` (ASan + UBSan).
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(patsubst tests/unit/%.c,$(O)/tests/%,$(UNIT_SRC))
UNIT_LIBS = $(TRAINER_LIB) $(PROG_LIBS) $(O)/libcli.a $(SCHED_LIBS) $(TRAINER_LINK) -lcmocka -lcrypto \
	$(if $(HAVE_CUDA),-lstdc++)   # test_auth: OpenSSL as the reference; CUDA objects need the C++ runtime

$(O)/tests/%: tests/unit/%.c $(PROG_LIBS) $(TRAINER_LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) $(BLAS_CFLAGS) -Itests/unit -o $@ $< $(LDFLAGS) $(UNIT_LIBS)

.PHONY: unit-build
unit-build: $(UNIT_BIN) $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched $(BINDIR)/dttrain

unit: unit-build
	@scripts/run-unit.sh $(O) $(UNIT_BIN)
