"""rf.example finds the bundled examples from any folder and resolves their relative paths."""

from pathlib import Path

import pytest

from rlfactory_nb.examples import example

ROOT = Path(__file__).resolve().parents[1]


def test_found_from_a_subfolder_with_paths_resolved(monkeypatch):
    monkeypatch.chdir(ROOT / "notebooks")
    ex = example("calculator")
    cfg = ex.config({"grpo.steps": 3})
    assert ex.root == ROOT and cfg.grpo.steps == 3
    assert cfg.tools.config == str(ROOT / "examples/calculator/tools.yaml") and Path(cfg.output_dir) == ROOT / "runs"
    assert ex.config({"output_dir": "/tmp/elsewhere"}).output_dir == "/tmp/elsewhere"
    rows = ex.dataset("eval", 3)
    assert len(rows) == 3 and rows[0]["ground_truth"]


def test_unknown_example_lists_the_known_ones(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="available: .*calculator"):
        example("weather")
