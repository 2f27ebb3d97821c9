"""A run whose `output_dir` is a storage URI (storage.py): trained in a local folder, copied up.

The trainer writes where it always does, a local folder (metrics.jsonl appended each step,
checkpoints written beside and renamed, models/checkpoint.py); `RunUpload` copies what changed to
the run's URI after each step and at the end. Object stores cannot append or rename, and a local
folder keeps every guarantee the trainer relies on, so this costs one upload per step and no change
to what writes the files.

    metrics, trajectories, job.log, code/, the tool record   copied when their size or time changed
    checkpoints/step_N/                                     uploaded whole, trainer_state.pt last:
                                                            a reader takes a checkpoint as complete
                                                            only once that file is there
    checkpoints/latest                                      after the checkpoint it names
    job.json                                                not copied: the driver writes it to the
                                                            URI itself (cluster/run_folder.py)

`pull` is the other direction, for a resume on any node: what the trainer reads back (metrics,
code/, the latest checkpoint and its pointer, job.log to append to), never older checkpoints.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlfactory_nb._async import maybe_await
from rlfactory_nb.config import RunConfig
from rlfactory_nb.models.checkpoint import CHECKPOINTS, LATEST, TRAINER_STATE, parse_step
from rlfactory_nb.storage import Storage, is_uri

SKIPPED = frozenset({"job.json"})
"""top-level files the uploader leaves alone (written to the URI by their owner)"""
TOOL_RECORD = "tool_record.sqlite"
"""a run on storage keeps a copy of its tool record (the tools file's settings.cache_path) here"""


NOT_PULLED = frozenset({CHECKPOINTS, "trajectories", "tensorboard"})
"""what a resume does not need back (older checkpoints, past rollouts, event files)"""


def staging_folder(name: str) -> Path:
    """A fresh local folder on this node to train the run `name` in."""
    return Path(tempfile.mkdtemp(prefix=f"rlfactory-nb-{name}-"))


class RunUpload:
    """Copies a local run folder to its URI (module docstring)."""

    def __init__(self, local: str | Path, store: Storage, keep_last: int | None = None):
        self.local = Path(local)
        self.store = store
        self.keep_last = keep_last
        self._sent: dict[str, tuple[int, int]] = {}

    def pull(self) -> int | None:
        """Fetch what a resume reads into the local folder; returns the latest checkpoint's step
        (None when the run has none yet)."""
        self.local.mkdir(parents=True, exist_ok=True)
        for name in self.store.list(""):
            if name in NOT_PULLED or name in SKIPPED or name.startswith("."):
                continue
            target = self.local / name
            if self.store.isdir(name):
                self.store.get_folder(name, target)
            else:
                target.write_bytes(self.store.read_bytes(name) or b"")
        latest = (self.store.read_text(f"{CHECKPOINTS}/{LATEST}") or "").strip()
        step = parse_step(latest)
        if step is None or not self.store.exists(f"{CHECKPOINTS}/{latest}/{TRAINER_STATE}"):
            return None
        self.store.get_folder(f"{CHECKPOINTS}/{latest}", self.local / CHECKPOINTS / latest)
        (self.local / CHECKPOINTS / LATEST).write_text(latest + "\n", encoding="utf-8")
        self._sent = {**self._stamps(), f"{CHECKPOINTS}/{latest}": (0, 0)}  # all of it is there already
        return step

    def push(self) -> list[str]:
        """Upload what changed since the last push; returns the relative paths sent."""
        sent = []
        for relative, stamp in self._stamps().items():
            if self._sent.get(relative) != stamp:
                self.store.put_file(self.local / relative, relative)
                self._sent[relative] = stamp
                sent.append(relative)
        sent += self._push_checkpoints()
        return sent

    def _stamps(self) -> dict[str, tuple[int, int]]:
        """(size, mtime) of every file outside checkpoints/, by relative path."""
        stamps = {}
        for path in sorted(self.local.rglob("*")):
            relative = path.relative_to(self.local)
            top = relative.parts[0]
            if (
                not path.is_file()
                or top == CHECKPOINTS
                or top in SKIPPED
                or any(p.startswith(".") for p in relative.parts)
            ):
                continue
            stat = path.stat()
            stamps[relative.as_posix()] = (stat.st_size, stat.st_mtime_ns)
        return stamps

    def _push_checkpoints(self) -> list[str]:
        root = self.local / CHECKPOINTS
        local = sorted(
            path.name
            for path in (root.iterdir() if root.is_dir() else [])
            if parse_step(path.name) is not None and (path / TRAINER_STATE).is_file()
        )
        sent = []
        for name in local:
            key = f"{CHECKPOINTS}/{name}"
            if key not in self._sent:
                self.store.put_folder(root / name, key, last=(TRAINER_STATE,))
                self._sent[key] = (0, 0)
                sent.append(key)
        latest = root / LATEST
        if latest.is_file():
            pointer = latest.read_text(encoding="utf-8").strip()
            if sent or self.store.read_text(f"{CHECKPOINTS}/{LATEST}") is None:
                self.store.write_text(f"{CHECKPOINTS}/{LATEST}", pointer + "\n")
            self._prune(pointer)
        return sent

    def _prune(self, latest: str) -> None:
        """Keep the `keep_last` newest complete checkpoints on storage, as the trainer does locally;
        the one `latest` names always stays."""
        if not self.keep_last:
            return
        remote = sorted(
            (step, name) for name in self.store.list(CHECKPOINTS) if (step := parse_step(name)) is not None
        )
        for _, name in remote[: -self.keep_last]:
            if name != latest:
                self.store.remove(f"{CHECKPOINTS}/{name}")
                self._sent.pop(f"{CHECKPOINTS}/{name}", None)


def upload_for(cfg: RunConfig, resume: bool) -> RunUpload | None:
    """For a run on storage (output_dir a URI): a local folder to train in, copied up after each
    step (module docstring), with what a resume needs fetched first."""
    if not is_uri(cfg.run_dir):
        return None
    store = Storage.at(cfg.run_dir)
    store.probe()
    upload = RunUpload(staging_folder(cfg.name) / cfg.name, store, keep_last=cfg.grpo.keep_last)
    if resume:
        upload.pull()
    return upload


def after_upload(
    on_step: Callable[[dict[str, Any]], Any] | None, upload: RunUpload | None
) -> Callable[[dict[str, Any]], Any] | None:
    if upload is None:
        return on_step

    async def step_then_upload(row: dict[str, Any]) -> None:
        await asyncio.to_thread(upload.push)
        if on_step is not None:
            await maybe_await(on_step(row))

    return step_then_upload


def copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a live sqlite file (its WAL included) through sqlite's backup API."""
    reading = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    writing = sqlite3.connect(target)
    try:
        reading.backup(writing)
    finally:
        writing.close()
        reading.close()
