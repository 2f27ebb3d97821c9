"""Presets shipped built, as package data, so that a first run skips the build.

The tiny-calculator build is deterministic project output (about 5 MB) but costs about 300 s on 2
cores, most of a newcomer's first `make demo` (issue 17). The package carries its result under
`built/<name>/` with a manifest: the recipe hash and version it was built from, and the SHA-256 of
each file. A shipped folder is used only while its recipe hash equals the code's; a recipe change
without a rebuild falls back to the build-and-cache path, and a test fails until someone runs
`rlfactory-nb preset build tiny-calculator --ship` and commits the result.

Shipped folders are read-only by contract (an installed package may sit in a read-only
site-packages): loading from them is fine, writing into them is not.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

BUILT = Path(__file__).parent / "built"
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Manifest:
    """What a shipped preset folder was built from."""

    recipe_hash: str
    """`presets.recipe_hash()` of the code that built the files"""
    recipe_version: int
    """`presets.RECIPE_VERSION` of that code, for a reader; the hash decides"""
    files: dict[str, str]
    """file name -> SHA-256 hex digest, for every file in the folder but the manifest"""

    @classmethod
    def read(cls, folder: Path) -> Manifest | None:
        """The manifest of `folder`, or None when it has none (not shipped, or a partial checkout)."""
        path = folder / MANIFEST
        if not path.is_file():
            return None
        return cls(**json.loads(path.read_text(encoding="utf-8")))


def shipped_folder(name: str) -> Path:
    return BUILT / name


def unusable_because(folder: Path, recipe_hash: str) -> str | None:
    """Why `folder` cannot serve as the build of `recipe_hash`, or None when it can. Checks that the
    files exist, not their digests: hashing 5 MB on every load buys nothing a test does not."""
    manifest = Manifest.read(folder)
    if manifest is None:
        return "is not in the package"
    if manifest.recipe_hash != recipe_hash:
        return f"is out of date (built from recipe {manifest.recipe_hash}, the code's is {recipe_hash})"
    missing = [name for name in manifest.files if not (folder / name).is_file()]
    if missing:
        return f"lacks {', '.join(missing)} (a partial copy)"
    return None


def file_digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file in `folder` except the manifest, by name."""
    digests = {}
    for file in sorted(folder.iterdir()):
        if file.is_file() and file.name != MANIFEST:
            with file.open("rb") as handle:
                digests[file.name] = hashlib.file_digest(handle, "sha256").hexdigest()
    return digests


def ship(source: Path, name: str, recipe_hash: str, recipe_version: int) -> Path:
    """Copy a built preset folder into the package with its manifest; returns the shipped folder.

    The copy is staged next to the target and swapped in whole, so an interrupted ship leaves the
    previous shipped folder or none, never a mix."""
    target = shipped_folder(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{name}-"))
    for file in sorted(source.iterdir()):
        if file.is_file():
            shutil.copyfile(file, staging / file.name)  # contents only: the cache's 0600 modes stay behind
    manifest = Manifest(recipe_hash, recipe_version, file_digests(staging))
    (staging / MANIFEST).write_text(json.dumps(dataclasses.asdict(manifest), indent=2) + "\n")
    staging.chmod(0o755)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target
