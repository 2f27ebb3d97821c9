"""The notebooks as committed (no outputs, a papermill parameters cell, only the public API), and
as executed: light enough to keep."""

import json
import re

import pytest

import rlfactory_nb as rf
from rlfactory_nb.notebooks_run import NOTEBOOKS, TEST_ONLY_NOTEBOOKS, notebooks_dir

SHIPPED = NOTEBOOKS + TEST_ONLY_NOTEBOOKS
RF_NAME = re.compile(r"\brf\.([A-Za-z_][A-Za-z0-9_]*)")


def cells(name):
    return json.loads((notebooks_dir() / name).read_text())["cells"]


@pytest.mark.parametrize("name", SHIPPED)
def test_committed_without_outputs_with_a_parameters_cell(name):
    code = [cell for cell in cells(name) if cell["cell_type"] == "code"]
    assert all(not cell["outputs"] and cell["execution_count"] is None for cell in code)
    tagged = [cell for cell in code if "parameters" in cell["metadata"].get("tags", [])]
    assert len(tagged) == 1 and "example = \"calculator\"" in "".join(tagged[0]["source"])


@pytest.mark.parametrize("name", SHIPPED)
def test_every_cell_has_a_unique_id(name):
    """nbformat 4.5 requires cell ids (papermill warns today; a future nbformat refuses the file)."""
    ids = [cell.get("id") for cell in cells(name)]
    assert None not in ids and len(set(ids)) == len(ids)


@pytest.mark.parametrize("name", SHIPPED)
def test_cells_use_only_the_public_api(name):
    source = "\n".join("".join(cell["source"]) for cell in cells(name) if cell["cell_type"] == "code")
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["import rlfactory_nb as rf"]
    used = set(RF_NAME.findall(source))
    assert used - set(rf.__all__) == set(), f"{name} uses names missing from rlfactory_nb.__all__"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_executed_notebooks_stay_under_a_megabyte(executed_notebooks):
    """Saved with static views, not widget state (a FigureWidget's state alone carries ~5 MB of plotly.js)."""
    sizes = {path.name: path.stat().st_size for path in executed_notebooks}
    assert len(sizes) == len(NOTEBOOKS) and max(sizes.values()) < 1_000_000, sizes
    # widgets without a static view keep their (small) state, a progress bar's; no plotly.js bundle does
    assert not [path.name for path in executed_notebooks if '"_esm"' in path.read_text()]
