#!/bin/sh
# `make check`: deps, developer build, unit tests under ASan+UBSan, end-to-end
# tests, and the end-to-end tests that need no fake cluster again on the
# ASan+UBSan programs (daemons included); every stage runs even if an earlier
# one failed, and the run ends with one "N passed, N failed, N skipped" line.
# Exit status: 0 only if all passed.
set -u
MAKE=${MAKE:-make}
rc=0
rm -f build/results/unit.txt build/results/e2e.xml build/results/e2e-asan.xml
scripts/deps.sh || { echo "check: installing dependencies failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
$MAKE --no-print-directory -j2 all || { echo "check: build failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
$MAKE --no-print-directory -j2 BUILD=asan unit || rc=1
$MAKE --no-print-directory e2e || rc=1
$MAKE --no-print-directory -j2 BUILD=asan e2e E2E_PATHS='$(E2E_ASAN_PATHS)' \
	E2E_XML=build/results/e2e-asan.xml || rc=1
scripts/summary.sh || rc=1
exit $rc
