"""A notebook run with plain papermill, as a user's own CI runs it (no notebooks_run, no slimming
afterwards), is light too: its views carry no plotly.js bundle (widgets/front_end.py)."""

import nbformat
import pytest

from rlfactory_nb.notebooks_run import WIDGET_VIEW, notebooks_dir

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
def test_plain_papermill_saves_notebook_02_under_a_megabyte(tmp_path, tiny_policy):
    """Its own small defaults (the parameters cell); only output_dir is set, to keep the repository clean."""
    import papermill

    target = tmp_path / "02_reward_design.ipynb"
    papermill.execute_notebook(
        str(notebooks_dir() / "02_reward_design.ipynb"), str(target), parameters={"output_dir": str(tmp_path)},
        progress_bar=False,
    )
    assert target.stat().st_size < 1_000_000, f"{target.stat().st_size / 1e6:.1f} MB"
    text = target.read_text()
    assert "plotly.js" not in text and "Plotly.newPlot" not in text  # no bundle in the widget state
    outputs = [output for cell in nbformat.reads(text, as_version=4).cells for output in cell.get("outputs", [])]
    plotted = [output["data"] for output in outputs if "<svg" in output.get("data", {}).get("text/html", "")]
    assert plotted and not [data for data in plotted if WIDGET_VIEW in data]  # the lab's static view alone
