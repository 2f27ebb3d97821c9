"""The run folder: the one place that names what a run writes, and reads it back.

    <output_dir>/<name>/
        metrics.jsonl                  one JSON row per step (train/metrics.py), appended and flushed
        trajectories/step_XXXXXX.jsonl the step's sampled rollouts, one Trajectory per line
        checkpoints/step_XXXXXX/       Hugging Face folders; checkpoints/latest names the newest
                                       complete one (models/checkpoint.py owns what is inside)
        code/                          the objects sent from the kernel: reward, tools, rows
                                       (data/objects.py owns what is inside)
        job.json                       the driver's state: pending, starting, running, stopping,
                                       finished, stopped, failed, killed; step; error (cluster/driver.py)
        job.log                        the driver's stdout and stderr
        tool_record.sqlite             a run on storage: a copy of the tools' result record
        tensorboard/  wandb_id.txt     the trackers' files, when they are on
        compare/                       what `rlfactory-nb compare` writes

The trainer writes here (train/loop.py, train/metrics.py); the upload to storage
(train/run_storage.py), `TrainingJob` and its driver (cluster/), `compare`, `eval` and the CLI read
through `RunFolder`. Names below layer 4 (`checkpoints`, `code`) are defined by the modules that own
what is inside them and re-exported here; `tests/train/test_run_folder.py` fails when any other module
spells one of these names by hand.

The folder is a local path or a storage URI every node reaches (`output_dir: s3://bucket/runs`,
storage.py): the same reads work on both, so the kernel never needs the driver's disk. Anyone who
can write the folder can plant anything in it, so every read here goes through `Storage` (a
symlink or FIFO is refused, naming it; nothing is read unbounded): metrics and trajectories stream
line by line within `MAX_LINE_BYTES`, job.json is read within `MAX_STATUS_BYTES`, and JSON nested too
deep is an error naming the file and line, never a bare RecursionError.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rlfactory_nb.data.objects import CODE_DIR
from rlfactory_nb.data.rows import MAX_LINE_BYTES, bounded_lines, parse_json
from rlfactory_nb.errors import DatasetError, NoCheckpointYet, StorageError
from rlfactory_nb.models.checkpoint import CHECKPOINTS, TRAINER_STATE, list_checkpoints, parse_step, step_name
from rlfactory_nb.storage import Storage, is_uri
from rlfactory_nb.types import Trajectory, parse_trajectories

METRICS_FILE = "metrics.jsonl"
TRAJECTORIES = "trajectories"
JOB_FILE = "job.json"
LOG_FILE = "job.log"
TOOL_RECORD = "tool_record.sqlite"
"""a run on storage keeps a copy of its tool record (the tools file's settings.cache_path) here"""
TENSORBOARD = "tensorboard"
WANDB_ID_FILE = "wandb_id.txt"
COMPARE = "compare"
LAYOUT = (METRICS_FILE, TRAJECTORIES, CHECKPOINTS, CODE_DIR, JOB_FILE, LOG_FILE, TOOL_RECORD, TENSORBOARD, WANDB_ID_FILE, COMPARE)
"""every top-level name a run folder holds"""
TERMINAL_STATES = frozenset({"finished", "stopped", "failed", "killed"})
MAX_STATUS_BYTES = 1024 * 1024
"""job.json is a few hundred bytes; a larger one is not read"""


def trajectory_file(step: int) -> str:
    """The key of step `step`'s trajectories in the run folder.

    >>> trajectory_file(12)
    'trajectories/step_000012.jsonl'
    """
    return f"{TRAJECTORIES}/{step_name(step)}.jsonl"


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every row of a run's metrics.jsonl. A line that is not a JSON object is skipped, as a torn
    last line from a crash is: so is one that is not UTF-8, nested too deep, or past MAX_LINE_BYTES.
    A symlink or FIFO in its place is a StorageError naming it."""
    return RunFolder(run_dir).metrics()


class Checkpoints(list):
    """A run's complete checkpoints, oldest first (paths or URIs). Asking for one the run has not
    saved yet (`job.checkpoints[-1]` while it starts) is a `NoCheckpointYet` naming the run and how
    to wait, not a bare IndexError."""

    def __init__(self, locations: Iterable[str | Path], run: str | Path):
        super().__init__(locations)
        self.run = run

    def __getitem__(self, index: Any) -> Any:
        try:
            return super().__getitem__(index)
        except IndexError:
            raise NoCheckpointYet(
                f"run {str(self.run)!r} has {len(self)} complete checkpoint(s), so checkpoints[{index}] does not exist "
                "yet: a run saves one every grpo.checkpoint_every steps and at its end; wait for it with job.wait(), "
                "or look again later"
            ) from None


class RunFolder:
    """One run's folder, local or on storage (module docstring)."""

    def __init__(self, location: str | Path):
        self.path: str | Path = location if is_uri(location) else Path(location)
        """the run's folder: a local Path, or its URI (a str)"""
        self.store = Storage.at(self.path)

    @property
    def remote(self) -> bool:
        return is_uri(self.path)

    def local_file(self, name: str) -> Path:
        """The local path of `name` (a local run folder only: the trainer writes through it)."""
        if self.remote:
            raise StorageError(f"{self.path} is on storage: train in a local folder and upload it (train/run_storage.py)")
        return Path(self.path) / name

    def _lines(self, key: str) -> Iterator[tuple[str, Any]]:
        """(where, record) for each JSON line of `key`, streamed; an over-long line is skipped."""
        try:
            with self.store.open(key) as file:
                for number, line in bounded_lines(file, MAX_LINE_BYTES):
                    if line is not None and line.strip():
                        where = f"{self.store.uri(key)}:{number}"
                        yield where, line
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return

    def metrics(self) -> list[dict[str, Any]]:
        rows = []
        for where, line in self._lines(METRICS_FILE):
            try:
                row = parse_json(line, where)
            except DatasetError:
                continue
            if isinstance(row, dict):
                rows.append(row)
        return rows

    def trajectory_steps(self) -> list[int]:
        """Steps whose trajectories were saved, oldest first."""
        steps = (parse_step(name.removesuffix(".jsonl")) for name in self.store.list(TRAJECTORIES) if name.endswith(".jsonl"))
        return sorted(step for step in steps if step is not None)

    def trajectory_records(self, k: int, at_or_before: int | None = None) -> list[dict[str, Any]]:
        """The last `k` trajectories saved (of steps up to `at_or_before`), newest step last, as JSON
        records. Files are streamed, keeping `k` records at most; a line that is not JSON is a
        DatasetError naming the file and line."""
        if k <= 0:
            return []
        records: collections.deque[dict[str, Any]] = collections.deque()
        steps = [s for s in self.trajectory_steps() if at_or_before is None or s <= at_or_before]
        for step in reversed(steps):
            newest_of_step: collections.deque[dict[str, Any]] = collections.deque(maxlen=k - len(records))
            for where, line in self._lines(trajectory_file(step)):
                record = parse_json(line, where)
                if not isinstance(record, dict):
                    raise DatasetError(f"{where}: a trajectory is a JSON object, not {type(record).__name__}")
                newest_of_step.append(record)
            records.extendleft(reversed(newest_of_step))
            if len(records) >= k:
                break
        return list(records)

    def load_trajectories(self, step: int) -> list[Trajectory]:
        """Step `step`'s saved trajectories, each line checked as a Trajectory (types.py), streamed."""
        key = trajectory_file(step)
        with self.store.open(key) as file:
            return parse_trajectories(bounded_lines(file, MAX_LINE_BYTES), str(self.store.uri(key)))

    def write_trajectories(self, step: int, trajectories: Iterable[Trajectory]) -> None:
        """Save step `step`'s trajectories whole (storage.py's atomic write: never through a link)."""
        lines = (json.dumps(traj.to_dict(), ensure_ascii=False) + "\n" for traj in trajectories)
        self.store.write_text(trajectory_file(step), "".join(lines))

    def logs(self, tail_chars: int = 20_000) -> str:
        return self.store.tail(LOG_FILE, tail_chars).decode("utf-8", errors="replace")

    def checkpoints(self) -> Checkpoints:
        """Complete checkpoints, oldest first: local folders, or URIs for a run on storage."""
        if not self.remote:
            if self.store.exists(CHECKPOINTS) and not self.store.isdir(CHECKPOINTS):
                raise StorageError(f"{self.store.uri(CHECKPOINTS)} is not a folder (a link?); refused")
            return Checkpoints((checkpoint.path for checkpoint in list_checkpoints(self.path)), self.path)
        return Checkpoints((self.store.uri(f"{CHECKPOINTS}/{name}") for _, name in self.stored_checkpoints()), self.path)

    def stored_checkpoints(self) -> list[tuple[int, str]]:
        """(step, folder name) of each complete checkpoint in the store, oldest first."""
        return sorted(
            (step, name)
            for name in self.store.list(CHECKPOINTS)
            if (step := parse_step(name)) is not None and self.store.exists(f"{CHECKPOINTS}/{name}/{TRAINER_STATE}")
        )

    def holds_run(self) -> bool:
        """Whether a run was already written here (metrics or a checkpoint folder, complete or not)."""
        return self.store.exists(METRICS_FILE) or any(parse_step(name) is not None for name in self.store.list(CHECKPOINTS))

    def exists(self) -> bool:
        return self.store.exists("")

    def status(self) -> dict[str, Any]:
        """The state last written to job.json ({"state": "unknown"} before any was; with "error"
        naming the file when it cannot be read: not JSON, nested too deep, too large, a FIFO)."""
        try:
            text = self.store.read_bytes(JOB_FILE, MAX_STATUS_BYTES)
            if text is None:
                return {"state": "unknown"}
            status = parse_json(text, str(self.store.uri(JOB_FILE)))
        except (DatasetError, StorageError) as error:
            return {"state": "unknown", "error": str(error)}
        except OSError as error:
            return {"state": "unknown", "error": f"{self.store.uri(JOB_FILE)}: {error}"}
        if not isinstance(status, dict):
            return {"state": "unknown", "error": f"{self.store.uri(JOB_FILE)}: not a JSON object"}
        return {"state": "unknown", **status}  # a job.json without a state (`{}`) reads as not yet known

    def write_status(self, **fields: Any) -> dict[str, Any]:
        """Merge `fields` into job.json atomically (readers never see half a file)."""
        status = {**self.status(), **fields, "updated": time.time()}
        if "error" not in fields and str(status.get("error", "")).startswith(str(self.store.uri(JOB_FILE))):
            status.pop("error")  # the old file's read error, not the run's
        self.store.write_text(JOB_FILE, json.dumps(status, default=str))
        return status
