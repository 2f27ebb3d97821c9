"""A run folder read back without Ray: status, metrics, newest trajectories, log tail, checkpoints."""

import ast
import json
from pathlib import Path

import pytest

from rlfactory_nb.cluster.jobs import JobFailed, TrainingJob
from rlfactory_nb.train.run_folder import RunFolder
from rlfactory_nb.types import Trajectory, save_jsonl


def test_status_merges_and_is_replaced_atomically(tmp_path):
    folder = RunFolder(tmp_path / "run")
    assert folder.status() == {"state": "unknown"}
    folder.write_status(state="running", step=1, steps=5)
    folder.write_status(step=2)
    status = folder.status()
    assert (status["state"], status["step"], status["steps"]) == ("running", 2, 5)
    assert [p.name for p in folder.path.iterdir()] == ["job.json"]  # no temporary left behind


def test_latest_trajectories_span_step_files_newest_last(tmp_path):
    folder = RunFolder(tmp_path)
    for step in (1, 2):
        save_jsonl([Trajectory([0], id=f"{step}-{i}") for i in range(3)], tmp_path / "trajectories" / f"step_{step:06d}.jsonl")
    assert [r["id"] for r in folder.trajectory_records(4)] == ["1-2", "2-0", "2-1", "2-2"]
    assert folder.trajectory_records(0) == []


def test_logs_tail_and_missing_files(tmp_path):
    folder = RunFolder(tmp_path)
    assert folder.logs() == "" and folder.metrics() == [] and folder.checkpoints() == []
    (tmp_path / "job.log").write_text("x" * 100 + "THE END")
    assert folder.logs(tail_chars=7) == "THE END"


def test_attach_offline_reads_the_folder_and_wait_reports_failure(tmp_path):
    run = tmp_path / "broken"
    RunFolder(run).write_status(state="failed", step=3, steps=10, error="Traceback ...\nValueError: boom")
    rows = [{"step": 1, "reward/mean": 0.5}, {"step": 2, "reward/mean": 0.75, "eval/greedy_reward/mean": 0.25}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    job = TrainingJob.attach("broken", output_dir=tmp_path)
    assert job.status == "failed" and job.done and job.metrics()[0]["reward/mean"] == 0.5
    frame = job.metrics_frame()  # a step that lacks a metric has NaN there
    assert frame.index.name == "step" and frame.loc[2, "reward/mean"] == 0.75
    assert frame["eval/greedy_reward/mean"].isna().tolist() == [True, False]
    with pytest.raises(JobFailed, match="ValueError: boom"):
        job.wait(timeout_s=1)
    assert job.wait(timeout_s=1, raise_on_failure=False) == "failed"
    assert job.stop() == "failed"  # nothing to stop


def test_attach_unknown_name_says_where_it_looked(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run folder"):
        TrainingJob.attach("nope", output_dir=tmp_path)


def test_wait_times_out_on_a_run_that_is_still_going(tmp_path):
    RunFolder(tmp_path / "live").write_status(state="running", step=1, steps=10)
    with pytest.raises(TimeoutError, match="still running"):
        TrainingJob.attach("live", output_dir=tmp_path).wait(timeout_s=0.2, poll_s=0.05)


# -- one owner of the run folder's names (issue #40, item 5) ----------------------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "rlfactory_nb"
OWNERS = {
    "metrics.jsonl": "train/run_folder.py",
    "trajectories": "train/run_folder.py",
    "job.json": "train/run_folder.py",
    "job.log": "train/run_folder.py",
    "tool_record.sqlite": "train/run_folder.py",
    "tensorboard": "train/run_folder.py",
    "wandb_id.txt": "train/run_folder.py",
    "checkpoints": "models/checkpoint.py",  # below layer 4: defined where the checkpoint is, re-exported
    "code": "data/objects.py",  # likewise: the objects' folder
}
"""each run-folder name and the one module allowed to spell it (train/run_folder.py re-exports all)"""
NOT_PATHS = {"hasattr", "getattr", "_ask", "get"}
"""calls whose string argument is an attribute, method or field name (`job.checkpoints`, a JSON
reply's `data.get("code")`), not a path"""


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        for statement in body if isinstance(body, list) else []:
            # a module, class or function docstring, or an attribute's: a bare string statement
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                found.add(id(statement.value))
    return found


def _attribute_names(tree: ast.AST) -> set[int]:
    return {
        id(argument)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in NOT_PATHS
        for argument in node.args
    }


def _names_in(text: str) -> list[str]:
    """Run-folder names `text` spells as a path: the whole string, a file name as one "/" part, or
    a folder name followed by "/" (so a metric key like "rollout/trajectories" and prose are not)."""
    if any(space in text for space in " \n\t"):
        return []
    parts = text.split("/")
    return [
        name
        for name in OWNERS
        if text == name or ("." in name and name in parts) or (f"{name}/" in text and name in parts[:-1])
    ]


def _spelled_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of each run-folder name written in a string literal (docstrings, comments and
    attribute names aside), f-strings included."""
    tree = ast.parse(source)
    dict_keys = {id(key) for node in ast.walk(tree) if isinstance(node, ast.Dict) for key in node.keys if key is not None}
    skipped = _docstrings(tree) | _attribute_names(tree) | dict_keys  # a dict key is a field's name, not a path
    return [
        (node.lineno, name)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
        for name in _names_in(node.value)
    ]


def test_only_the_run_folder_spells_run_folder_names():
    """Before: cli/compare.py, cluster/run_folder.py, eval.py, train/loop.py, train/metrics.py and
    train/run_storage.py spelled them."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for line, name in _spelled_names(path.read_text(encoding="utf-8")):
            if OWNERS[name] != module:
                offenders.append(f"{module}:{line}: {name!r} (use rlfactory_nb.train.run_folder)")
    assert not offenders, "\n".join(offenders)


def test_the_name_check_finds_hand_spelled_names():
    source = 'x = "metrics.jsonl"\ny = f"{run}/trajectories/step_{n}.jsonl"\nz = run / "job.json"\n'
    assert sorted(name for _, name in _spelled_names(source)) == ["job.json", "metrics.jsonl", "trajectories"]
    ignored = '"""Writes metrics.jsonl."""\nk = f"{prefix}/trajectories"\nhasattr(job, "checkpoints")\nh = "see runs/x/job.json"\n'
    assert _spelled_names(ignored) == []


def test_the_last_checkpoint_of_a_run_that_saved_none_yet_says_so(tmp_path):
    from rlfactory_nb.errors import NoCheckpointYet

    folder = RunFolder(tmp_path / "starting-run")
    checkpoints = folder.checkpoints()
    assert checkpoints == []
    with pytest.raises(NoCheckpointYet, match=r"starting-run.*0 complete checkpoint\(s\).*job\.wait\(\)"):
        checkpoints[-1]
    with pytest.raises(IndexError):  # still what code catching IndexError expects
        checkpoints[0]
