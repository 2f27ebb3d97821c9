"""Metrics rows reach TensorBoard event files and (offline) Weights & Biases, not only metrics.jsonl."""

import pytest

from rlfactory_nb.train.metrics import WANDB_ID_FILE, MetricsWriter, read_metrics

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
