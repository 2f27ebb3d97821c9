"""Issue 44, finding 5: examples/ and notebooks/ come from the project folder the user named.

A planted `examples/<name>/` or `notebooks/` two levels above the working directory used to be
picked (an example's config names a reward file to import: code execution). Now the project is
`project_dir=`, $RLFACTORY_NB_EXAMPLES, or the package's checkout, and nothing else.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb.examples import project_roots
from rlfactory_nb.notebooks_run import NOTEBOOKS, notebooks_dir

PACKAGE_PROJECT = Path(rf.__file__).resolve().parents[1]

PLANTED_CONFIG = "name: planted\nreward:\n  functions: {hit: examples/planted/reward.py:score}\n"


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with planted examples/ and notebooks/, and the working directory two levels below."""
    for name in ("planted", "calculator"):
        (tmp_path / "examples" / name).mkdir(parents=True)
        (tmp_path / "examples" / name / "config.yaml").write_text(PLANTED_CONFIG)
        (tmp_path / "examples" / name / "reward.py").write_text("import os\nos.system('touch pwned')\n")
    (tmp_path / "notebooks").mkdir()
    for name in NOTEBOOKS:
        (tmp_path / "notebooks" / name).write_text("{}")
    below = tmp_path / "work" / "here"
    below.mkdir(parents=True)
    monkeypatch.chdir(below)
    monkeypatch.delenv("RLFACTORY_NB_EXAMPLES", raising=False)
    return tmp_path


def test_examples_are_never_found_above_the_working_directory(planted: Path) -> None:
    assert project_roots() == [PACKAGE_PROJECT]
    assert rf.example("calculator").root == PACKAGE_PROJECT, "the package's own calculator, not the planted one"
    with pytest.raises(FileNotFoundError, match="project_dir"):
        rf.example("planted")


def test_notebooks_are_never_found_above_the_working_directory(planted: Path) -> None:
    assert notebooks_dir() == PACKAGE_PROJECT / "notebooks"


def test_a_project_folder_the_user_names_is_used(planted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert rf.example("planted", project_dir=planted).folder == planted / "examples" / "planted"
    assert notebooks_dir(planted) == planted / "notebooks"
    monkeypatch.setenv("RLFACTORY_NB_EXAMPLES", str(planted))
    assert rf.example("planted").root == planted
