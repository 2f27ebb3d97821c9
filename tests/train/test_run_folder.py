"""A run folder read back without Ray: status, metrics, newest trajectories, log tail, checkpoints."""

import json

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
