#!/usr/bin/env python3
"""Import circles between sibling modules, for every crate of the workspace.

Each `crate::…`, `super::…` and `self::…` path a file names (in `use` trees and in code) is an
edge from the file's module to the deepest module the path reaches. Both ends are lifted to
the children of their lowest common ancestor, so `mailer::factory → service` and
`service::x → mailer` make the pair `mailer ↔ service`; a module using its own ancestor or
descendant is not an edge (a child using its parent's items is how Rust modules work).
Prints each circle; exits 1 if there is one. Usage: scripts/module-cycles.py [CRATE_SRC…]
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
    for a in edges:
        for b in edges[a]:
            if a < b and a in edges.get(b, {}):
                found.append((a, b, sorted(edges[a][b])[:2], sorted(edges[b][a])[:2]))
    return found


def main():
    roots = [pathlib.Path(p) for p in sys.argv[1:]] or [pathlib.Path("src")] + sorted(
        pathlib.Path("crates").glob("*/src")
    )
    total = 0
    for src in roots:
        for a, b, ab, ba in circles(src):
            total += 1
            print(f"{src}: {'::'.join(a)} ↔ {'::'.join(b)}")
            for e in ab + ba:
                print(f"    {e}")
    print(f"{total} circle(s) between sibling modules")
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
