#!/usr/bin/env python3
"""Import circles of any length between sibling modules, for every crate of the workspace.

Each `crate::…`, `super::…` and `self::…` path a file names (in `use` trees and in code) is an
edge from the file's module to the deepest module the path reaches. Both ends are lifted to
the children of their lowest common ancestor, so `mailer::factory → service` and
`service::x → mailer` make the pair `mailer ↔ service`; a module using its own ancestor or
descendant is not an edge (a child using its parent's items is how Rust modules work).
The circles are the strongly connected components of that graph with more than one module
(Tarjan's algorithm), so `a → b → c → a` is found as well as `a ↔ b`. Prints each circle with
the uses that close it; exits 1 if there is one.
Usage: scripts/module-cycles.py [CRATE_SRC…] | scripts/module-cycles.py --self-test
"""
import pathlib
import re
import sys


def modules(src):
    """{module path tuple: file}."""
    found = {}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src).with_suffix("").parts
        if rel[-1] in ("mod", "lib", "main"):
            rel = rel[:-1]
        if rel and rel[0] == "bin":
            continue
        found[tuple(rel)] = f
    return found


def use_paths(text):
    """Every path named in `use` trees, expanded, plus inline `crate::`/`super::` paths."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        tree = re.sub(r"\s+as\s+\w+", "", m.group(1))
        paths += expand(re.sub(r"\s+", "", tree))
    paths += re.findall(r"\b((?:crate|super|self)(?:::\w+)+)", text)
    return paths


def expand(tree):
    depth = 0
    i = tree.find("{")
    if i < 0:
        return [tree]
    if tree.rfind("}") < i:
        return []
    prefix, body = tree[:i], tree[i + 1 : tree.rindex("}")]
    items, cur = [], ""
    for ch in body:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    items.append(cur)
    out = []
    for item in filter(None, items):
        out += [prefix + p for p in expand(item)]
    return out


def resolve(path, here, mods):
    parts = path.split("::")
    if parts[0] == "crate":
        base, rest = (), parts[1:]
    elif parts[0] in ("super", "self"):
        base = list(here)
        while parts and parts[0] in ("super", "self"):
            if parts.pop(0) == "super":
                base = base[:-1]
        base, rest = tuple(base), parts
    else:
        return None
    best = base
    for k in range(1, len(rest) + 1):
        if base + tuple(rest[:k]) in mods:
            best = base + tuple(rest[:k])
    return best


def circles(src):
    mods = modules(src)
    edges = {}
    for here, f in mods.items():
        text = re.sub(r"//[^\n]*", "", f.read_text())
        for p in use_paths(text):
            there = resolve(p, here, mods)
            if there is None or there == here:
                continue
            k = 0
            while k < min(len(here), len(there)) and here[k] == there[k]:
                k += 1
            if k == len(here) or k == len(there):
                continue  # ancestor or descendant
            a, b = here[: k + 1], there[: k + 1]
            edges.setdefault(a, {}).setdefault(b, set()).add(f"{'::'.join(here)} → {p}")
    found = []
    for component in strongly_connected(edges):
        members = set(component)
        uses = []
        for a in sorted(component):
            for b in sorted(edges.get(a, {})):
                if b in members:
                    uses += sorted(edges[a][b])[:2]
        found.append((sorted(component), uses))
    return found


def strongly_connected(edges):
    """Tarjan's strongly connected components of {node: {node: …}} with more than one node."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    nodes = sorted(set(edges) | {b for a in edges for b in edges[a]})

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    sys.setrecursionlimit(max(1000, 4 * len(nodes) + 100))
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def self_test():
    """A 3-cycle `a → b → c → a` written as files is found; a chain `a → b → c` is not."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp)
        (src / "lib.rs").write_text("mod a;\nmod b;\nmod c;\n")
        (src / "a.rs").write_text("use crate::b::B;\n")
        (src / "b.rs").write_text("use crate::c::C;\npub struct B;\n")
        (src / "c.rs").write_text("pub struct C;\nfn f() { crate::a::g() }\n")
        found = circles(src)
        assert [m for m, _ in found] == [[("a",), ("b",), ("c",)]], found
        (src / "c.rs").write_text("pub struct C;\n")
        assert circles(src) == [], circles(src)
    print("self-test: a 3-cycle found, a chain not")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    roots = [pathlib.Path(p) for p in sys.argv[1:]] or [pathlib.Path("src")] + sorted(
        pathlib.Path("crates").glob("*/src")
    )
    total = 0
    for src in roots:
        for members, uses in circles(src):
            total += 1
            print(f"{src}: {' → '.join('::'.join(m) for m in members)} (a circle of {len(members)})")
            for e in uses:
                print(f"    {e}")
    print(f"{total} circle(s) between sibling modules")
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
