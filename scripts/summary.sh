#!/bin/sh
# The closing line of `make check`: unit and end-to-end totals together.
set -u
read up uf us < build/results/unit.txt 2>/dev/null || { up=0; uf=0; us=0; }
ep=0 ef=0 es=0
for xml in build/results/e2e.xml build/results/e2e-asan.xml; do
	[ -f $xml ] || continue
	set -- $(/usr/bin/python3 - "$xml" <<'PY'
import sys
import xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
suites = [r] if r.tag == "testsuite" else list(r)
t = sum(int(s.get("tests", 0)) for s in suites)
f = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
k = sum(int(s.get("skipped", 0)) for s in suites)
print(t - f - k, f, k)
PY
)
	ep=$((ep + $1)) ef=$((ef + $2)) es=$((es + $3))
done
echo "$((up + ep)) passed, $((uf + ef)) failed, $((us + es)) skipped"
[ $((uf + ef)) -eq 0 ]
