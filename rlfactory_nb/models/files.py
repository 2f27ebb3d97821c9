"""Which folder a model name means on this node, and a digest of its files.

A job must train the model the kernel inspected. The kernel and the training driver each resolve the
run's `model.name` on their own node (an embedded preset, a local folder, a LoRA checkpoint or a hub
id), so `launch` sends the kernel's digest along and the driver compares it with the digest of the
folder it resolved, before step 1 (cluster/driver.py). The digest covers the weights (with the model
config) and the tokenizer (with its chat template) apart, so a mismatch says which half differs.

Nodes of a cluster never build a preset (`rlfactory_nb.models.node`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from rlfactory_nb.models.node import NO_PRESET_BUILD, ModelFilesError, node_name
from rlfactory_nb.node_cache import local_copy
from rlfactory_nb.storage import is_uri

__all__ = [
    "NO_PRESET_BUILD", "ModelDigest", "ModelFilesError", "local_model_digest", "model_digest", "model_folder", "node_name",
]

WEIGHT_FILES = ("config.json", "adapter_config.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin")
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json",
)


@dataclass(frozen=True)
class ModelDigest:
    """SHA-256 over a model folder's files, by name: the weights half and the tokenizer half."""

    weights: str
    """the model config and every weight file (`*.safetensors`, `*.bin`; an adapter's too)"""
    tokenizer: str
    """the tokenizer files and the chat template"""

    def differs_from(self, other: ModelDigest) -> list[str]:
        """The halves that differ ("weights", "tokenizer"), empty when the two are the same model."""
        return [half for half in ("weights", "tokenizer") if getattr(self, half) != getattr(other, half)]

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> ModelDigest:
        return cls(weights=data["weights"], tokenizer=data["tokenizer"])

    def __str__(self) -> str:
        return f"weights {self.weights[:12]}, tokenizer {self.tokenizer[:12]}"


def model_folder(name: str | Path, log: Callable[[str], None] = print, check_hub: bool = True) -> Path | str:
    """The folder `name` means here: a preset's (shipped, else cached, else built unless this node
    forbids it), a local folder as given, or a hub id unchanged (str); `check_hub`: refuse at once a
    hub id this node can neither find in its cache nor download."""
    from rlfactory_nb.models import presets  # here: presets import torch and transformers

    text = str(name)
    if text in presets.PRESETS:
        return presets.preset_path(text, log=log)
    if is_uri(text):  # a checkpoint or model on storage (a run's output_dir): fetched into the node's cache (node_cache.local_copy)
        return _checked_folder(local_copy(text, log=log))
    path = Path(text).expanduser()
    if path.exists() or path.is_absolute() or text.startswith((".", "~")) or _looks_like_a_path(text):
        return _checked_folder(path)
    if check_hub:
        _check_hub_reachable(text)
    return text  # a hub id


def _looks_like_a_path(text: str) -> bool:
    """A hub id is `owner/name`; more parts, or a checkpoint's folder name, mean a local path."""
    return text.count("/") > 1 or Path(text).name.startswith("step_")


def _check_hub_reachable(repo_id: str) -> None:
    """Refuse a hub id at once when it is not cached and the hub cannot be reached (HF offline mode
    set, or no network): huggingface_hub would otherwise retry for about a minute and fail with
    three chained tracebacks."""
    import os

    if _hub_cache_folder(repo_id) is not None:
        return
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    why = "HF_HUB_OFFLINE is set" if offline else None if _hub_reachable() else "no network reaches the Hugging Face hub"
    if why is not None:
        from rlfactory_nb.models import presets  # here: presets import torch and transformers

        raise ModelFilesError(
            f"model {repo_id!r} is not a preset, a local folder or in the Hugging Face cache, and {why}: download it "
            f"where there is a network (`hf download {repo_id}`), or name a local folder or a preset "
            f"({', '.join(presets.PRESETS)})"
        )


@functools.cache
def _hub_reachable() -> bool:
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=3).close()
    except OSError:
        return False
    return True


def _checked_folder(path: Path) -> Path:
    if not path.exists() and not path.parent.is_dir():
        raise ModelFilesError(f"no model or checkpoint folder {path}, and no folder {path.parent} on node {node_name()}: check the path")
    if not path.is_dir():
        near = sorted(entry.name for entry in path.parent.iterdir() if entry.is_dir() and not entry.name.startswith("."))
        there = f" ({path.parent} holds {', '.join(near[-6:])})" if near else ""
        raise ModelFilesError(
            f"no model or checkpoint folder {path} on node {node_name()}{there}: check the path; on a cluster, put it "
            "on storage every node mounts"
        )
    if not any(file.suffix in WEIGHT_SUFFIXES for file in path.iterdir()):
        raise ModelFilesError(
            f"model folder {path} on node {node_name()} holds no weight file (*.safetensors or *.bin): a "
            "partial copy? Copy the whole folder"
        )
    return path


def local_model_digest(name: str | Path) -> ModelDigest | None:
    """The digest of what `name` means on this node, or None for a hub id not in the local cache
    (nothing here to compare; the driver downloads it)."""
    folder = model_folder(name, log=lambda _: None, check_hub=False)  # the driver's node may have a network
    if isinstance(folder, str):
        folder = _hub_cache_folder(folder)
        if folder is None:
            return None
    return model_digest(folder)


def model_digest(folder: str | Path) -> ModelDigest:
    """See ModelDigest. Reads every weight byte once per (folder, sizes, modification times): about
    1 GB/s, so a 16 GB model costs ~16 s on the first call of a process."""
    folder = Path(folder)
    files = sorted(file for file in folder.iterdir() if file.is_file())
    stamp = tuple((file.name, file.stat().st_size, file.stat().st_mtime_ns) for file in files)
    return _digest(folder.resolve(), stamp)


@functools.cache
def _digest(folder: Path, stamp: tuple[tuple[str, int, int], ...]) -> ModelDigest:
    names = [name for name, _, _ in stamp]
    weights = [name for name in names if name in WEIGHT_FILES or name.endswith(WEIGHT_SUFFIXES)]
    tokenizer = [name for name in names if name in TOKENIZER_FILES]
    if not any(name.endswith(WEIGHT_SUFFIXES) for name in weights):
        raise ModelFilesError(f"{folder} on node {node_name()} holds no weight file (*.safetensors or *.bin)")
    return ModelDigest(weights=_files_digest(folder, weights), tokenizer=_files_digest(folder, tokenizer))


def _files_digest(folder: Path, names: list[str]) -> str:
    total = hashlib.sha256()
    for name in names:
        with (folder / name).open("rb") as handle:
            total.update(f"{name}\0{hashlib.file_digest(handle, 'sha256').hexdigest()}\n".encode())
    return total.hexdigest()


def _hub_cache_folder(repo_id: str) -> Path | None:
    """The locally cached snapshot of a hub model, without any network access."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001  (not cached, or not a valid id: nothing local to digest)
        return None
