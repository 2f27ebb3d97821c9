"""Checkpoints a run can resume from, and that load anywhere a Hugging Face model loads.

Layout under `runs/<name>/checkpoints/`:

    step_000020/            model (safetensors) + config + tokenizer and chat template: a Hugging Face
                            folder, so `Policy.load(path)`, `from_pretrained(path)` and vLLM open it
        trainer_state.pt    step, optimizer state, RNG states (python, numpy, torch)
        run_config.yaml     the run config that produced it
    latest                  the name of the newest complete checkpoint, written last

Why this order: a checkpoint is written into a temporary folder, every file is fsynced, and only then
is the folder renamed to `step_XXXXXX` and `latest` replaced (itself via a temporary file and an atomic
rename). A crash at any point leaves `latest` naming a complete checkpoint: either the previous one or
the new one, never a half-written folder. A folder that was renamed but never made `latest` is ignored
and overwritten when its step is saved again. Temporary folders (`.tmp-*`) left by a writer that was
killed are swept at the next save: a run has one writer at a time.
"""

from __future__ import annotations

import errno
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINTS = "checkpoints"
LATEST = "latest"
TRAINER_STATE = "trainer_state.pt"
RUN_CONFIG = "run_config.yaml"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_NEARLY_FULL_BYTES = 1 << 20
"""a write that failed with less free space than this failed because the disk is full"""


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message says which and what to do."""


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint on disk."""

    path: Path
    step: int

    def trainer_state(self) -> dict[str, Any]:
        """step, optimizer state and RNG states (see `save_checkpoint`)."""
        try:
            return torch.load(self.path / TRAINER_STATE, map_location="cpu", weights_only=False)
        except (OSError, RuntimeError) as error:
            raise CheckpointError(f"cannot read {self.path / TRAINER_STATE}: {error}") from error


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def step_name(step: int) -> str:
    return f"step_{step:06d}"


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: torch.nn.Module,
    tokenizer: Any,
    optimizer_state: dict[str, Any],
    config: Any = None,
    keep_last: int | None = None,
) -> Checkpoint:
    """Write the checkpoint of `step` atomically (module docstring), then keep the `keep_last` newest."""
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_name(step)
    temporary = root / f".tmp-{step_name(step)}-{os.getpid()}"
    _sweep_leftovers(root)
    try:
        _write_folder(temporary, step, model, tokenizer, optimizer_state, config)
        _replace_folder(temporary, final)
        _write_pointer(root, final.name)
    except Exception as error:
        full = _disk_full(error, root)  # before the cleanup frees the space again
        shutil.rmtree(temporary, ignore_errors=True)
        if full or isinstance(error, OSError):
            raise _write_error(error, final, load_latest(run_dir), full) from error
        raise
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    if keep_last:
        prune(run_dir, keep_last)
    return Checkpoint(final, step)


def _write_folder(
    folder: Path,
    step: int,
    model: torch.nn.Module,
    tokenizer: Any,
    optimizer_state: dict[str, Any],
    config: Any,
) -> None:
    folder.mkdir(parents=True)
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    state = {"format": 1, "step": step, "optimizer": optimizer_state, "rng": rng_state()}
    torch.save(state, folder / TRAINER_STATE)
    if config is not None:
        config.to_yaml(folder / RUN_CONFIG)
    for file in folder.rglob("*"):
        if file.is_file():
            _fsync_file(file)
    _fsync_dir(folder)


def _sweep_leftovers(root: Path) -> None:
    """Delete what an earlier writer left when it was killed mid-save (never a complete checkpoint)."""
    for leftover in root.glob(".tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    for leftover in root.glob(f".{LATEST}.tmp-*"):
        leftover.unlink(missing_ok=True)


def _replace_folder(temporary: Path, final: Path) -> None:
    """Rename `temporary` to `final`; a stale `final` (renamed but never made latest) is replaced."""
    if final.exists():
        stale = final.with_name(f".stale-{final.name}-{os.getpid()}")
        final.rename(stale)
        temporary.rename(final)
        shutil.rmtree(stale, ignore_errors=True)
    else:
        temporary.rename(final)
    _fsync_dir(final.parent)


def _write_pointer(root: Path, name: str) -> None:
    temporary = root / f".{LATEST}.tmp-{os.getpid()}"
    temporary.write_text(name + "\n", encoding="utf-8")
    _fsync_file(temporary)
    os.replace(temporary, root / LATEST)
    _fsync_dir(root)


def _disk_full(error: BaseException, root: Path) -> bool:
    """Whether `error` comes from a full disk. torch.save reports one as a bare C++ stream error
    ("basic_ios::clear: iostream error"), so the free space is checked too, not just the errno."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__ or seen.__context__
    try:
        return shutil.disk_usage(root).free < _NEARLY_FULL_BYTES
    except OSError:
        return False


def _write_error(
    error: BaseException, target: Path, previous: Checkpoint | None, full: bool
) -> CheckpointError:
    kept = (
        f"the previous checkpoint {previous.path} is intact" if previous else "no earlier checkpoint exists"
    )
    if full:
        return CheckpointError(
            f"disk full while writing checkpoint {target}: free space on that disk, lower "
            f"grpo.keep_last, or set output_dir elsewhere; {kept}"
        )
    return CheckpointError(f"could not write checkpoint {target} ({error}); {kept}")


def load_latest(run_dir: str | Path) -> Checkpoint | None:
    """The checkpoint `latest` names, or None when the run has none yet."""
    root = checkpoint_dir(run_dir)
    pointer = root / LATEST
    if not pointer.exists():
        return None
    name = pointer.read_text(encoding="utf-8").strip()
    match = _STEP_DIR.match(name)
    path = root / name
    if not match or not (path / TRAINER_STATE).exists():
        raise CheckpointError(
            f"{pointer} names {name!r}, which is not a complete checkpoint; delete {pointer} to start "
            "over, or point it at one of the step_* folders"
        )
    return Checkpoint(path, int(match.group(1)))


def list_checkpoints(run_dir: str | Path) -> list[Checkpoint]:
    """Complete checkpoints (with trainer state), oldest first."""
    root = checkpoint_dir(run_dir)
    found = []
    for path in root.glob("step_*") if root.exists() else []:
        match = _STEP_DIR.match(path.name)
        if match and (path / TRAINER_STATE).exists():
            found.append(Checkpoint(path, int(match.group(1))))
    return sorted(found, key=lambda checkpoint: checkpoint.step)


def prune(run_dir: str | Path, keep_last: int) -> None:
    """Delete all but the `keep_last` newest checkpoints; the one `latest` names is always kept."""
    latest = load_latest(run_dir)
    for checkpoint in list_checkpoints(run_dir)[:-keep_last]:
        if latest is None or checkpoint.path != latest.path:
            shutil.rmtree(checkpoint.path, ignore_errors=True)


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_file(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
