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
                                                            URI itself (cluster/driver.py)

`pull` is the other direction, for a resume on any node: what the trainer reads back (metrics,
code/, the latest checkpoint and its pointer, job.log to append to), never older checkpoints. A
`latest` naming a checkpoint that is not complete (its trainer_state.pt missing) falls back to the
newest complete one; a stored run with checkpoint folders but none complete is not resumed over.
A run is never started over a stored one unless `replace=True` (then the stored run is deleted).

Nothing is followed while copying (storage.py): a link or FIFO in the stored run or in the local
folder is refused, naming it. The local folder is a fresh private one (`staging_folder`), removed
once everything in it is on storage (`RunUpload.discard`).
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlfactory_nb._async import maybe_await
from rlfactory_nb.config import RunConfig
from rlfactory_nb.errors import RunExistsError
from rlfactory_nb.models.checkpoint import LATEST, TRAINER_STATE, parse_step
from rlfactory_nb.storage import Storage, is_uri
from rlfactory_nb.train.run_folder import (
    CHECKPOINTS,
    JOB_FILE,
    TENSORBOARD,
    TRAJECTORIES,
    RunFolder,
)

SKIPPED = frozenset({JOB_FILE})
"""top-level files the uploader leaves alone (written to the URI by their owner)"""
NOT_PULLED = frozenset({CHECKPOINTS, TRAJECTORIES, TENSORBOARD})
"""what a resume does not need back (older checkpoints, past rollouts, event files)"""


def staging_folder(name: str) -> Path:
    """A fresh private local folder on this node (mode 0700) to train the run `name` in."""
    return Path(tempfile.mkdtemp(prefix=f"rlfactory-nb-{name}-"))


class RunUpload:
    """Copies a local run folder to its URI (module docstring)."""

    def __init__(self, local: str | Path, store: Storage, keep_last: int | None = None, staging: Path | None = None):
        self.local = Path(local)
        self.store = store
        self.keep_last = keep_last
        self.staging = staging
        """the private folder made for `local` (`staged`), which `discard` deletes; None: keep `local`"""
        self._sent: dict[str, tuple[int, int]] = {}

    @classmethod
    def staged(cls, name: str, store: Storage, keep_last: int | None = None) -> RunUpload:
        """An upload of the run `name` from a fresh private folder on this node (`staging_folder`)."""
        staging = staging_folder(name)
        return cls(staging / name, store, keep_last, staging=staging)

    def pull(self) -> int | None:
        """Fetch what a resume reads into the local folder; returns the step of the checkpoint it
        resumes from (None when the run has none yet). A `latest` that names an incomplete checkpoint
        falls back to the newest complete one; checkpoint folders without any complete one are a
        RunExistsError (resuming would start the stored run over)."""
        self.local.mkdir(parents=True, exist_ok=True)
        for name in self.store.list(""):
            if name in NOT_PULLED or name in SKIPPED or name.startswith("."):
                continue
            target = self.local / name
            if self.store.isdir(name):
                self.store.get_folder(name, target)
            else:
                self.store.get_file(name, target)
        name = self._resume_checkpoint()
        if name is None:
            return None
        self.store.get_folder(f"{CHECKPOINTS}/{name}", self.local / CHECKPOINTS / name)
        (self.local / CHECKPOINTS / LATEST).write_text(name + "\n", encoding="utf-8")
        self._sent = {**self._stamps(), f"{CHECKPOINTS}/{name}": (0, 0)}  # all of it is there already
        return parse_step(name)

    def _resume_checkpoint(self) -> str | None:
        """The stored checkpoint a resume starts from: the one `latest` names when complete, else the
        newest complete one (as the trainer's own folder keeps it); None when no checkpoint folder exists."""
        complete = [name for _, name in RunFolder(str(self.store.location)).stored_checkpoints()]
        latest = (self.store.read_text(f"{CHECKPOINTS}/{LATEST}", 1024) or "").strip()
        if latest in complete:
            return latest
        if complete:
            return complete[-1]
        if any(parse_step(name) is not None for name in self.store.list(CHECKPOINTS)):
            raise RunExistsError(
                f"{self.store.location} holds checkpoint folders but none is complete ({TRAINER_STATE} is "
                "missing): resuming would start the stored run over. Start over with replace=True, or "
                "copy a complete checkpoint there"
            )
        return None

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

    def stored(self, local: str | Path) -> str | Path:
        """Where the local file or folder `local` (inside the local folder) is on storage."""
        return self.store.uri(Path(local).relative_to(self.local).as_posix())

    def discard(self) -> None:
        """Delete the staging folder (`staged`), once everything in it is on storage."""
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)

    def _stamps(self) -> dict[str, tuple[int, int]]:
        """(size, mtime) of every regular file outside checkpoints/, by relative path (links and
        FIFOs are never regular: `put_file` would refuse them)."""
        stamps = {}
        for path in sorted(self.local.rglob("*")):
            relative = path.relative_to(self.local)
            top = relative.parts[0]
            status = path.lstat()
            if (
                not stat.S_ISREG(status.st_mode)
                or top == CHECKPOINTS
                or top in SKIPPED
                or any(p.startswith(".") for p in relative.parts)
            ):
                continue
            stamps[relative.as_posix()] = (status.st_size, status.st_mtime_ns)
        return stamps

    def _push_checkpoints(self) -> list[str]:
        root = self.local / CHECKPOINTS
        local = sorted(
            path.name
            for path in (root.iterdir() if root.is_dir() else [])
            if parse_step(path.name) is not None and not path.is_symlink() and (path / TRAINER_STATE).is_file()
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
            pointer = latest.read_text(encoding="utf-8").strip()  # the trainer's own file
            if sent or self.store.read_text(f"{CHECKPOINTS}/{LATEST}") is None:
                self.store.write_text(f"{CHECKPOINTS}/{LATEST}", pointer + "\n")
            self._prune(pointer)
        return sent

    def _prune(self, latest: str) -> None:
        """Keep the `keep_last` newest complete checkpoints on storage, as the trainer does locally;
        the one `latest` names always stays."""
        if not self.keep_last:
            return
        remote = RunFolder(str(self.store.location)).stored_checkpoints()  # complete ones only
        for _, name in remote[: -self.keep_last]:
            if name != latest:
                self.store.remove(f"{CHECKPOINTS}/{name}")
                self._sent.pop(f"{CHECKPOINTS}/{name}", None)


def upload_for(cfg: RunConfig, resume: bool, replace: bool = False) -> RunUpload | None:
    """For a run on storage (output_dir a URI): a local folder to train in, copied up after each
    step (module docstring), with what a resume needs fetched first. A stored run is never started
    over: without `resume` it is a RunExistsError unless `replace` (which deletes it first)."""
    if not is_uri(cfg.run_dir):
        return None
    folder = RunFolder(cfg.run_dir)
    folder.store.probe()
    if replace and folder.exists():
        folder.store.remove("")
    elif not resume and folder.holds_run():
        raise RunExistsError(
            f"{cfg.run_dir} already holds a run: pass resume=True (CLI: --resume) to continue it, "
            "replace=True to start over, or choose another name (name=...) or output_dir"
        )
    upload = RunUpload.staged(cfg.name, folder.store, keep_last=cfg.grpo.keep_last)
    if resume:
        try:
            upload.pull()
        except BaseException:
            upload.discard()
            raise
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
