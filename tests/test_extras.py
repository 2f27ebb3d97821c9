"""The extras table (rlfactory_nb/extras.py) against pyproject.toml, and the one-line hints it gives."""

import importlib.metadata as md
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import rlfactory_nb as rf
from rlfactory_nb.extras import EXTRA_MODULES, extra_hint, missing_extra

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


def test_every_extra_module_comes_from_a_distribution_of_its_extra():
    extras = PYPROJECT["project"]["optional-dependencies"]
    modules = md.packages_distributions()
    for extra, names in EXTRA_MODULES.items():
        assert extra in extras, f"{extra} is not an extra of pyproject.toml"
        declared = {Requirement(text).name.lower() for text in extras[extra]}
        for module in names:
            dists = {d.lower() for d in modules.get(module, [])}
            if dists:  # installed here: its distribution must be one the extra names (or one it pulls in)
                assert dists & declared, f"module {module} comes from {dists}, which extra {extra} does not name"


def test_a_missing_module_of_an_extra_is_named_with_the_install_command():
    error = ModuleNotFoundError("No module named 'agents'", name="agents")
    assert extra_hint(error) == " (module 'agents' comes with the 'programs' extra: pip install -e '.[programs]')"
    assert extra_hint(ModuleNotFoundError("No module named 'nope'", name="nope")) == ""
    assert extra_hint(ValueError("agents")) == ""


def test_an_example_that_needs_an_absent_extra_says_so_in_one_line(monkeypatch):
    example = rf.example("agents_sdk")
    assert example.notebook.requires == ["programs"]
    monkeypatch.setitem(EXTRA_MODULES, "programs", ("agents", "no_such_module_here"))
    message = example.missing_extra
    assert message == (
        "the agents_sdk example needs the 'programs' extra (no_such_module_here not installed): pip install -e '.[programs]'"
    )
    assert "\n" not in message
    assert rf.example("calculator").missing_extra is None


def test_a_program_file_whose_import_fails_names_the_extra(tmp_path):
    program = tmp_path / "agent.py"
    program.write_text("import no_such_sdk_module\n\nasync def solve(row, llm):\n    return ''\n")
    with pytest.raises(rf.ConfigError, match="no_such_sdk_module"):
        rf.AgentProgram(f"{program}:solve", None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(EXTRA_MODULES, "programs", ("no_such_sdk_module",))
        with pytest.raises(rf.ConfigError, match=r"comes with the 'programs' extra: pip install -e '\.\[programs\]'"):
            rf.AgentProgram(f"{program}:solve", None)


def test_an_unknown_extra_is_refused():
    with pytest.raises(rf.errors.RegistryKeyError, match="unknown extra"):
        missing_extra("gpu-only")
