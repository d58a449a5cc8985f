"""The import walls: pipeline/ and upstream_adapters/ import no Dagster and nothing of assets/ (the shell), no module
imports itself around a cycle, and no package imports one that imports it back (the floors of docs/architecture.md:
`pipeline.X.*` counts as package `pipeline.X`, a top-level module such as pipeline/stages.py as its own). Read from the
source with an AST walk, so lazy imports inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "upstream_adapters", "assets")
CORE = ("pipeline", "upstream_adapters")  # what must stand without the Dagster shell


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((REPO / pkg).rglob("*.py")):
            parts = list(p.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def imports_of(name: str, path: Path, modules: dict, top_level_only: bool = False) -> set[tuple[str, int]]:
    """(imported module, line) pairs; relative imports resolved, `from pkg import mod` resolved to the module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {(a.name, node.lineno) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                out.add((full if full in modules else base, node.lineno))
    return out


def graph(top_level_only: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    return {
        m: {i for i, _ in imports_of(m, p, modules, top_level_only) if i in modules and i != m}
        for m, p in modules.items()
    }


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
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

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def package_of(module: str) -> str:
    """The package a module counts for in the layering: its first two name parts (pipeline.release.files ->
    pipeline.release; pipeline.stages and upstream_adapters stay themselves)."""
    return ".".join(module.split(".")[:2])


def package_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, deps in g.items():
        out.setdefault(package_of(m), set()).update(package_of(d) for d in deps if package_of(d) != package_of(m))
    return out


def package_cycles(g: dict[str, set[str]]) -> list[str]:
    """One line per group of packages that import each other round a cycle, naming one such cycle and, for each hop,
    a module import that makes it (what to move to break it)."""
    pg = package_graph(g)
    out = []
    for comp in cycles(pg):
        members = set(comp)
        path, seen = [comp[0]], {comp[0]}
        while True:  # walk inside the component until a package repeats: that closes a cycle
            nxt = sorted(pg[path[-1]] & members)[0]
            if nxt in seen:
                path = path[path.index(nxt) :] + [nxt]
                break
            path.append(nxt)
            seen.add(nxt)
        hops = []
        for a, b in zip(path, path[1:]):
            m, d = min((m, d) for m in g if package_of(m) == a for d in g[m] if package_of(d) == b)
            hops.append(f"{a} -> {b} ({m} imports {d})")
        out.append(f"packages {', '.join(comp)} import each other: " + "; ".join(hops))
    return out


def test_core_imports_no_dagster_and_nothing_of_the_shell():
    modules = _modules()
    bad = []
    for name, path in modules.items():
        if not name.startswith(CORE):
            continue
        for imported, line in imports_of(name, path, modules):
            if imported.split(".")[0] in ("dagster", "assets") or imported.startswith("dagster_"):
                bad.append(f"{path.relative_to(REPO)}:{line} imports {imported}")
    assert not bad, bad


def test_no_import_cycle_at_module_level():
    assert cycles(graph(top_level_only=True)) == []


def test_no_import_cycle_even_through_lazy_imports():
    assert cycles(graph()) == []


def test_no_package_imports_one_that_imports_it_back():
    """The floors are in order: the package graph (lazy imports included) has no cycle."""
    found = package_cycles(graph())
    assert not found, "\n".join(found)


def test_the_package_check_sees_a_planted_cycle():
    """Planted defect: two packages whose modules import each other's other modules (no module cycle, so only the
    package check sees it), beside a third package both import, which is no cycle."""
    g = {
        "pipeline.low.files": set(),
        "pipeline.low": {"pipeline.low.files"},  # a package's own __init__ importing its module is no edge
        "pipeline.up.checks": {"pipeline.mid.rows", "pipeline.low.files"},
        "pipeline.mid.rows": {"pipeline.low.files"},
        "pipeline.mid.names": {"pipeline.up.words"},
        "pipeline.up.words": set(),
        "pipeline.stages": {"pipeline.up.checks"},
    }
    assert cycles(g) == []
    assert package_graph(g)["pipeline.low"] == set()
    assert package_cycles(g) == [
        "packages pipeline.mid, pipeline.up import each other: pipeline.mid -> pipeline.up (pipeline.mid.names "
        "imports pipeline.up.words); pipeline.up -> pipeline.mid (pipeline.up.checks imports pipeline.mid.rows)"
    ]
    del g["pipeline.mid.names"]
    assert package_cycles(g) == []


def test_the_wall_test_sees_a_planted_violation(tmp_path, monkeypatch):
    """Planted defects: a core module importing the shell, and a two-module cycle, are both reported."""
    pkg = tmp_path / "pipeline"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\nimport dagster\n")
    (pkg / "b.py").write_text("def f():\n    from pipeline.a import x\n")
    modules = {"pipeline": pkg / "__init__.py", "pipeline.a": pkg / "a.py", "pipeline.b": pkg / "b.py"}
    a = imports_of("pipeline.a", pkg / "a.py", modules)
    assert ("dagster", 2) in a and ("pipeline.b", 1) in a
    g = {m: {i for i, _ in imports_of(m, p, modules) if i in modules and i != m} for m, p in modules.items()}
    assert cycles(g) == [["pipeline.a", "pipeline.b"]]
    top = {m: {i for i, _ in imports_of(m, p, modules, True) if i in modules and i != m} for m, p in modules.items()}
    assert cycles(top) == []
