#!/bin/sh
# The closing line of `make check`: unit and end-to-end totals together.
set -u
read up uf us < build/results/unit.txt 2>/dev/null || { up=0; uf=0; us=0; }
ep=0 ef=0 es=0
if [ -f build/results/e2e.xml ]; then
	set -- $(/usr/bin/python3 - <<'PY'
import xml.etree.ElementTree as ET
r = ET.parse("build/results/e2e.xml").getroot()
suites = [r] if r.tag == "testsuite" else list(r)
t = sum(int(s.get("tests", 0)) for s in suites)
f = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
k = sum(int(s.get("skipped", 0)) for s in suites)
print(t - f - k, f, k)
PY
)
	ep=$1 ef=$2 es=$3
fi
echo "$((up + ep)) passed, $((uf + ef)) failed, $((us + es)) skipped"
[ $((uf + ef)) -eq 0 ]
