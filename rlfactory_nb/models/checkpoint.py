"""Checkpoints a run can resume from, and that load anywhere a Hugging Face model loads.

Layout under `runs/<name>/checkpoints/`:

    step_000020/            model (safetensors, the float32 master) + config + tokenizer and chat
                            template: a Hugging Face folder, so `Policy.load(path)`, `from_pretrained(path)`
                            and vLLM open it. A LoRA run writes a peft adapter folder instead
                            (adapter_config.json names the base); `Policy.load` merges it and
                            `rlfactory-nb export` writes the merged folder.
        trainer_state.pt    step, optimizer state, RNG states (python, numpy, torch)
        run_config.yaml     the run config that produced it
        run_config.sig.json its signature with this user's key (signing.py): a run is built
                            from a folder's config only when it checks out (`job.stepper()`)
        digests.json        the SHA-256 of every other file, checked before anything is loaded;
                            a file it does not list is refused (it could be an added adapter);
                            run_config.sig.json is not listed (`trust_run_folder` may re-sign it)
    latest                  the name of the newest complete checkpoint, written last

Checkpoints are shared like models, so reading one runs no code from it: the trainer state is loaded
with `torch.load(weights_only=True)` (tensors and plain containers only; numpy's RNG state is allowed
by name), weights come from safetensors, and a file whose bytes changed (a flipped bit, a truncated
copy) fails its digest with a `CheckpointError` naming it.

Why this order: a checkpoint is written into a temporary folder, every file is fsynced, and only then
is the folder renamed to `step_XXXXXX` and `latest` replaced (itself via a temporary file and an atomic
rename). A crash at any point leaves `latest` naming a complete checkpoint: either the previous one or
the new one, never a half-written folder. A folder that was renamed but never made `latest` is ignored
and overwritten when its step is saved again. Temporary folders (`.tmp-*`) left by a writer that was
killed are swept at the next save: a run has one writer at a time. Temporary names are random and
created exclusively, so a link planted in a shared folder cannot redirect or block a save.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy._core.multiarray import _reconstruct  # how numpy arrays unpickle (numpy >= 2)

from rlfactory_nb.errors import CheckpointError
from rlfactory_nb.local_files import read_regular, write_atomic
from rlfactory_nb.reasoning_mode import record_mode, thinking_mode
from rlfactory_nb.signing import CONFIG_SIGNATURE_FILE, config_signature

CHECKPOINTS = "checkpoints"
LATEST = "latest"
TRAINER_STATE = "trainer_state.pt"
RUN_CONFIG = "run_config.yaml"
DIGESTS = "digests.json"
ADAPTER_CONFIG = "adapter_config.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_NEARLY_FULL_BYTES = 1 << 20
"""a write that failed with less free space than this failed because the disk is full"""


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint on disk."""

    path: Path
    step: int

    def trainer_state(self) -> dict[str, Any]:
        """step, optimizer state and RNG states (see `save_checkpoint`), after checking every digest."""
        verify_digests(self.path)
        file = self.path / TRAINER_STATE
        try:
            with torch.serialization.safe_globals(_NUMPY_RNG_GLOBALS):
                state = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as error:  # truncated, empty, random or code-carrying files alike
            raise CheckpointError(
                f"cannot read {file}: {type(error).__name__}: {str(error)[:300]}. It is damaged or not a "
                "trainer state written by rlfactory-nb (which holds only tensors and plain values); "
                "resume from an earlier checkpoint instead"
            ) from error
        if not isinstance(state, dict) or not {"step", "optimizer", "rng"} <= state.keys():
            raise CheckpointError(f"{file} is not a trainer state: it lacks step, optimizer or rng")
        return state

    @property
    def is_adapter(self) -> bool:
        """True for a LoRA run's checkpoint (an adapter folder)."""
        return (self.path / ADAPTER_CONFIG).is_file()


_NUMPY_RNG_GLOBALS = [np.ndarray, np.dtype, _reconstruct, type(np.dtype(np.uint32))]
"""what numpy's RNG state (a uint32 array) unpickles through; none of them runs code"""


def check_kind(checkpoint: Checkpoint, lora: bool) -> None:
    """Refuse to resume a LoRA run from a full checkpoint, or the reverse, saying which is which."""
    if checkpoint.is_adapter == lora:
        return
    found = "LoRA adapters" if checkpoint.is_adapter else "full fine-tuning weights"
    wanted = "model.lora is set" if lora else "model.lora is null (full fine-tuning)"
    raise CheckpointError(
        f"cannot resume: {checkpoint.path} holds {found} but the run config says {wanted}. Resume with "
        "the model.lora setting the run was started with, or start a new run (another name=)"
    )


