"""One papermill run of the four notebooks per session, shared by the tests that read its output."""

import os

import pytest
from base_install import hide_extras_env

from rlfactory_nb.notebooks_run import run_notebooks

CELL_TIMEOUT_S = 300
"""a cell's bound in the test runs (the runner's default is 900 s, for a user's long training cell):
with the test parameters the longest cell takes well under a minute, and a cell whose reply the
kernel/client pair lost (the runner reruns that notebook once) cost 15 minutes of a 2026-12-01 suite
at 900 s"""


@pytest.fixture(scope="session")
def executed_notebooks(tmp_path_factory, tiny_policy):
    """The executed notebooks (with .html exports beside them) on the notebooks' small defaults;
    notebook 03's run is under `<folder>/runs/calculator-notebook`. The kernels see a base install,
    as `make demo` has: no module of the project's extras imports (tests/base_install.py)."""
    hide = hide_extras_env(tmp_path_factory.mktemp("base-install"))
    before = {key: os.environ.get(key) for key in hide}
    os.environ.update(hide)
    try:
        return run_notebooks(tmp_path_factory.mktemp("executed"), {"eval_size": 4}, timeout_s=CELL_TIMEOUT_S)
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
