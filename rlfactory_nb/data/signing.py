"""The signature that lets a run folder's pickled objects be loaded: an HMAC-SHA256 of objects.pkl,
keyed by a secret kept outside every run folder (`key_file()`), recorded in objects.sig.json with the
names the config gave the reward and tools file when they were saved (objects.py says why).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from rlfactory_nb.errors import UntrustedRunObjects

PICKLE_FILE = "objects.pkl"
SIGNATURE_FILE = "objects.sig.json"


def key_file() -> Path:
    """Where this user's signing key lives: `$RLFACTORY_NB_KEY_FILE`, else
    `$XDG_CONFIG_HOME/rlfactory_nb/run_objects.key` (default ~/.config): outside every run folder."""
    explicit = os.environ.get("RLFACTORY_NB_KEY_FILE")
    if explicit:
        return Path(explicit)
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config_home / "rlfactory_nb" / "run_objects.key"


def _key() -> bytes:
    """This user's key, made on first use: 32 random bytes, in a file only its owner can read."""
    path = key_file()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # written whole under a temporary name, then linked into place: a process that finds the key
        # never reads half of it, and one that loses the race uses the winner's
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
        temporary.unlink()
    key = path.read_text(encoding="utf-8").strip()
    if not key:
        raise UntrustedRunObjects(f"{path} (the run objects signing key) is empty: delete it to make a new one")
    return key.encode()


def _digest(data: bytes, named: dict[str, Any] | None) -> str:
    names = json.dumps(named, sort_keys=True, default=str).encode()
    return hmac.new(_key(), names + b"\0" + data, hashlib.sha256).hexdigest()


def write_signature(folder: Path, data: bytes, named: dict[str, Any] | None) -> Path:
    path = folder / SIGNATURE_FILE
    record = {"hmac_sha256": _digest(data, named), "named_by_config": named}
    path.write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    return path


def read_signature(folder: Path) -> dict[str, Any]:
    try:
        record = json.loads((folder / SIGNATURE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def check_signature(folder: Path, data: bytes) -> None:
    record = read_signature(folder)
    if not record:
        why = f"it has no readable signature ({folder / SIGNATURE_FILE} is missing or damaged)"
    elif not hmac.compare_digest(str(record.get("hmac_sha256")), _digest(data, record.get("named_by_config"))):
        why = f"its signature does not match this user's key ({key_file()}): another user or machine wrote it, or it changed since"
    else:
        return
    raise UntrustedRunObjects(
        f"refusing to load {folder / PICKLE_FILE}: {why}. Unpickling it would run the code it holds as you. "
        f"If you trust who wrote this run folder, read {folder / 'reward.py'} (and tools.py), then pass "
        "trust_run_objects=True (train, launch, evaluate, job.stepper) or sign the folder once with "
        "rlfactory_nb.data.objects.trust_run_folder(run_dir); or delete objects.pkl to resume with what the "
        "config names"
    )
