"""Metrics rows, and a few samples per step, reach TensorBoard event files and (offline) Weights &
Biases, not only metrics.jsonl."""

import json
from pathlib import Path

import pytest
import torch

from rlfactory_nb.train.metrics import WANDB_ID_FILE, MetricsWriter, read_metrics, sample_rows

ROWS = [{"step": 1, "reward/mean": 0.25, "loss": 1.5}, {"step": 2, "reward/mean": 0.75, "loss": 0.5}]


def test_tensorboard_event_files_hold_every_numeric_metric(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = MetricsWriter(tmp_path)
    for row in ROWS:
        writer.write(row)
    writer.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    rewards = [(event.step, event.value) for event in events.Scalars("reward/mean")]
    assert rewards == [(1, 0.25), (2, 0.75)]
    assert [row["loss"] for row in read_metrics(tmp_path)] == [1.5, 0.5]


@pytest.mark.timeout(120)
def test_wandb_logs_each_row_and_a_resumed_run_keeps_its_wandb_id(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    writer = MetricsWriter(tmp_path, tensorboard=False, wandb_project="rlfactory-test", config={"name": "t"})
    for row in ROWS:
        writer.write(row)
    run = writer._wandb
    assert run.summary["reward/mean"] == 0.75 and run.config["name"] == "t"
    first_id = run.id
    writer.close()
    assert (tmp_path / WANDB_ID_FILE).read_text().strip() == first_id

    resumed = MetricsWriter(tmp_path, tensorboard=False, wandb_project="rlfactory-test")
    assert resumed._wandb.id == first_id
    resumed.close()
    assert list((tmp_path / "wandb").glob(f"offline-run-*-{first_id}")), "no offline W&B run written"


def step_samples():
    """Two groups of two, like a calculator step: the first trained (rewards differ), the second not."""
    from rlfactory_nb.rewards.runner import RewardOutcome
    from rlfactory_nb.rewards.samples import make_sample
    from rlfactory_nb.types import ToolCall, ToolResult, Turn

    call = Turn(
        '<think>use the tool</think><tool_call>{"name": "calculator", "arguments": {"expression": "12*3"}}</tool_call>',
        calls=[ToolCall("calculator", {"expression": "12*3"})], results=[ToolResult("calculator", "ok", "36")],
    )
    groups = [
        [make_sample(call, "<think>36 it is</think><answer>36</answer>").trajectory,
         make_sample("<answer>35 | maybe\nor 34</answer>").trajectory],
        [make_sample("<answer>7</answer>").trajectory, make_sample("<answer>7</answer>").trajectory],
    ]
    outcomes = [[RewardOutcome("a", 1.0), RewardOutcome("b", 0.0)], [RewardOutcome("c", 1.0), RewardOutcome("d", 1.0)]]
    return sample_rows(5, groups, outcomes, trained=groups[0], advantages=torch.tensor([1.0, -1.0]), limit=3)


def test_sample_rows_show_prompt_calls_answer_reward_and_the_advantage_when_trained():
    rows = step_samples()
    assert [(row.answer, row.reward, row.advantage) for row in rows] == [
        ("36", 1.0, 1.0), ("35 | maybe\nor 34", 0.0, -1.0), ("7", 1.0, None)
    ]
    assert rows[0].tool_calls == 'calculator({"expression": "12*3"})' and rows[1].tool_calls == ""
    assert rows[0].prompt == "question" and rows[0].step == 5


def test_tensorboard_gets_the_samples_as_a_markdown_table(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = MetricsWriter(tmp_path)
    writer.write_samples(5, step_samples())
    writer.write({"step": 5, "reward/mean": 0.75})
    writer.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    [text] = events.Tensors("samples/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    assert text.step == 5
    assert table.splitlines()[0] == "| step | prompt | tool_calls | answer | reward | advantage |"
    assert '| 5 | question | calculator({"expression": "12*3"}) | 36 | 1.0 | 1.0 |' in table
    assert "| 35 \\| maybe<br>or 34 | 0.0 | -1.0 |" in table  # one row per trajectory, whatever its text
    assert table.rstrip().endswith("| 7 | 1.0 |  |")  # not trained: no advantage


@pytest.mark.timeout(120)
def test_wandb_gets_a_samples_table_at_the_step(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    writer = MetricsWriter(tmp_path, tensorboard=False, wandb_project="rlfactory-test")
    writer.write_samples(5, step_samples())
    writer.write({"step": 5, "reward/mean": 0.75})
    run_dir = Path(writer._wandb.dir)
    writer.close()
    [table_file] = (run_dir / "media" / "table").glob("samples_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["step", "prompt", "tool_calls", "answer", "reward", "advantage"]
    assert [row[3:] for row in table["data"]] == [["36", 1.0, 1.0], ["35 | maybe\nor 34", 0.0, -1.0], ["7", 1.0, None]]
