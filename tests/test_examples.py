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


def test_tools_and_runtime_follow_the_configs_tool_settings(monkeypatch):
    """`ex.tools()` is the run's ToolSet: the tools file's settings, then the config's `tools.*` keys."""
    monkeypatch.chdir(ROOT / "notebooks")
    ex = example("calculator")
    assert ex.tools().settings == ex.runtime().tools.settings
    assert ex.tools(max_result_chars=77).settings.max_result_chars == 77
    assert ex.runtime(overrides={"tools.max_result_chars": 55}).tools.settings.max_result_chars == 55


def test_relative_paths_of_every_path_key_are_resolved(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    cfg = example("calculator").config({"reward.function": "examples/calculator/mine.py:score", "data.eval": "d/eval.jsonl"})
    assert cfg.reward.function == f"{ROOT}/examples/calculator/mine.py:score" and cfg.data.eval == str(ROOT / "d/eval.jsonl")
    assert cfg.model.name == "tiny-calculator" and cfg.data.train == "synthetic:calculator"
