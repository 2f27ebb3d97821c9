"""One error style on the command line: each user mistake is one line on stderr naming the fix, with
exit code 2, and no traceback unless --debug is on the line."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlfactory_nb.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "examples" / "calculator" / "config.yaml")


def mistakes(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, a fragment the one line must hold: what is wrong or the fix)."""
    (tmp_path / "runs" / "mine" / "checkpoints" / "step_000002").mkdir(parents=True)
    missing_checkpoint = str(tmp_path / "runs" / "mine" / "checkpoints" / "step_000009")
    return {
        "missing config": (["train", str(tmp_path / "nope.yaml")], "no such file or folder"),
        "missing config (eval)": (["eval", str(tmp_path / "nope.yaml")], "nope.yaml (check the path)"),
        "bad key": (["train", CONFIG, "grpo.stepz=2"], "did you mean 'grpo.steps'"),
        "bad value": (["config", CONFIG, "grpo.lr=fast"], "grpo.lr: expected float"),
        "model not found (offline)": (
            ["eval", CONFIG, "--model", "Qwen/No-Such-Model-0.1B"], "HF_HUB_OFFLINE is set: download it"),
        "checkpoint not found": (["eval", CONFIG, "--model", missing_checkpoint], "holds step_000002): check the path"),
    }


@pytest.mark.timeout(300)
def test_every_user_mistake_is_one_line_naming_the_fix_with_exit_code_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    for name, (argv, fragment) in mistakes(tmp_path).items():
        started = time.perf_counter()
        code = main(argv)
        took = time.perf_counter() - started
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert code == 2, f"{name}: exit code {code}, stderr {captured.err!r}"
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{name}: {captured.err!r}"
        assert fragment in lines[0], f"{name}: {lines[0]!r} lacks {fragment!r}"
        assert "Traceback" not in captured.out + captured.err
        if "offline" in name:  # refused at once, not after a minute of hub retries
            assert took < 15, f"{name} took {took:.0f} s"


@pytest.mark.timeout(120)
def test_debug_shows_the_traceback_and_the_installed_command_answers_in_one_line(tmp_path):
    command = [sys.executable, "-m", "rlfactory_nb.cli", "train", str(tmp_path / "nope.yaml")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plain = subprocess.run(command, check=False, capture_output=True, text=True, env=env, timeout=100)
    assert plain.returncode == 2 and plain.stderr.strip().count("\n") == 0, plain.stderr
    debug = subprocess.run([*command, "--debug"], check=False, capture_output=True, text=True, env=env, timeout=100)
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "FileNotFoundError" in debug.stderr
