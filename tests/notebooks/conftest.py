"""One papermill run of the four notebooks per session, shared by the tests that read its output."""

import pytest

from rlfactory_nb.notebooks_run import run_notebooks


@pytest.fixture(scope="session")
def executed_notebooks(tmp_path_factory, tiny_policy):
    """The executed notebooks (with .html exports beside them) on the notebooks' small defaults;
    notebook 03's run is under `<folder>/runs/calculator-notebook`."""
    return run_notebooks(tmp_path_factory.mktemp("executed"), {"eval_size": 4})
