"""README.md and docs/*.md run as pasted: their Python blocks, in order, as cells of one fresh kernel.

The order is the README, then docs/ by name. A block either stands alone or says that it continues
the session before it. A block preceded by `<!-- docs-run: needs a GPU -->` runs only where CUDA is
available. The kernel works in a fresh folder that sees the project's examples/, so the runs the
blocks write (and their names) are their own.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"<!-- docs-run: (.+?) -->\s*$")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[tuple[str, str | None]]:
    """(code, marker) of each Python block of `path`; marker: the `docs-run:` note just above it."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        found.append((match.group(1), marker.group(1) if marker else None))
    return found


def runnable(marker: str | None, has_gpu: bool) -> bool:
    if marker is None:
        return True
    if marker == "needs a GPU":
        return has_gpu
    raise ValueError(f"unknown docs-run marker {marker!r}: the one known is 'needs a GPU'")


def test_every_block_is_found_and_every_marker_is_known():
    found = {path.name: blocks(path) for path in doc_files()}
    assert len(found["README.md"]) >= 6 and found["programs.md"]
    for path_blocks in found.values():
        for _, marker in path_blocks:
            runnable(marker, has_gpu=False)
    assert [marker for _, marker in found["README.md"]].count("needs a GPU") == 1


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_readme_and_docs_run_in_order_in_a_fresh_kernel(tmp_path):
    """Slow: the README trains on a local Ray (20 steps, then 10 more on resume) and evaluates;
    docs/programs.md trains an agent program for 2 steps in the kernel (about 5 minutes in all)."""
    import nbformat
    import papermill
    import torch

    from rlfactory_nb.notebooks_run import kernel_options, sliced_reply_polls

    has_gpu = torch.cuda.is_available()
    cells, sources = [], []
    for path in doc_files():
        for number, (code, marker) in enumerate(blocks(path), 1):
            if runnable(marker, has_gpu):
                cells.append(nbformat.v4.new_code_cell(code))
                sources.append(f"{path.name} block {number}")
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    source, target = tmp_path / "docs.ipynb", tmp_path / "docs-run.ipynb"
    nbformat.write(notebook, source)
    try:
        with sliced_reply_polls():
            papermill.execute_notebook(
                str(source), str(target), cwd=str(tmp_path), kernel_name="python3", progress_bar=False,
                execution_timeout=900, **kernel_options(),
            )
    except papermill.PapermillExecutionError as error:
        executed = json.loads(target.read_text())["cells"]
        failed = next(i for i, cell in enumerate(executed) if any(o["output_type"] == "error" for o in cell.get("outputs", [])))
        pytest.fail(f"{sources[failed]} failed: {error.ename}: {error.evalue}")
