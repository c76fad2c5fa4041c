#!/usr/bin/env python3
"""Import cycles between files of a Rust crate's source directory.

    scripts/import-cycles.py [DIR]      DIR: src (default) or capi/src

An edge A -> B when A names an item of module B by path (`use crate::…`, `use super::…`, `super::x::` or `crate::x::` in code), B's
file being neither A's own nor an ancestor/descendant module of A's (a parent's `mod child;`
and a child's `super::` are structure, not imports). Prints every cycle (strongly connected
component of more than one file); exits 1 if there is one."""
import os, re, sys

root = sys.argv[1] if len(sys.argv) > 1 else "src"
files = {}  # module path tuple -> file
for dirpath, _, names in os.walk(root):
    for n in names:
        if not n.endswith(".rs"):
            continue
        rel = os.path.relpath(os.path.join(dirpath, n), root)
        parts = rel[:-3].split(os.sep)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        files[tuple(parts)] = os.path.join(dirpath, n)

def resolve(path):
    """The longest prefix of `path` that is a file's module."""
    for i in range(len(path), -1, -1):
        if tuple(path[:i]) in files:
            return tuple(path[:i])
    return None

edges = {m: set() for m in files}
path_re = re.compile(r"\b((?:crate|super)(?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))+)")
for mod, f in files.items():
    text = open(f).read()
    # strip comments (doc links included): only code counts
    text = re.sub(r"//[^\n]*", "", text)
    # expand `use a::{b, c::d}` one level into a::b, a::c::d
    for m in re.finditer(r"\buse\s+((?:crate|super)[^;]*?)::\{([^;]*)\};", text, re.S):
        base = m.group(1)
        for item in re.split(r",", re.sub(r"\{[^}]*\}", "", m.group(2))):
            item = item.strip().split(" as ")[0].strip()
            if item and item != "self":
                text += f"\n{base}::{item}\n"
    for m in path_re.finditer(text):
        segs = m.group(1).split("::")
        # modules of a file `a/b.rs` are ('a','b'); `super` from it is ('a',)
        if segs[0] == "crate":
            target = segs[1:]
        else:
            base = list(mod)
            # a non-mod.rs file's `super` is its parent module; mod.rs's module is its dir
            while segs and segs[0] == "super":
                base = base[:-1]
                segs = segs[1:]
            target = base + segs
        t = resolve(target)
        if t is None or t == mod:
            continue
        if t == mod[: len(t)] or mod == t[: len(mod)]:
            continue  # ancestor or descendant
        edges[mod].add(t)

# Tarjan
index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(comp)
for v in files:
    if v not in index: visit(v)
for comp in sccs:
    names = sorted(files[c] for c in comp)
    print("cycle:", " <-> ".join(names))
    for c in comp:
        for w in sorted(edges[c] & set(comp)):
            print(f"    {files[c]} -> {files[w]}")
print(f"{len(files)} files, {sum(len(e) for e in edges.values())} edges, {len(sccs)} cycles")
sys.exit(1 if sccs else 0)
