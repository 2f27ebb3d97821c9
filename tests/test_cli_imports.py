"""The command line stays light and says what it does (issue #21).

`tools` and `config` never import torch, transformers or ray: each command runs in a fresh interpreter
under `-X importtime`, which writes one stderr line per imported module, and the test reads the
module names from those lines, so it asserts what was imported, not how long it took. `--help` lists
every command on one line, and each command's `--help` ends with an example.
"""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from rlfactory_nb.cli import build_parser, main

REPO_ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "ray")


def command_names(parser: argparse.ArgumentParser) -> list[str]:
    """The commands a parser dispatches to, in `--help` order; a new command is checked like the rest."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(commands.choices)


COMMANDS = command_names(build_parser())


def imported_modules(*command: str) -> set[str]:
    """Every module `python -m rlfactory_nb.cli COMMAND...` imports, from its `-X importtime` lines."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rlfactory_nb.cli", *command],
        check=False,  # the assert below shows stderr
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # "import time:       412 |       1038 |     yaml.reader": self us | cumulative us | nested name
    columns = [line.split("|") for line in result.stderr.splitlines() if line.startswith("import time:")]
    return {name.strip() for timing, _, name in columns if timing.split(":")[1].strip().isdigit()}


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["tools", "list", "examples/calculator/tools.yaml"], "rlfactory_nb.tools.toolset"),
        (
            ["tools", "call", "examples/calculator/tools.yaml", "calculator", '{"expression": "6*7"}'],
            "rlfactory_nb.tools.toolset",
        ),
        (["config", "examples/calculator/config.yaml"], "rlfactory_nb.config"),
    ],
    ids=["tools list", "tools call", "config"],
)
def test_light_commands_import_no_torch_transformers_or_ray(command, expected):
    modules = imported_modules(*command)
    assert expected in modules  # the command ran and its imports were read
    heavy = sorted(name for name in modules if name.split(".")[0] in HEAVY)
    assert heavy == [], f"{' '.join(command)} imported {heavy[:10]}"


def help_text(capsys, *command: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_help_lists_every_command_on_one_line(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to the terminal; 80 is the narrowest we promise
    lines = help_text(capsys).splitlines()
    listing = lines[lines.index("  COMMAND") + 1 : lines.index("options:") - 1]
    assert [line.split()[0] for line in listing] == COMMANDS, "each summary must fit one line at 80 columns"
    assert all(len(line.split()) > 1 for line in listing), listing


@pytest.mark.parametrize(
    "command", [[name] for name in COMMANDS] + [["tools", "list"], ["tools", "call"]], ids=" ".join
)
def test_each_command_help_shows_its_options_and_an_example(capsys, command):
    text = help_text(capsys, *command)
    assert "options:" in text
    assert f"example:\n  rlfactory-nb {' '.join(command)}" in text
