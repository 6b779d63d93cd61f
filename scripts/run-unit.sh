#!/bin/sh
# Run cmocka unit test programs, print their output, and record the totals in
# build/results/unit.txt for scripts/summary.sh.  Fails if any test fails.
set -u
O=$1; shift
mkdir -p build/results
passed=0 failed=0 skipped=0 rc=0
export CMOCKA_MESSAGE_OUTPUT=stdout
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for t in "$@"; do
	out=$("$t" 2>&1); code=$?
	printf '%s\n' "$out"
	p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
	f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
	s=$(printf '%s\n' "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' | tail -1)
	passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
	if [ $code -ne 0 ]; then
		rc=1
		[ -z "$f" ] && failed=$((failed + 1)) && echo "unit: $t exited $code"
	fi
done
echo "$passed $failed $skipped" > build/results/unit.txt
echo "unit: $passed passed, $failed failed, $skipped skipped"
exit $rc
