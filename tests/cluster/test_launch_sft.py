"""Supervised fine-tuning as a cluster job (`launch(cfg, kind="sft")`) on the real local Ray: the
conversations file named by `sft.data` travels with the job (a staged file: it lies outside the
project folder), the driver trains the tiny preset on it, and the job reads back like a GRPO job's
(status, metrics with `sft/loss` per step, a checkpoint whose weights moved).

Slow: the session's cluster (conftest.py), a few steps of the calculator preset.
"""

import asyncio
import json
import time
from pathlib import Path

import pytest
import torch

from rlfactory_nb.cluster import TrainingJob, launch
from rlfactory_nb.config import RunConfig
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.rollout.conversation import conversation_trajectory
from rlfactory_nb.train.run_folder import read_metrics
from rlfactory_nb.train.sft import sft_sync
from tests.train.test_sft import ROWS, rows

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


def sft_job_config(tmp_path: Path, name: str, data: Path | None = None) -> RunConfig:
    """Every step trains on all the rows (as tests/train/test_sft.py's), so the loss of the same rows falls."""
    return RunConfig.from_yaml(
        ROOT / "examples/calculator/config.yaml",
        overrides={
            "name": name, "output_dir": str(tmp_path / "runs"), "tools.config": str(ROOT / "examples/calculator/tools.yaml"),
            "grpo.micro_batch_size": 2, "sft.steps": STEPS, "sft.batch_size": ROWS, "sft.lr": 3e-3,
            **({"sft.data": str(data)} if data is not None else {}),
        },
    )  # fmt: skip


def weights_moved(checkpoint: Path | str) -> bool:
    base = Policy.load("tiny-calculator").model.state_dict()
    trained = Policy.load(checkpoint).model.state_dict()
    assert trained.keys() == base.keys()
    return any(not torch.equal(trained[key].float(), base[key].float()) for key in base)


def test_an_sft_job_trains_on_a_shipped_conversations_file(cluster, tmp_path):
    data = tmp_path / "data" / "conversations.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps(row) + "\n" for row in rows()))
    job = launch(sft_job_config(tmp_path, "sft-job", data), cluster, kind="sft", linger_s=5)
    assert "1 staged file" in job.shipped
    assert job.wait(timeout_s=400) == "finished", job.logs()
    info = job.info()
    assert (job.kind, info["step"], info["steps"]) == ("sft", STEPS, STEPS)
    assert f"finished, SFT step {STEPS}/{STEPS}" in repr(job)
    metrics = job.metrics()
    assert [row["step"] for row in metrics] == list(range(1, STEPS + 1))
    losses = [row["sft/loss"] for row in metrics]
    assert losses[-1] < losses[0], losses  # measured: 6.317, 5.074, 3.986
    kernel = sft_sync(
        sft_job_config(tmp_path / "kernel", "sft-kernel"), data=rows()
    )  # the same run, in this process
    assert losses == pytest.approx([row["sft/loss"] for row in read_metrics(kernel.run_dir)], rel=1e-3)
    assert all(row["sft/tokens"] > 0 and row["sft/rows"] == ROWS for row in metrics)
    assert [Path(path).name for path in job.checkpoints] == [f"step_{STEPS:06d}"]
    assert weights_moved(job.checkpoints[-1])
    again = TrainingJob.attach("sft-job", output_dir=tmp_path / "runs")  # the run folder alone, as for GRPO
    assert again.status == "finished" and again.metrics() == metrics


async def test_an_sft_job_on_trajectories_from_the_kernel_stops_with_a_checkpoint_and_resumes(
    cluster, tmp_path, tiny_policy
):
    """rf.Trajectory objects travel with the job (as its train_data, kept in code/); `job.stop()`
    ends it after the step in flight, checkpointed, and `resume=True` goes on from there, as for a
    GRPO job. `job.engine()` serves the weights being trained while it runs."""
    trajectories = [
        conversation_trajectory(tiny_policy.tokenizer, row["messages"], row["tools"]) for row in rows()
    ]
    cfg = sft_job_config(tmp_path, "sft-stop").replace({"sft.steps": 500})
    job = launch(
        cfg, cluster, kind="sft", train_data=trajectories, num_cpus=1, linger_s=30
    )  # 1 CPU for the engine
    deadline = time.monotonic() + 300
    while job.info().get("step", 0) < 1 and not job.done:
        assert time.monotonic() < deadline, job.logs()
        await asyncio.sleep(1)
    engine = job.engine()  # the weights of a step between two updates
    assert engine.version >= 1 and job.status == "running"
    await engine.close()
    assert job.stop(timeout_s=120) == "stopped", job.logs()
    step = job.info()["step"]
    assert 1 <= step < 500 and [row["step"] for row in job.metrics()] == list(range(1, step + 1))
    assert Path(job.checkpoints[-1]).name == f"step_{step:06d}"
    assert (Path(job.run_dir) / "code" / "train_data.jsonl").read_text().count("prompt_ids") == ROWS

    # resumed without the objects: the run folder kept them; the steps go on from the checkpoint
    resumed = launch(cfg.replace({"sft.steps": step + 2}), cluster, kind="sft", resume=True, linger_s=5)
    assert resumed.wait(timeout_s=300) == "finished", resumed.logs()
    metrics = resumed.metrics()
    assert [row["step"] for row in metrics] == list(range(1, step + 3))
    assert metrics[-1]["sft/loss"] < metrics[step - 1]["sft/loss"]
    assert Path(resumed.checkpoints[-1]).name == f"step_{step + 2:06d}"
