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
        self.objects = objects or RunObjects()
        kernel = self.objects.train_data
        self.source = kernel if kernel is not None else cfg.sft.data

    async def start(self, resume: bool = False) -> SFTJobTrainer:
        """As `SFTTrainer.start`, after keeping the kernel's rows in the run folder (code/), as GRPO's
        Trainer does: the launcher writes them only into a local run folder, and a run on storage
        uploads this one."""
        if not self.objects.empty:
            self.objects.save(self.run_dir, config=self.cfg)
        await super().start(resume)
        return self

    def recorded_config(self) -> RunConfig:
        """Rows from the kernel are named by the run folder's copy, as `sft.data` (`RunObjects.recorded`
        names them as GRPO's `data.train`)."""
        recorded = self.objects.recorded(self.cfg)
        if self.objects.train_data is None:
            return recorded
        return recorded.replace({"sft.data": recorded.data.train, "data.train": self.cfg.data.train})

    async def run(
        self, on_step: StepCallback | None = None, stop_event: asyncio.Event | None = None
    ) -> SFTResult:
        if self.source is None:  # a resume whose run folder kept no train_data, and no sft.data
            raise ConfigError([NO_SFT_DATA])
        return await self.fine_tune(self.source, on_step, stop_event)
