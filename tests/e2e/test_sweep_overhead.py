"""What each trial of a sweep costs beyond its program, checked without timing anything
(issue 34 item 5: 200 x 1 s trials on 8 slots <= 1.03 of ideal).

Every task starts a dtshim (its supervisor), so what ld.so maps for it is paid by every
trial, eight at a time on a node whose slots turn over together (docs/BENCHMARKS.md,
"sweep overhead"; bench/bench_sweep_overhead.py measures the whole):
  * dtshim names libc.so.6 alone: libyaml, jansson and Nettle are linked in, libm is
    not used.
"""
from test_client_start import SANITIZERS, needed


def test_dtshim_needs_libc_alone(dtctl_bin):
    libs = [lib for lib in needed(dtctl_bin / "dtshim") if not lib.startswith(SANITIZERS)]
    assert libs == ["libc.so.6"], (
        "bin/dtshim names %s: every library ld.so maps costs each task's start, a sweep "
        "trial's among them (docs/BENCHMARKS.md, 'sweep overhead'); link it in (Makefile "
        "CLI_LIBS)" % libs)
