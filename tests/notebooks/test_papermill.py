"""CI runs the four notebooks in order with papermill on their small defaults, as `make demo` does."""

import json

import pytest

from rlfactory_nb.notebooks_run import NOTEBOOKS, run_notebooks

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1800)
def test_all_four_notebooks_execute_in_order(tmp_path, tiny_policy):
    """`tiny_policy` builds the preset first (minutes, once per cache) so the notebooks time only themselves."""
    executed = run_notebooks(tmp_path, {"eval_size": 4})
    assert [path.name for path in executed] == list(NOTEBOOKS)
    for path in executed:
        notebook = json.loads(path.read_text())
        errors = [o for c in notebook["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
        assert not errors, f"{path.name}: {errors}"
        assert path.with_suffix(".html").stat().st_size > 10_000
    checkpoints = list((tmp_path / "runs" / "calculator-notebook" / "checkpoints").glob("step_*"))
    assert checkpoints, "notebook 03 trained no checkpoint for 04 to evaluate"
    stepper_html = (tmp_path / "01_setup_tools.html").read_text()
    assert "rf-trained" in stepper_html and "rf-masked" in stepper_html  # static snapshots made it to HTML
