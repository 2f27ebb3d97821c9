"""The signatures that let a run folder's code be run: one rule, one key.

A run folder names code two ways: objects.pkl (pickled functions, an environment, an agent program)
and the run config each checkpoint keeps (run_config.yaml), whose `reward.function`,
`rollout.program`, `rollout.env`, `tools.config` (server commands), `grpo.loss` and the like name
files, modules and commands that a run built from it starts. Whoever can write the folder can write
both, so both are used only when they carry this user's signature: an HMAC-SHA256 keyed by a secret
kept outside every run folder (`key_file()`). objects.sig.json signs objects.pkl with the names the
config gave the reward and tools file when they were saved (objects.py says why);
run_config.sig.json, beside a checkpoint's run_config.yaml, signs that config's text;
`<file>.sig.json` signs a pickle saved elsewhere by the same hand (`RewardLab.save_reward`, which
notebooks keep under `runs/`). Anything else is refused with `UntrustedRunObjects` naming the key
file, unless the reader is told to trust it (`trust_run_objects=True`) or the folder was signed once
with `objects.trust_run_folder`.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlfactory_nb.errors import UntrustedRunObjects

PICKLE_FILE = "objects.pkl"
SIGNATURE_FILE = "objects.sig.json"
CONFIG_SIGNATURE_FILE = "run_config.sig.json"
_CONFIG_SIGNED = {"signs": "run_config.yaml"}
"""what a config's HMAC covers besides its text: a config's signature never passes for a pickle's"""
_FILE_SIGNED = {"signs": "a saved pickle"}


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
    why = _untrusted(record, data, record.get("named_by_config"), folder / SIGNATURE_FILE)
    if why:
        raise UntrustedRunObjects(
            f"refusing to load {folder / PICKLE_FILE}: {why}. Unpickling it would run the code it holds as you. "
            f"If you trust who wrote this run folder, read {folder / 'reward.py'} (and tools.py), then pass "
            "trust_run_objects=True (train, launch, evaluate, job.stepper) or sign the folder once with "
            "rlfactory_nb.data.objects.trust_run_folder(run_dir); or delete objects.pkl to resume with what the "
            "config names"
        )


def config_signature(text: str) -> str:
    """The text of run_config.sig.json for a run config written as `text` (YAML)."""
    return json.dumps({"hmac_sha256": _digest(text.encode(), _CONFIG_SIGNED)}) + "\n"


def check_config_signature(text: str, signature: str | None, where: str, names_code: Sequence[str]) -> None:
    """Refuse the run config `text` read from `where` unless `signature` (the text of its
    run_config.sig.json, None when missing) is this user's for it; `names_code`: what the config
    names that a run built from it would run, for the message."""
    why = _untrusted(_parsed(signature), text.encode(), _CONFIG_SIGNED, f"{CONFIG_SIGNATURE_FILE} beside it")
    if why:
        named = ", ".join(names_code) or "its reward, tools and environment"
        raise UntrustedRunObjects(
            f"refusing to build a run from {where}: {why}. A run built from it would run, as you, what it "
            f"names: {named}. If you trust who wrote this run folder, read those, then pass "
            "trust_run_objects=True (job.stepper, job.config) or sign the folder once with "
            "rlfactory_nb.data.objects.trust_run_folder(run_dir)"
        )


def sign_file(path: Path, data: bytes) -> Path:
    """Sign `data`, the bytes just saved at `path` (a pickle kept outside a run folder, e.g.
    `RewardLab.save_reward`'s), in `<path>.sig.json`; returns that file."""
    signature = _file_signature(path)
    signature.write_text(json.dumps({"hmac_sha256": _digest(data, _FILE_SIGNED)}) + "\n", encoding="utf-8")
    return signature


def check_file(path: Path, data: bytes, readable: Path) -> None:
    """Refuse the pickle `data` read from `path` unless `sign_file` signed it with this user's key;
    `readable`: its source, which the message tells the reader to read first."""
    signature = _file_signature(path)
    try:
        text = signature.read_text(encoding="utf-8")
    except OSError:
        text = None
    why = _untrusted(_parsed(text), data, _FILE_SIGNED, signature)
    if why:
        raise UntrustedRunObjects(
            f"refusing to load {path}: {why}. Unpickling it would run the code it holds as you. If you "
            f"trust who wrote it, read {readable}, then pass trust_run_objects=True"
        )


def _file_signature(path: Path) -> Path:
    return path.with_name(path.name + ".sig.json")


def _parsed(text: str | None) -> dict[str, Any]:
    try:
        record = json.loads(text) if text is not None else None
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _untrusted(record: dict[str, Any], data: bytes, named: Any, where: Any) -> str:
    """Why `data` is not trusted under the signature `record` read from `where` ("" when it is):
    the one check of every signature."""
    if not record:
        return f"it has no readable signature ({where} is missing or damaged)"
    if not hmac.compare_digest(str(record.get("hmac_sha256")), _digest(data, named)):
        return f"its signature does not match this user's key ({key_file()}): another user or machine wrote it, or it changed since"
    return ""


def names_code(cfg: Any) -> list[str]:
    """`key=value` of each setting of the run config `cfg` that names code to import, a file to run
    or commands to start (what a refused config's message lists)."""
    named = {
        "reward.function": cfg.reward.function,
        "rollout.program": cfg.rollout.program,
        "rollout.env": cfg.rollout.env,
        "rollout.parser": cfg.rollout.parser if ":" in str(cfg.rollout.parser) else None,
        "tools.config": cfg.tools.config,
        "grpo.loss": cfg.grpo.loss if ":" in cfg.grpo.loss else None,
        "model.trust_remote_code": cfg.model.trust_remote_code or None,
    }
    return [f"{key}={value!r}" for key, value in named.items() if value is not None]
