# End-to-end tests: pytest on the real programs (bin/) and the fake cluster.
.PHONY: e2e
E2E_ARGS ?=
e2e: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dtsched $(BINDIR)/dttrain
	@mkdir -p build/results
	@DTCTL_BIN=$(CURDIR)/$(BINDIR) $(PYTHON) -m pytest tests/e2e -rs -v -p no:cacheprovider \
		--junitxml=build/results/e2e.xml $(E2E_ARGS); rc=$$?; \
		if [ $$rc -eq 5 ]; then echo "e2e: no tests collected"; rc=0; fi; exit $$rc
