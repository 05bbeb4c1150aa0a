"""The codebase's layers point one way and hold no import cycle (issue 36): `kernels` (arrays,
no I/O) <- `warehouse` + `lumos_sql` (storage and SQL) <- the `lumos` domain packages (replay,
explain, estimate, opmodel, groundtruth, export) <- the entry points (`lumos.commands`,
`lumos.api`, `lumos.cli`, `pipelines`). Every import counts, those inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kernels", "warehouse", "lumos_sql", "lumos", "pipelines")
ENTRY = ("lumos.commands", "lumos.api", "lumos.cli", "lumos.__main__", "pipelines")


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _layer(module: str) -> int:
    if module.startswith("kernels"):
        return 0
    if module.startswith(("warehouse", "lumos_sql")):
        return 1
    if any(module == e or module.startswith(e + ".") for e in ENTRY):
        return 3
    return 2


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of our modules (the longest known prefix of what it names)."""

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                target = resolve(name)
                # a module importing its own package's __init__ is not an edge of the graph
                if target and target != module and not module.startswith(target + "."):
                    graph[module].add(target)
    return graph


def test_no_import_points_up_a_layer() -> None:
    graph = _imports(_modules())
    up = sorted(
        f"{m} ({_layer(m)}) imports {t} ({_layer(t)})"
        for m, targets in graph.items()
        for t in targets
        if _layer(t) > _layer(m)
    )
    assert not up, "\n".join(up)


def test_no_import_cycle() -> None:
    graph = _imports(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_the_check_sees_real_imports() -> None:
    """The graph is not empty by accident: known edges are in it."""
    graph = _imports(_modules())
    assert "warehouse.handle" in graph["lumos.api"]
    assert "kernels.graph" in graph["lumos_sql.taxonomy"]
    assert "lumos.estimate.gpu_edit" in graph["lumos.estimate.gpu_pipeline"]
