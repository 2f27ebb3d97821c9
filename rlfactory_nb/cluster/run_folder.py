"""What a run leaves on disk, read back: the single source for a job's status, metrics, rollouts,
logs and checkpoints, whether the job is alive on Ray or finished long ago.

    runs/<name>/metrics.jsonl                  one row per step (train/metrics.py)
    runs/<name>/trajectories/step_XXXXXX.jsonl sampled rollouts of each step
    runs/<name>/checkpoints/step_XXXXXX/       Hugging Face folders (models/checkpoint.py)
    runs/<name>/job.json                       the driver's state: pending, running, stopping,
                                               finished, stopped, failed, killed; step; error
    runs/<name>/job.log                        the driver's stdout and stderr

The driver actor writes job.json and job.log; a TrainingJob reads through this class, on the
driver's machine (via the actor) or on its own when the actor is gone. The folder is a local path or
a storage URI every node reaches (`output_dir: s3://bucket/runs`, storage.py): the same reads work
on both, so the kernel never needs the driver's disk. On a URI, checkpoints are named by their URIs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rlfactory_nb.models.checkpoint import CHECKPOINTS, TRAINER_STATE, list_checkpoints, parse_step
from rlfactory_nb.storage import Storage, is_uri
from rlfactory_nb.train.metrics import read_metrics

JOB_FILE, LOG_FILE = "job.json", "job.log"
TERMINAL_STATES = frozenset({"finished", "stopped", "failed", "killed"})


class RunFolder:
    def __init__(self, location: str | Path):
        self.path: str | Path = location if is_uri(location) else Path(location)
        """the run's folder: a local Path, or its URI (a str)"""
        self.store = Storage.at(self.path)

    @property
    def remote(self) -> bool:
        return is_uri(self.path)

    def metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.path)

    def trajectory_records(self, k: int) -> list[dict[str, Any]]:
        """The last `k` trajectories saved, newest step last, as JSON records."""
        files = [
            name
            for name in self.store.list("trajectories")
            if name.startswith("step_") and name.endswith(".jsonl")
        ]
        records: list[dict[str, Any]] = []
        for name in reversed(files):
            text = self.store.read_text(f"trajectories/{name}") or ""
            records = [json.loads(line) for line in text.splitlines() if line.strip()] + records
            if len(records) >= k:
                break
        return records[-k:] if k > 0 else []

    def logs(self, tail_chars: int = 20_000) -> str:
        return self.store.tail(LOG_FILE, tail_chars).decode("utf-8", errors="replace")

    def checkpoints(self) -> list[str | Path]:
        """Complete checkpoints, oldest first: local folders, or URIs for a run on storage."""
        if not self.remote:
            return [checkpoint.path for checkpoint in list_checkpoints(self.path)]
        steps = sorted(
            (step, name)
            for name in self.store.list(CHECKPOINTS)
            if (step := parse_step(name)) is not None
            and self.store.exists(f"{CHECKPOINTS}/{name}/{TRAINER_STATE}")
        )
        return [self.store.uri(f"{CHECKPOINTS}/{name}") for _, name in steps]

    def exists(self) -> bool:
        return self.store.exists("")

    def status(self) -> dict[str, Any]:
        """The state last written to job.json ({"state": "unknown"} before any was)."""
        try:
            return json.loads(self.store.read_text(JOB_FILE) or "")
        except (OSError, json.JSONDecodeError):
            return {"state": "unknown"}

    def write_status(self, **fields: Any) -> dict[str, Any]:
        """Merge `fields` into job.json atomically (readers never see half a file)."""
        status = {**self.status(), **fields, "updated": time.time()}
        self.store.write_text(JOB_FILE, json.dumps(status, default=str))
        return status
