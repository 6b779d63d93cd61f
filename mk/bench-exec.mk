# dtctl exec against pdsh and clush: `dtctl exec -- true` on 16 fake nodes,
# alternating with `pdsh -R ssh -f 32` and `clush -f 32` on the same nodes,
# the same key and the same known_hosts (through ~/.dtctl/ssh_config); also
# times a full `dtctl init` of the 16 nodes.  Needs root (fake cluster, netns).
#
#   make bench-deps                  installs pdsh and clustershell (Debian), bench-only
#   make bench-exec                  16 nodes, 15 rounds
#   make bench-exec BENCH_EXEC_ARGS='-n 8 -r 5'
#   make bench-exec BENCH_EXEC_ARGS='-n "4 16 48" -r 5'      the growth curve (issue 34)
#   make bench-exec BENCH_EXEC_ARGS='-c OTHER/bin'           another build's dtctl in the same rounds
.PHONY: bench-exec
BENCH_TARGETS += bench-exec
BENCH_DEPS += pdsh clustershell
BENCH_EXEC_ARGS ?=

bench-exec: $(BINDIR)/dtctl $(BINDIR)/dtagent $(BINDIR)/dtshim $(BINDIR)/dttrain
	bench/bench_exec.sh -b $(BINDIR) $(BENCH_EXEC_ARGS)
