#!/usr/bin/env python3
"""The engine's files (src/sched/*.c) without circles of mutual dependency.

File A depends on file B when A calls a non-static zn_* function that B defines. The
dependencies must form no cycle (docs/architecture.md, "The engine's parts"): a cycle
prints its files and the functions on each edge, and the script exits 1.

    scripts/sched_deps.py [SRC_DIR]        # default: the repository's src/sched
    scripts/sched_deps.py --graph          # every file's dependencies
"""
import os
import re
import sys

DEF = re.compile(r'^(?!static\b)[A-Za-z_][\w \t\*]*?\b(zn_\w+)\s*\([^;{]*\)\s*\{', re.M)
CALL = re.compile(r'\b(zn_\w+)\s*\(')


def strip_comments(text):
    return re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)


def graph(src):
    files = sorted(f for f in os.listdir(src) if f.endswith('.c'))
    text = {f: strip_comments(open(os.path.join(src, f)).read()) for f in files}
    owner = {m.group(1): f for f in files for m in DEF.finditer(text[f])}
    deps = {f: {} for f in files}
    for f in files:
        for name in set(CALL.findall(text[f])):
            g = owner.get(name)
            if g and g != f:
                deps[f].setdefault(g, []).append(name)
    return deps


def cycles(deps):
    """Tarjan's strongly connected components of more than one file."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in deps[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in deps:
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if a != '--graph']
    src = args[0] if args else os.path.join(os.path.dirname(__file__), '..', 'src', 'sched')
    deps = graph(src)
    if '--graph' in sys.argv:
        for f, d in deps.items():
            print(f, '->', ' '.join(sorted(d)))
    found = cycles(deps)
    for comp in found:
        print('sched_deps: a circle of dependency among', ', '.join(comp))
        for a in comp:
            for b in comp:
                if b in deps[a]:
                    print('  %s -> %s: %s' % (a, b, ', '.join(sorted(deps[a][b]))))
    if not found:
        print('sched_deps: %d files, no circle of dependency' % len(deps))
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
