#!/usr/bin/env python3
"""callgraph.py - no call circles between the files of dtsched (issue 28).

Reads the objects of scheduler/ (nm: T/D/B/R = defined, U = used) and draws
an edge A -> B when A.o uses a symbol B.o defines: a call, or a function or
table taken by address.  The files must form a layering: no file calls up
into a file that (directly or through others) calls it.  Each circle is
printed with the calls that make it; the fix is to move the function down
(or make the upper file subscribe to an event, or call through the backend
ops).

The sweep subsystem (sweep*.c, search.c, asha.c) is a unit on top of the
job API: no file outside it but sched.c (the top) may call into it.

usage: callgraph.py BUILD_DIR [--edges]   (e.g. build/dev; exit 1 on a circle)
"""
import collections
import glob
import os
import subprocess
import sys


def symbols(obj):
    out = subprocess.run(['nm', obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        p = line.split()
        if len(p) == 3 and p[1] in 'TDBRV':
            defined.add(p[2])
        elif len(p) == 2 and p[0] == 'U':
            used.add(p[1])
    return defined, used


def graph(build):
    objs = sorted(glob.glob(os.path.join(build, 'scheduler', '*.o')))
    if not objs:
        sys.exit('callgraph: no objects in %s/scheduler: build first (make all)' % build)
    owner, uses = {}, {}
    for o in objs:
        f = os.path.basename(o)[:-2] + '.c'
        defined, used = symbols(o)
        for s in defined:
            owner[s] = f
        uses[f] = used
    edges = collections.defaultdict(lambda: collections.defaultdict(list))
    for f, used in uses.items():
        for s in sorted(used):
            t = owner.get(s)
            if t and t != f:
                edges[f][t].append(s)
    return set(uses), edges


def sccs(nodes, succ):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ(w)))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    nodes, edges = graph(sys.argv[1])
    if '--edges' in sys.argv:
        for f in sorted(edges):
            for t in sorted(edges[f]):
                print('%s -> %s: %s' % (f, t, ' '.join(edges[f][t])))
        return 0
    bad = 0
    succ = lambda v: list(edges.get(v, {}))
    for comp in sccs(nodes, succ):
        if len(comp) < 2:
            continue
        bad = 1
        print('callgraph: these files of scheduler/ call each other in a circle: %s'
              % ', '.join(comp))
        for f in comp:
            for t in succ(f):
                if t in comp:
                    print('  %s -> %s: %s' % (f, t, ' '.join(edges[f][t])))
    # the sweep subsystem is a unit on top of the job API: only sched.c (the
    # top, which loads, steps and routes it) calls into it from outside
    unit = lambda f: f.startswith('sweep') or f in ('search.c', 'asha.c')
    for a in sorted(edges):
        for b in sorted(edges[a]):
            if unit(b) and not unit(a) and a != 'sched.c':
                print('callgraph: %s calls into the sweep unit (%s: %s); only sched.c may'
                      % (a, b, ' '.join(edges[a][b])))
                bad = 1
    if bad:
        print('callgraph: move the function down, or let the upper file subscribe to a job '
              'event (jobstate.h) or call through the backend ops (backend.h)')
    return bad


if __name__ == '__main__':
    sys.exit(main())
