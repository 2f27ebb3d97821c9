"""The SFT trainer a cluster job's driver runs (train/sft_job.py), in one process: it drives like
GRPO's Trainer (start, run(on_step, stop_event), close), on rows from the kernel or `sft.data`, and a
set stop event ends it after the step in flight."""

from __future__ import annotations

import asyncio

import pytest

from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.errors import ConfigError
from rlfactory_nb.models.checkpoint import RUN_CONFIG
from rlfactory_nb.train.run_folder import read_metrics
from rlfactory_nb.train.sft_job import SFTJobTrainer
from tests.train.test_sft import config, rows


async def test_a_stop_event_ends_the_run_after_the_step_in_flight(tmp_path) -> None:
    cfg = config(tmp_path, steps=5)
    trainer = SFTJobTrainer(cfg, RunObjects(train_data=rows()), tmp_path / "elsewhere")
    stop = asyncio.Event()
    try:
        await trainer.start()
        result = await trainer.run(
            on_step=lambda row: stop.set() if row["step"] == 2 else None, stop_event=stop
        )
        await trainer.save_checkpoint()  # as the driver does for a stopped run
    finally:
        await trainer.close()
    assert result.step == 2 and trainer.step == 2
    run = tmp_path / "elsewhere"
    assert [row["step"] for row in read_metrics(run)] == [1, 2]  # its run_dir, not cfg's
    assert not (tmp_path / "runs").exists()
    kept = (run / "code" / "train_data.jsonl").read_text()  # a run on storage uploads them from here
    assert kept.count("messages") == len(rows())
    recorded = RunConfig.from_yaml(run / "checkpoints" / "step_000002" / RUN_CONFIG)
    assert recorded.sft.data.endswith("code/train_data.jsonl") and recorded.data.train == cfg.data.train


async def test_without_data_it_names_sft_data(tmp_path) -> None:
    trainer = SFTJobTrainer(config(tmp_path, steps=1), None, tmp_path / "run")
    with pytest.raises(ConfigError, match=r"sft\.data: nothing to fine-tune on"):
        await trainer.run()
