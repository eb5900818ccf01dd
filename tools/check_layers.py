#!/usr/bin/env python3
"""The layers of cubec's tree, checked from the sources alone (no build).

The floors, in the folders' order (docs/architecture.md, src/core/server.h):
  include < base < world < core (coll/ inside) < backends, tune

1. Includes: every quoted #include of a file under src/, bench/, tools/ and
   examples/ must name a header its layer may see (RULES below). The build's
   include views (CMakeLists.txt: base-view, backend-view, tune-view) enforce
   most of this already; this says it before a build, in one table, with the
   rule that was broken.
2. Calls: no .c file calls a function defined in a higher floor, or in
   another layer of its own floor (tune and a backend, two backends), but
   for the arrows the registry owns (UPWARD below).
3. One list: docs/architecture.md and src/core/server.h carry the same
   layer list ("The layers of the tree, bottom to top" to its last line),
   word for word.
4. Circles: in every folder of src/, no two .c files call each other in a
   circle, counting the calls of the folder's header inline helpers at the
   files that use them (tools/core_cycles.py reads .c files only, so a circle
   through cuda_internal.h's helpers escaped it). A backend with subfolders
   (cpu/split/) is checked as one graph as well.

Usage: check_layers.py [ROOT]  -> prints each violation; exit 1 if any.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))

# What the backend view (CMakeLists.txt, CUBE_BACKEND_VIEW) shows of the
# core; coll/transport.h is where house.md moves transport.h.
BACKEND_VIEW_CORE = ['core/backend.h', 'core/config.h', 'core/tensor_map_types.h',
                     'core/transport.h', 'core/coll/transport.h']
# What the tune view (CUBE_TUNE_VIEW) shows of the core.
TUNE_VIEW_CORE = ['core/client_info.h', 'core/config.h', 'core/cache_dir.h']
# Benchmarks reach internals through bench/view/ only; these files are still
# being moved onto it (the collectives' benchmarks, with src/core/coll/).
BENCH_PENDING = {'bench/bench_collectives.c', 'bench/bench_collectives_mpi.c'}


# The floor of each layer of src/ (a backend is backends/<name>).
FLOORS = {'base': 0, 'world': 1, 'core': 2, 'tune': 3, 'backends': 3}
# Calls that run upward on purpose: the registry reaches the backends (their
# factories, each answering its transport's query, and the fault decorator
# that wraps them, house.md). Nothing else.
UPWARD = {
    ('src/core/registry.c', '*'),
}


def layer_of(path):
    parts = path.split('/')
    return 'backends/' + parts[2] if parts[1] == 'backends' else parts[1]


def rule_for(path):
    """(layer name, allowed prefixes) for a file |path| relative to ROOT, or None."""
    parts = path.split('/')
    if parts[0] == 'src':
        layer = parts[1]
        if layer == 'base':
            return 'base', ['base/', 'cube/']
        if layer == 'world':
            return 'world', ['world/', 'base/', 'cube/']
        if layer == 'core':
            return 'core', ['core/', 'world/', 'base/', 'cube/']
        if layer == 'tune':
            return 'tune', ['tune/', 'base/', 'cube/'] + TUNE_VIEW_CORE
        if layer == 'backends' and len(parts) > 3:
            name = parts[2]
            return 'backend ' + name, ['backends/%s/' % name, 'world/', 'base/', 'cube/'] + BACKEND_VIEW_CORE
        return None
    if parts[0] == 'bench':
        if path in BENCH_PENDING:
            return None
        if len(parts) > 2 and parts[1] == 'view':
            return None  # the view itself names the internals
        return 'bench', ['view/', 'cube/']
    if parts[0] in ('tools', 'examples'):
        return parts[0], ['cube/']
    return None


INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def check_includes(files):
    problems = []
    for path in files:
        rule = rule_for(path)
        if rule is None:
            continue
        layer, allowed = rule
        text = open(os.path.join(ROOT, path), errors='replace').read()
        for m in INCLUDE.finditer(text):
            name = m.group(1)
            if '/' not in name:
                continue  # a header beside it: the same layer
            if any(name == a or (a.endswith('/') and name.startswith(a)) for a in allowed):
                continue
            line = text.count('\n', 0, m.start()) + 1
            problems.append('%s:%d includes "%s": %s may include only %s' %
                            (path, line, name, layer, ', '.join(allowed)))
    return problems


# The call graph, read as tools/core_cycles.py reads it.
def strip(s):
    s = re.sub(r'/\*.*?\*/', '', s, flags=re.S)
    s = re.sub(r'//[^\n]*', '', s)
    return re.sub(r'"(\\.|[^"\\])*"', '""', s)


DEF = re.compile(r'^(?!static\b)[A-Za-z_][^;{}()\n]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{', re.M)
INLINE = re.compile(r'^static\s+inline\b[^;{}()]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{', re.M)
CALL = re.compile(r'\b([A-Za-z_]\w*)\s*\(')


def body_at(s, brace):
    depth = 0
    for i in range(brace, len(s)):
        if s[i] == '{':
            depth += 1
        elif s[i] == '}':
            depth -= 1
            if depth == 0:
                return s[brace:i + 1]
    return s[brace:]


def circles(paths, label):
    """Circles among the .c files |paths| (with the inline helpers of the
    headers beside them)."""
    defs, calls = {}, {}
    inlines = {}
    for p in paths:
        s = strip(open(os.path.join(ROOT, p), errors='replace').read())
        if p.endswith('.c'):
            calls[p] = set(CALL.findall(s))
            for m in DEF.finditer(s):
                defs.setdefault(m.group(1), p)
        else:
            for m in INLINE.finditer(s):
                inlines[m.group(1)] = set(CALL.findall(body_at(s, m.end() - 1))) - {m.group(1)}
    # A call to an inline helper is a call to what the helper calls.
    for p, names in calls.items():
        todo, seen = list(names & inlines.keys()), set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            names |= inlines[name]
            todo.extend(inlines[name] & inlines.keys())
    edges = {p: {defs[n] for n in names if n in defs and defs[n] != p} for p, names in calls.items()}
    index, low, stack, on, found = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            c = []
            while True:
                w = stack.pop()
                on.discard(w)
                c.append(w)
                if w == v:
                    break
            if len(c) > 1:
                found.append(sorted(c))

    sys.setrecursionlimit(10000)
    for p in sorted(edges):
        if p not in index:
            strong(p)
    return ['circle in %s: %s' % (label, ' '.join(c)) for c in found]


def check_calls(files):
    defs, calls = {}, {}
    for p in files:
        if not (p.startswith('src/') and p.endswith('.c')):
            continue
        s = strip(open(os.path.join(ROOT, p), errors='replace').read())
        calls[p] = set(CALL.findall(s))
        for m in DEF.finditer(s):
            defs.setdefault(m.group(1), p)
    problems = []
    for p in sorted(calls):
        mine = layer_of(p)
        for name in sorted(calls[p]):
            q = defs.get(name)
            if q is None or layer_of(q) == mine or (p, '*') in UPWARD or (p, name) in UPWARD:
                continue
            theirs = layer_of(q)
            if FLOORS.get(theirs.split('/')[0], 0) >= FLOORS.get(mine.split('/')[0], 0):
                problems.append('%s calls %s (%s): %s may not call %s' % (p, name, q, mine, theirs))
    return problems


LIST_HEAD = 'The layers of the tree, bottom to top'


def layer_list(path, prefix):
    """The layer list in |path|: its lines from LIST_HEAD to the first empty
    one, |prefix| (a comment's) taken off; None when it has none."""
    lines, on = [], False
    for line in open(os.path.join(ROOT, path), errors='replace').read().split('\n'):
        text = line[len(prefix):] if line.startswith(prefix) else line
        text = text.rstrip()
        if LIST_HEAD in text:
            on = True
        if on:
            if not text.strip() or text.strip().startswith('```'):
                break
            lines.append(text.strip())
    return lines or None


def check_layer_lists():
    doc = layer_list('docs/architecture.md', '')
    header = layer_list('src/core/server.h', '//')
    if doc is None or header is None:
        return ['the layer list ("%s") is missing from %s' %
                (LIST_HEAD, 'docs/architecture.md' if doc is None else 'src/core/server.h')]
    if doc != header:
        for a, b in zip(doc + [''] * len(header), header + [''] * len(doc)):
            if a != b:
                return ['docs/architecture.md and src/core/server.h differ in the layer list: '
                        '"%s" against "%s"' % (a, b)]
    return []


def main():
    files = []
    for top in ('src', 'bench', 'tools', 'examples'):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(('.c', '.h')):
                    files.append(os.path.relpath(os.path.join(dirpath, f), ROOT))
    problems = check_includes(files) + check_calls(files) + check_layer_lists()
    folders = {}
    for p in files:
        if p.startswith('src/'):
            folders.setdefault(os.path.dirname(p), []).append(p)
    for folder in sorted(folders):
        problems += circles(folders[folder], folder)
    # A backend and its subfolders, as one graph.
    backends = os.path.join(ROOT, 'src', 'backends')
    for name in sorted(os.listdir(backends)) if os.path.isdir(backends) else []:
        tree = [p for p in files if p.startswith('src/backends/%s/' % name)]
        if any(os.path.dirname(p) != 'src/backends/' + name for p in tree):
            problems += circles(tree, 'src/backends/%s (with its subfolders)' % name)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
