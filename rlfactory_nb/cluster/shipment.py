"""What a job shipped, in one line of its repr: "shipped: project folder 21 KiB (4 files), 1 staged file".

cluster/shipping.py makes the packages; Ray's own lines about them stay out of the cell
(cluster/quiet.py), so this line is what a notebook shows instead. It measures the files the
shipping size limit counts, before Ray zips them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlfactory_nb.cluster.shipping import _files


def shipment_summary(env: dict[str, Any], staged: dict[str, str]) -> str:
    """`env` and `staged` as `shipping.runtime_env` returns them (before `upload`).

    >>> shipment_summary({"py_modules": ["/tmp/rlfactory_nb_files_1", "/src/mylib"]}, {"data.train": "x/0_rows.jsonl"})
    'shipped: 1 staged file, 1 module'
    """
    parts = []
    if "working_dir" in env:
        files = _files(Path(env["working_dir"]), env.get("excludes", []))
        size = sum(file.stat().st_size for file in files)
        parts.append(f"project folder {_size(size)} ({_count(len(files), 'file')})")
    if staged:
        parts.append(_count(len(staged), "staged file"))
    modules = len(env.get("py_modules", [])) - (1 if staged else 0)  # the staged files travel as one package
    if modules:
        parts.append(_count(modules, "module"))
    return "shipped: " + (", ".join(parts) or "nothing")


def _size(size: int) -> str:
    """
    >>> _size(21_500), _size(3 * 2**20)
    ('21 KiB', '3.0 MiB')
    """
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.0f} KiB"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
