"""What a run leaves on disk, read back: the single source for a job's status, metrics, rollouts,
logs and checkpoints, whether the job is alive on Ray or finished long ago.

    runs/<name>/metrics.jsonl                  one row per step (train/metrics.py)
    runs/<name>/trajectories/step_XXXXXX.jsonl sampled rollouts of each step
    runs/<name>/checkpoints/step_XXXXXX/       Hugging Face folders (models/checkpoint.py)
    runs/<name>/job.json                       the driver's state: pending, running, stopping,
                                               finished, stopped, failed, killed; step; error
    runs/<name>/job.log                        the driver's stdout and stderr

The driver actor writes job.json and job.log; a TrainingJob reads through this class, on the
driver's machine (via the actor) or on its own when the actor is gone.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlfactory_nb.models.checkpoint import list_checkpoints
from rlfactory_nb.train.metrics import read_metrics

JOB_FILE, LOG_FILE = "job.json", "job.log"
TERMINAL_STATES = frozenset({"finished", "stopped", "failed", "killed"})


@dataclass(frozen=True)
class RunFolder:
    path: Path

    def metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.path)

    def trajectory_records(self, k: int) -> list[dict[str, Any]]:
        """The last `k` trajectories saved, newest step last, as JSON records."""
        folder = self.path / "trajectories"
        files = sorted(folder.glob("step_*.jsonl")) if folder.exists() else []
        records: list[dict[str, Any]] = []
        for file in reversed(files):
            lines = [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
            records = [json.loads(line) for line in lines] + records
            if len(records) >= k:
                break
        return records[-k:] if k > 0 else []

    def logs(self, tail_chars: int = 20_000) -> str:
        path = self.path / LOG_FILE
        if not path.exists():
            return ""
        with path.open("rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - tail_chars))
            return file.read().decode("utf-8", errors="replace")

    def checkpoints(self) -> list[Path]:
        return [checkpoint.path for checkpoint in list_checkpoints(self.path)]

    def status(self) -> dict[str, Any]:
        """The state last written to job.json ({"state": "unknown"} before any was)."""
        try:
            return json.loads((self.path / JOB_FILE).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return {"state": "unknown"}

    def write_status(self, **fields: Any) -> dict[str, Any]:
        """Merge `fields` into job.json atomically (readers never see half a file)."""
        status = {**self.status(), **fields, "updated": time.time()}
        self.path.mkdir(parents=True, exist_ok=True)
        temporary = self.path / f".{JOB_FILE}.tmp-{os.getpid()}"
        temporary.write_text(json.dumps(status, default=str), encoding="utf-8")
        os.replace(temporary, self.path / JOB_FILE)
        return status
