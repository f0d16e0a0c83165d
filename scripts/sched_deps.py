#!/usr/bin/env python3
"""The engine's files (src/sched/*.c) without circles of mutual dependency, and the parts
without the header of every part.

File A depends on file B when A calls a non-static zn_* function that B defines. The
dependencies must form no cycle (docs/architecture.md, "The engine's parts"): a cycle
prints its files and the functions on each edge, and the script exits 1.

A part is given the parts it uses at creation and takes its own struct, so only the
engine's composition includes engine_impl.h (struct zn_engine, every part). The files
still including it are listed in ENGINE_IMPL_ALLOWED, a list that only shrinks: a file
not on it that includes the header fails, and so does a file on it that no longer does
(take it off the list).

    scripts/sched_deps.py [SRC_DIR]        # default: the repository's src/sched
    scripts/sched_deps.py --graph          # every file's dependencies
"""
import os
import re
import sys

# The engine's composition (engine*.c, the step, evaluation, the training checkpoint): every
# part is given its dependencies explicitly (docs/architecture.md, "Who owns what"). Shrink
# it, never grow it.
ENGINE_IMPL_ALLOWED = {
    # the composition: the engine and the step
    'engine.c', 'engine_counts.c', 'engine_parts.c', 'engine_plan.c', 'engine_schedule.c',
    'step.c', 'step_common.c',
    'step_lm.c', 'eval.c', 'labels.c',
    # the training checkpoint: it saves and restores every part, through their functions
    'ckpt.c', 'ckpt_load.c', 'ckpt_meta.c', 'ckpt_state.c',
}
INCLUDE_IMPL = re.compile(r'^\s*#\s*include\s+"sched/engine_impl\.h"', re.M)

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


def engine_impl_problems(src):
    """Files that include engine_impl.h off the allow-list, and listed files that no longer
    include it."""
    out = []
    names = sorted(f for f in os.listdir(src)
                   if f.endswith(('.c', '.h')) and f != 'engine_impl.h')
    including = {f for f in names if INCLUDE_IMPL.search(open(os.path.join(src, f)).read())}
    for f in sorted(including - ENGINE_IMPL_ALLOWED):
        out.append('%s includes engine_impl.h (every part): give it the parts it uses at '
                   'creation instead (docs/architecture.md)' % f)
    for f in sorted(ENGINE_IMPL_ALLOWED - including):
        if f in names:
            out.append('%s no longer includes engine_impl.h: take it off '
                       'ENGINE_IMPL_ALLOWED in scripts/sched_deps.py' % f)
    return out, len(including)


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
    impl, count = engine_impl_problems(src)
    for line in impl:
        print('sched_deps:', line)
    if not impl:
        print('sched_deps: %d files include engine_impl.h, all on the allow-list' % count)
    return 1 if found or impl else 0


if __name__ == '__main__':
    sys.exit(main())
