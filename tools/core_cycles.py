#!/usr/bin/env python3
"""Files of a C folder that call each other in a circle (by function definitions and uses).
Usage: core_cycles.py DIR  -> prints each circle of two or more files; exit 1 if any.
A copy of ../shared/tools/core_cycles.py kept in the repo, so CI's "layers"
stage never depends on shared/ (tools/check_layers.py adds the header-aware
and cross-layer checks)."""
import re, sys, os
d = sys.argv[1]
files = sorted(f for f in os.listdir(d) if f.endswith('.c'))
defs, text = {}, {}
for f in files:
    s = open(os.path.join(d, f), errors='replace').read()
    s = re.sub(r'/\*.*?\*/', '', s, flags=re.S); s = re.sub(r'//[^\n]*', '', s)
    s = re.sub(r'"(\\.|[^"\\])*"', '""', s)
    text[f] = s
    for m in re.finditer(r'^(?!static\b)[A-Za-z_][^;{}()\n]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{', s, flags=re.M):
        defs.setdefault(m.group(1), f)
edges = {f: set() for f in files}
for f in files:
    for name in set(re.findall(r'\b([A-Za-z_]\w*)\s*\(', text[f])):
        g = defs.get(name)
        if g and g != f: edges[f].add(g)
index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]
def strong(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index: strong(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        c = []
        while True:
            w = stack.pop(); on.discard(w); c.append(w)
            if w == v: break
        if len(c) > 1: sccs.append(sorted(c))
sys.setrecursionlimit(10000)
for f in files:
    if f not in index: strong(f)
for c in sccs: print('circle: ' + ' '.join(c))
sys.exit(1 if sccs else 0)