def write_digests(folder: Path) -> None:
    digests = {file.name: _sha256(file) for file in sorted(folder.iterdir()) if file.is_file()}
    (folder / DIGESTS).write_text(json.dumps(digests, indent=1) + "\n", encoding="utf-8")


def verify_digests(folder: str | Path) -> None:
    """Check every file `digests.json` lists, and refuse what it does not list: a file added to a
    checkpoint (say an adapter config with its weights) would change what loads while every listed
    digest still matched. A folder without digests.json is not a checkpoint (or one written before
    digests existed): nothing is checked."""
    folder = Path(folder)
    listing = folder / DIGESTS
    if not listing.is_file():
        return
    try:
        digests = json.loads(listing.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {listing}: {error}") from error
    for name, expected in digests.items():
        file = folder / Path(name).name  # names only: a listing cannot point outside its folder
        if not file.is_file():
            raise CheckpointError(f"{file} is missing from the checkpoint ({listing} lists it)")
        if _sha256(file) != expected:
            raise CheckpointError(
                f"{file} does not match its digest in {listing}: the file changed after it was "
                "written (corrupted or tampered with); resume from an earlier checkpoint"
            )
    listed = {Path(name).name for name in digests} | {DIGESTS, CONFIG_SIGNATURE_FILE}
    unlisted = sorted(entry.name for entry in folder.iterdir() if entry.name not in listed)
    if unlisted:
        raise CheckpointError(
            f"{folder} holds {', '.join(map(repr, unlisted))}, which {listing} does not list: files added "
            "to a checkpoint after it was written could change what loads (other weights, an adapter). "
            "Delete them if you added them yourself; otherwise do not load this folder"
        )


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def step_name(step: int) -> str:
    return f"step_{step:06d}"


def parse_step(name: str) -> int | None:
    """The step a checkpoint folder's name holds, or None for any other name.

    >>> parse_step("step_000012"), parse_step(".tmp-step_000012-99"), parse_step("latest")
    (12, None, None)
    """
    match = _STEP_DIR.match(name)
    return int(match.group(1)) if match else None


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
    if root.is_symlink():  # a link planted in a shared run folder would take the weights elsewhere
        raise CheckpointError(f"{root} is a symbolic link; checkpoints are written only inside the run folder")
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_name(step)
    _sweep_leftovers(root)
    temporary = _new_folder(root, f".tmp-{step_name(step)}-")
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
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    state = {"format": 1, "step": step, "optimizer": optimizer_state, "rng": rng_state()}
    torch.save(state, folder / TRAINER_STATE)
    if config is not None:
        text = config.to_yaml(folder / RUN_CONFIG)
        record_mode(folder, thinking_mode(config))
    write_digests(folder)
    if config is not None:  # unlisted: loading the checkpoint as a model never reads it
        (folder / CONFIG_SIGNATURE_FILE).write_text(config_signature(text), encoding="utf-8")
    for file in folder.rglob("*"):
        if file.is_file():
            _fsync_file(file)
    _fsync_dir(folder)


def _new_folder(root: Path, prefix: str) -> Path:
    """A new folder named `prefix` + random hex: `mkdir` fails on anything already there (a link
    planted under a predictable name cannot redirect the save)."""
    while True:
        folder = root / f"{prefix}{secrets.token_hex(8)}"
        with contextlib.suppress(FileExistsError):
            folder.mkdir()
            return folder


def _sweep_leftovers(root: Path) -> None:
    """Delete what an earlier writer left when it was killed mid-save (never a complete checkpoint);
    a link under such a name is removed itself, never followed."""
    for leftover in [*root.glob(".tmp-*"), *root.glob(f".{LATEST}.tmp-*")]:
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


def _replace_folder(temporary: Path, final: Path) -> None:
    """Rename `temporary` to `final`; a stale `final` (renamed but never made latest) is replaced."""
    if final.exists():
        stale = final.with_name(f".tmp-stale-{final.name}-{secrets.token_hex(8)}")  # swept if left
        final.rename(stale)
        temporary.rename(final)
        shutil.rmtree(stale, ignore_errors=True)
    else:
        temporary.rename(final)
    _fsync_dir(final.parent)


def _write_pointer(root: Path, name: str) -> None:
    def write(file: Any) -> None:
        file.write((name + "\n").encode("utf-8"))
        file.flush()
        os.fsync(file.fileno())

    write_atomic(root / LATEST, write)  # O_EXCL under a random name (storage.py)
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
    name = read_regular(pointer, 4096).decode("utf-8", errors="replace").strip()  # never a FIFO
    match = _STEP_DIR.match(name)
    path = root / name
    if path.is_symlink() or root.is_symlink():
        raise CheckpointError(f"{path} is a symbolic link; a checkpoint is read only from inside its run folder")
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
        if match and not path.is_symlink() and (path / TRAINER_STATE).exists():  # links lead elsewhere
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
