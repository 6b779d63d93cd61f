# Benchmarks of the agents and dtsched (docs/BENCHMARKS.md, "agents"):
#   bench-agent  1000 short tasks over 4 fake nodes through the agents, vs ssh and pdsh
#   bench-sched  dtsched with 1000 simulated nodes heartbeating every second
.PHONY: bench-agent bench-sched
BENCH_TARGETS += bench-agent bench-sched
BENCH_DEPS += pdsh
bench-agent: $(PROGRAMS)
	$(PYTHON) bench/bench_agent.py --bin $(BINDIR)
bench-sched: $(PROGRAMS)
	$(PYTHON) bench/bench_sched.py --bin $(BINDIR) --nodes 1000 --seconds 30 --queries 60
