"""The package's layers in figures, and the layout map docs/decisions.md shows.

    python scripts/import_layers.py            # modules, lines, layers, imports that point up a layer
    python scripts/import_layers.py --write    # rewrite docs/decisions.md's layout map from the code
    python scripts/import_layers.py --package OLD/rlfactory_nb --layers-from OLD/tests/test_import_graph.py

The graph reader and the layers are tests/test_import_graph.py's (which fails on an import that points
up, and on a stale map); `--package` measures another copy of the package (an older commit's, say)
against these layers or, with `--layers-from`, against the layers that copy's own test declared.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_graph(path: Path = ROOT / "tests" / "test_import_graph.py") -> ModuleType:
    """tests/test_import_graph.py (or another copy of it) as a module."""
    spec = importlib.util.spec_from_file_location(f"import_graph_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module


def figures(graph: ModuleType, package: Path, layers: dict[str, int]) -> dict[str, int]:
    """Modules, lines, layers, and the imports (statement and target module) that point up a layer,
    also counted as distinct module pairs and as distinct package pairs."""
    found = graph.modules(package)
    edges = graph.edges(package)
    up = [edge for edge in edges if graph.layer_of(edge.target, layers) > graph.layer_of(edge.source, layers)]
    tops = {graph.top_name(module) for module in found}
    return {
        "modules": len(found),
        "lines": sum(len(path.read_text(encoding="utf-8").splitlines()) for path in found.values()),
        "layers": len({layers[top] for top in tops}),
        "imports": len(edges),
        "imports up a layer": len(up),
        "module pairs up a layer": len({(edge.source, edge.target) for edge in up}),
        "package pairs up a layer": len({(graph.top_name(edge.source), graph.top_name(edge.target)) for edge in up}),
    }


def write_map(graph: ModuleType) -> bool:
    """Rewrite docs/decisions.md's layout map from the code; whether it changed."""
    text = graph.DECISIONS.read_text(encoding="utf-8")
    old = graph.written_map(text)
    new = graph.layout_map()
    if old == new:
        return False
    start = text.index(graph.MAP_START) + len(graph.MAP_START)
    graph.DECISIONS.write_text(text[:start] + new + "\n" + text[text.index(graph.MAP_END, start) :], encoding="utf-8")
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite docs/decisions.md's layout map")
    parser.add_argument("--package", type=Path, help="another copy of rlfactory_nb/ to measure")
    parser.add_argument("--layers-from", type=Path, help="a tests/test_import_graph.py whose LAYERS to measure with")
    args = parser.parse_args(argv)
    graph = load_graph()
    if args.write:
        print("docs/decisions.md:", "layout map rewritten" if write_map(graph) else "layout map already current")
        return 0
    layers = load_graph(args.layers_from).LAYERS if args.layers_from else graph.LAYERS
    for name, value in figures(graph, args.package or graph.PACKAGE, layers).items():
        print(f"{name:>26}: {value:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
