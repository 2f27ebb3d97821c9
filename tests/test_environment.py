"""environment.yml's pip section is a requirements file that pip accepts line by line.

conda writes the section to a temporary requirements file and runs `pip install -r` on it from
environment.yml's folder. pip allows almost no per-line options there, so a line like
`flash-attn>=2.8 --no-build-isolation` broke `conda env create` at its last step (issue #14). pip's
own requirements parser checks every line without an index or a network; `pip install --dry-run
--no-index` would not do, since it exits 1 alike for a bad line and for a package it cannot download.
"""

from pathlib import Path

import pytest
import yaml
from pip._internal.exceptions import RequirementsFileParseError
from pip._internal.network.session import PipSession
from pip._internal.req.constructors import install_req_from_parsed_requirement
from pip._internal.req.req_file import parse_requirements
from pip._internal.req.req_install import InstallRequirement

REPO_ROOT = Path(__file__).resolve().parents[1]


def pip_section() -> list[str]:
    environment = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    sections = [entry["pip"] for entry in environment["dependencies"] if isinstance(entry, dict)]
    assert len(sections) == 1, "environment.yml should have exactly one pip section"
    return sections[0]


def parse_as_pip_would(lines: list[str], folder: Path) -> list[InstallRequirement]:
    """Every line as pip reads it from a requirements file; a line it rejects raises."""
    requirements = folder / "requirements.txt"
    requirements.write_text("\n".join(lines) + "\n")
    return [
        install_req_from_parsed_requirement(parsed)
        for parsed in parse_requirements(str(requirements), session=PipSession())
    ]


def test_every_pip_line_of_environment_yml_parses(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # conda runs pip from environment.yml's folder: `-e .` is the repo
    lines = pip_section()
    requirements = parse_as_pip_would(lines, tmp_path)
    assert len(requirements) == len(lines)
    editable = [requirement for requirement in requirements if requirement.editable]
    assert [(Path(r.link.file_path), r.extras) for r in editable] == [(REPO_ROOT, {"dev", "programs", "envs"})]


def test_a_per_line_install_option_is_rejected(tmp_path):
    with pytest.raises(RequirementsFileParseError, match="--no-build-isolation"):
        parse_as_pip_would(["vllm>=0.33", "flash-attn>=2.8 --no-build-isolation"], tmp_path)
