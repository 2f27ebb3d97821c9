"""A notebook run with plain papermill, as a user's own CI runs it (no notebooks_run, no slimming
afterwards), is light too: its views carry no plotly.js bundle (widgets/front_end.py)."""

import nbformat
import pytest

from rlfactory_nb.notebooks_run import WIDGET_VIEW, notebooks_dir

pytestmark = pytest.mark.slow
NB02_CELL_TIMEOUT_S = 120
"""notebook 02's cells take 1-5 s on a quiet machine (the notebook 10-16 s); a cell whose reply the
kernel/client pair lost under the full suite's load cost this test 300 s at the notebooks' bound"""


@pytest.mark.timeout(900)
def test_plain_papermill_saves_notebook_02_under_a_megabyte(tmp_path, tiny_policy):
    """Its own small defaults (the parameters cell); only output_dir is set, to keep the repository clean."""
    import papermill
    from nbclient.exceptions import CellTimeoutError

    target = tmp_path / "02_reward_design.ipynb"
    for attempt in (1, 2):  # once more after a cell whose reply the kernel/client pair lost (conftest.py)
        try:
            papermill.execute_notebook(
                str(notebooks_dir() / "02_reward_design.ipynb"), str(target), parameters={"output_dir": str(tmp_path)},
                progress_bar=False, execution_timeout=NB02_CELL_TIMEOUT_S,
            )
            break
        except (CellTimeoutError, TimeoutError):
            if attempt == 2:
                raise
    assert target.stat().st_size < 1_000_000, f"{target.stat().st_size / 1e6:.1f} MB"
    text = target.read_text()
    assert "plotly.js" not in text and "Plotly.newPlot" not in text  # no bundle in the widget state
    outputs = [output for cell in nbformat.reads(text, as_version=4).cells for output in cell.get("outputs", [])]
    plotted = [output["data"] for output in outputs if "<svg" in output.get("data", {}).get("text/html", "")]
    assert plotted and not [data for data in plotted if WIDGET_VIEW in data]  # the lab's static view alone
