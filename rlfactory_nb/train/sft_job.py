"""Supervised fine-tuning as a cluster job: `SFTTrainer` behind the interface the training driver
drives (cluster/driver.py), the one GRPO's `Trainer` has: `start(resume)`, `run(on_step,
stop_event)`, `step`, `last_checkpoint`, `save_checkpoint`, `backend`, `setup`, `close`. So
`job.stop()`, `job.engine()`, the status record, the run folder and the dashboard of an SFT job are
a GRPO job's, and the driver has no SFT code of its own (cluster/job_kinds.py picks the trainer).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rlfactory_nb.config import RunConfig
from rlfactory_nb.config_sft import NO_SFT_DATA
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.errors import ConfigError
from rlfactory_nb.train.sft import SFTResult, SFTTrainer, StepCallback


class SFTJobTrainer(SFTTrainer):
    """An SFT run on `objects.train_data` (rows or trajectory dicts from the kernel) or `sft.data`."""

    runtime = None
    """no tools and no reward: nothing whose record the driver copies"""

    def __init__(self, cfg: RunConfig, objects: RunObjects | None, run_dir: str | Path):
        super().__init__(cfg, run_dir=run_dir)
        kernel = objects.train_data if objects is not None else None
        self.source = kernel if kernel is not None else cfg.sft.data

    async def run(
        self, on_step: StepCallback | None = None, stop_event: asyncio.Event | None = None
    ) -> SFTResult:
        if self.source is None:  # a resume whose run folder kept no train_data, and no sft.data
            raise ConfigError([NO_SFT_DATA])
        return await self.fine_tune(self.source, on_step, stop_event)
