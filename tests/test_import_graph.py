"""The package's import graph: no cycles, and no layer importing a higher one.

The graph is read with `ast` from the source, so it sees every import: at module level, inside
functions, and under `if TYPE_CHECKING:` alike (an annotation-only import still says which layer a
module leans on). The layers, lowest first, are `LAYER_ORDER` below: one package a layer, except the
foundation's single-file modules and train with eval; docs/decisions.md ("Layers") says why, and
its layout map is `layout_map()`'s (a test keeps it so; `python scripts/import_layers.py --write`
rewrites it, and prints the figures: modules, lines, layers, imports that point up).

`_views` reaches the widgets by name through importlib, which is the point of it: a core object's
`.view()` finds its view without the core importing a widget. The same holds for the recipes'
synthetic datasets (data/rows.py), a recipe's preset (models/presets) and the backends (train/backends.py).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rlfactory_nb"

LAYER_ORDER: list[tuple[str, ...]] = [
    # the foundation: records, errors, settings, files; the standard library and each other only
    ("errors", "types", "config", "config_schema", "_async", "_threads", "_views", "storage", "local_files", "extras",
     "config_sections", "config_grpo", "config_cluster", "config_sft", "config_distill", "node_cache", "code_names", "signing", "seeds", "reasoning_mode"),
    ("chat",),
    ("engines",),
    ("tools",),
    ("algo",),
    ("envs",),
    ("rollout",),
    ("programs",),
    ("rewards",),
    ("models",),
    ("data",),
    ("recipes",),
    ("reward_lab",),
    ("runtime",),
    ("train", "eval"),  # the loop evaluates (train/loop.py -> eval.py); eval reads train/metrics.py
    ("examples",),
    ("notebooks_run",),
    ("compare",),
    ("demo",),
    ("cluster",),
    ("widgets",),
    ("cli",),
    ("",),  # the top-level rlfactory_nb/__init__.py
]  # fmt: skip
"""the layers, lowest first: a module imports only from its own layer or below"""
LAYERS: dict[str, int] = {name: number for number, names in enumerate(LAYER_ORDER, 1) for name in names}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    deferred: bool
    """written inside a function body (imported when the function runs)"""


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path, package): path for path in package.rglob("*.py") if "__pycache__" not in path.parts}


def imported_modules(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The package modules an import statement loads: `from a.b import c` loads a.b.c when that is a
    module, else a.b (importing a submodule runs its package's `__init__` anyway, which is no edge)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names} & known
    base = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    parent = ".".join(filter(None, [base if node.level else "", node.module or ""]))
    loaded = {name if name in known else parent for name in (f"{parent}.{alias.name}" for alias in node.names)}
    return loaded & known


def module_edges(module: str, source: str, is_package: bool, known: set[str]) -> list[Edge]:
    """The imports of package modules (`known`) that `source`, the text of `module`, makes."""
    tree = ast.parse(source)
    in_functions = {
        id(inner)
        for outer in ast.walk(tree)
        if isinstance(outer, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(outer)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for target in sorted(imported_modules(node, module, is_package, known) - {module}):
                found.append(Edge(module, target, node.lineno, id(node) in in_functions))
    return found


def edges(package: Path = PACKAGE) -> list[Edge]:
    known = modules(package)
    return [
        edge
        for module, path in known.items()
        for edge in module_edges(module, path.read_text(), path.name == "__init__.py", set(known))
    ]


def top_name(module: str) -> str:
    """The package or top-level module `module` belongs to ("" for rlfactory_nb/__init__.py)."""
    return module.split(".")[1] if "." in module else ""


def layer_of(module: str, layers: dict[str, int] = LAYERS) -> int:
    top = top_name(module)
    if top not in layers:
        raise AssertionError(f"{module} is in no layer: add {top!r} to LAYER_ORDER here")
    return layers[top]


def layout_map(package: Path = PACKAGE) -> str:
    """The layout of `package` by layer, lowest first: a layer's single-file modules on one line, then
    each of its packages with its modules (a sub-package as `name/`), as docs/decisions.md shows it."""
    lines = []
    for number, names in enumerate(LAYER_ORDER, 1):
        files = [f"{name}.py" if name else "__init__.py (the public API)" for name in names if not (package / name).is_dir() or not name]
        if files:
            lines.append(f"({number:>2}) " + " · ".join(files))
        for name in names:
            folder = package / name
            if name and folder.is_dir():
                inside = sorted(
                    child.stem if child.suffix == ".py" else f"{child.name}/"
                    for child in folder.iterdir()
                    if (child.suffix == ".py" and child.name != "__init__.py")
                    or (child.is_dir() and (child / "__init__.py").exists())
                )
                lines.append(f"({number:>2}) {name}/  " + " · ".join(inside))
    return "\n".join(_wrapped(line) for line in lines)


def _wrapped(line: str, width: int = 110) -> str:
    """`line` broken at ` · ` to `width` characters, the rest indented under its first module."""
    indent = " " * (line.index("/  ") + 3 if "/  " in line else 5)
    out, current = [], ""
    for part in line.split(" · "):
        candidate = f"{current} · {part}" if current else part
        if current and len(candidate) > width:
            out.append(current + " ·")
            current = indent + part
        else:
            current = candidate
    return "\n".join([*out, current])


DECISIONS = PACKAGE.parent / "docs" / "decisions.md"
MAP_START, MAP_END = "<!-- layout map: scripts/import_layers.py --write -->\n```\n", "```\n<!-- /layout map -->"


def written_map(text: str) -> str:
    """The layout map as docs/decisions.md writes it."""
    start = text.index(MAP_START) + len(MAP_START)
    return text[start : text.index(MAP_END, start)].rstrip("\n")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_layout_map_in_the_decisions_is_the_codes():
    assert written_map(DECISIONS.read_text(encoding="utf-8")) == layout_map(), (
        "docs/decisions.md's layout map is stale: run `python scripts/import_layers.py --write`"
    )


def test_every_package_is_in_a_layer_and_a_layer_holds_one_package():
    tops = {top_name(module) for module in modules()}
    assert not tops - set(LAYERS), f"in no layer: {sorted(tops - set(LAYERS))}"
    shared = [names for names in LAYER_ORDER[1:] if len(names) > 1]
    assert shared == [("train", "eval")], "a layer of several packages hides the arrows between them"


def test_the_graph_is_read():
    """A reader that found nothing would pass every check below."""
    assert len(modules()) > 50
    assert any(edge.source == "rlfactory_nb.train.loop" and edge.target == "rlfactory_nb.config" for edge in edges())


def test_reader_sees_deferred_relative_and_submodule_imports():
    known = {"pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"}
    source = "from pkg import a, missing\nfrom . import b\n\ndef f():\n    from .sub import c\n    import pkg.sub\n"
    found = {(edge.target, edge.deferred) for edge in module_edges("pkg.x", source, False, known)}
    assert found == {("pkg", False), ("pkg.a", False), ("pkg.b", False), ("pkg.sub.c", True), ("pkg.sub", True)}


def test_no_import_cycles():
    graph: dict[str, set[str]] = {}
    for edge in edges():
        graph.setdefault(edge.source, set()).add(edge.target)
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(cycle) for cycle in found)


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_layer_imports_a_higher_one():
    upward = [
        f"{edge.source} (layer {layer_of(edge.source)}) imports {edge.target} (layer {layer_of(edge.target)}) "
        f"at line {edge.line}{' (in a function)' if edge.deferred else ''}"
        for edge in edges()
        if layer_of(edge.target) > layer_of(edge.source)
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_ray_is_imported_only_in_cluster():
    """The design: Ray lives at the edge, in cluster/; everything else runs in one plain process."""
    outside = []
    for module, path in modules().items():
        if module.startswith("rlfactory_nb.cluster"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if any(n == "ray" or n.startswith("ray.") for n in names):
                    outside.append(f"{module}:{node.lineno}")
    assert not outside, "ray imported outside cluster/ at:\n" + "\n".join(outside)


def test_every_deferred_package_import_says_why():
    """An import inside a function only delays a heavy import (torch, transformers, Ray) or keeps a
    light entry point light; a comment on it (or just above its block of imports) says which."""
    silent = []
    for edge in edges():
        if not edge.deferred:
            continue
        lines = modules()[edge.source].read_text().splitlines()
        first = edge.line - 1
        while first > 0 and lines[first - 1].lstrip().startswith(("from ", "import ")):
            first -= 1
        block = lines[max(first - 1, 0) : edge.line]
        if not any("#" in line for line in block):
            silent.append(f"{edge.source}:{edge.line} imports {edge.target}")
    assert not silent, "in-function imports without a reason:\n" + "\n".join(silent)
