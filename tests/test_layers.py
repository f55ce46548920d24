"""The code's imports follow its layers: `ops` (what runs in every process: logging, metrics, the
Python workers' settings) at the bottom, then `state` (the joins' semantics and their state),
`serdes` (records in and out), `app` (the commands, the configuration, the plan, the query) on
top; a package imports its own layer or those below, never above. Inside a package, its
sub-packages import one another one way only: no cycle."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("ops", "state", "serdes", "app")  # bottom to top


def _imports() -> dict[str, set[str]]:
    """Each project module (dotted) -> the project modules it imports."""
    found: dict[str, set[str]] = defaultdict(set)
    for package in LAYERS:
        for path in (ROOT / package).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and node.level == 0
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                found[module] |= {n for n in names if n.split(".")[0] in LAYERS}
    return found


def _sub_package(module: str) -> str:
    """`app.run.builder` -> `app.run`; a module at a package's top is the package itself."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (ROOT / parts[0] / parts[1]).is_dir()):
        return ".".join(parts[:2])
    return parts[0]


def test_every_import_is_of_its_own_layer_or_one_below() -> None:
    upward = [
        f"{module} imports {imported}"
        for module, imported_modules in _imports().items()
        for imported in imported_modules
        if LAYERS.index(imported.split(".")[0]) > LAYERS.index(module.split(".")[0])
    ]
    assert upward == []


def test_sub_packages_import_one_another_one_way() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, imported_modules in _imports().items():
        for imported in imported_modules:
            if _sub_package(imported) != _sub_package(module):
                graph[_sub_package(module)].add(_sub_package(imported))

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            n == goal or (n not in seen and reaches(n, goal, seen | {n}))
            for n in graph.get(start, ())
        )

    cycles = sorted(f"{a} <-> {b}" for a in graph for b in graph[a] if reaches(b, a, {b}))
    assert cycles == []
