"""The package's import graph: no circles, nothing imports upward, only the plugin (and its
hookspecs) imports pytest. Read from the source with ``ast`` (function-local imports
included), so a circle hidden behind a late import fails here too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_llmslo"

# Layers, lowest first: a module may import its own layer and those below it, never one
# above. Modules not listed are in the layer of their package (``load``, ``engines``, ...).
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "_version",
        "errors",
        "runmeta",
        "records",
        "recordfile",
        "recordstore",
        "catalog",
        "stats",
        "tls",
        "stamped",
        "redact",
        "probe",
        "interrupts",
        "choices",
        "arrivals",
        "levelpoint",
        "quantities",
        "suggest",
        "answered",
        "cliargs",
    ),
    ("evals", "signals", "metrics", "load", "engines", "sim", "faults"),
    ("slo",),
    ("sweep", "sweepextend", "capacity", "settings", "judged"),
    ("document",),
    ("regression",),
    ("history",),
    ("report", "exports"),
    # The session core, a package: its modules are in this layer (SESSION orders them).
    ("session",),
    ("runargs",),
    ("pluginstate",),
    ("fixtures",),
    ("plugin", "cli", "clirun", "clireports", "clicluster", "hookspecs"),
)

# The session core's modules, lowest first: each imports only those before it.
SESSION: tuple[tuple[str, ...], ...] = (
    ("factory", "pinned", "scaleuplevel", "faultlevel", "points", "timing", "workers"),
    ("roster",),
    ("state",),
    ("levelplan",),
    ("engines", "baseline", "writers", "level", "qualitygate", "asked", "faultgate"),
    ("inputs", "judge", "testreport"),
)


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for f in PACKAGE.rglob("*.py"):
        parts = f.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f  # "" is the package root
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[tuple[str, int]]:
    """(package module imported, line) for every import of ``name``; ``"__root__"`` for a
    name taken from the package root that is not a submodule (``__version__``)."""
    is_pkg = path.name == "__init__.py"
    out: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if name else []
                if not is_pkg:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                mod = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and (
                node.module == "pytest_llmslo" or node.module.startswith("pytest_llmslo.")
            ):
                mod = node.module.removeprefix("pytest_llmslo").lstrip(".")
            else:
                continue
            for alias in node.names:
                sub = f"{mod}.{alias.name}" if mod else alias.name
                if sub in MODULES:
                    out.add((sub, node.lineno))
                elif mod in MODULES and mod:
                    out.add((mod, node.lineno))
                else:
                    out.add(("__root__", node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pytest_llmslo."):
                    out.add((alias.name.removeprefix("pytest_llmslo."), node.lineno))
    return {(m, ln) for m, ln in out if m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> int:
    for i, layer in enumerate(LAYERS):
        for entry in layer:
            if name == entry or name.startswith(entry + "."):
                return i
    raise AssertionError(f"module {name!r} is in no layer of tests/test_layering.py")


def test_every_module_has_a_layer() -> None:
    for name in MODULES:
        if name:
            _layer(name)


def test_no_import_circles() -> None:
    edges = {n: {m for m, _ in deps if m in MODULES and m} for n, deps in GRAPH.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
                circles.append(sorted(comp))

    for v in edges:
        if v and v not in index:
            visit(v)
    assert circles == []


def test_nothing_imports_upward() -> None:
    upward = []
    for name, deps in GRAPH.items():
        if not name:
            continue
        for dep, line in deps:
            if dep == "__root__":
                upward.append(f"{name}:{line} imports from the package root (use _version)")
            elif dep and _layer(dep) > _layer(name):
                upward.append(f"{name}:{line} imports {dep} (a higher layer)")
    assert upward == []


#: The plugin's modules, the only ones that import pytest (the hookspecs are pytest's hookspec
#: objects, the fixtures pytest's fixtures, ``pluginstate`` what the plugin keeps in its stash).
PYTEST_GLUE = ("plugin", "hookspecs", "fixtures", "pluginstate")


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n))
def test_only_the_plugin_imports_pytest(name: str) -> None:
    if name in PYTEST_GLUE:
        return
    tree = ast.parse(MODULES[name].read_text())
    for node in ast.walk(tree):
        mods = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            mods = [node.module or ""]
        for m in mods:
            assert m.split(".")[0] not in ("pytest", "_pytest"), f"{name}:{node.lineno} {m}"


@pytest.mark.parametrize("name", PYTEST_GLUE)
def test_no_private_pytest_imports(name: str) -> None:
    tree = ast.parse(MODULES[name].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("_pytest"):
            raise AssertionError(f"{name}.py:{node.lineno} imports {node.module}")


def test_the_session_core_imports_downward_within_its_package() -> None:
    rank = {f"session.{m}": i for i, group in enumerate(SESSION) for m in group}
    inside = {n for n in MODULES if n.startswith("session.")}
    assert inside == set(rank), "a module of session/ is missing from SESSION"
    upward = [
        f"{name}:{line} imports {dep}"
        for name in sorted(inside)
        for dep, line in sorted(GRAPH[name])
        if dep == "session" or (dep in rank and rank[dep] >= rank[name])
    ]
    assert upward == []
