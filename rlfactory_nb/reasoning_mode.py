"""The reasoning mode a model was trained in, kept with the model (standard library only, so the
rollout loop reads it without importing models/).

A preset's mode is in `THINKING` below; a model folder made here (a warm-start's output, a
checkpoint) records its own in `reasoning_mode.json`. With `rollout.enable_thinking` unset a run prompts a model
as it was trained: a copy of tiny-calculator saved to a folder stays non-thinking, where the
template's default (Qwen3's: thinking) would give it prompts it has never seen (the guessing game's
warm-started player scored 0.13 instead of 0.61 that way, 2026-12-04).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlfactory_nb.local_files import read_regular, write_atomic

MODE_FILE = "reasoning_mode.json"
THINKING = {"tiny-calculator": False, "tiny-guess": False, "tiny-calculator-weak": False}
"""each embedded preset's reasoning mode: the one its warm start trained (models/presets/)"""


def thinking_mode(cfg: Any) -> bool | None:
    """The mode a run prompts in: `rollout.enable_thinking`, or unset, the mode the model was trained in
    (a preset's, or the one its folder records; None: the template's default). The one place it is
    decided: the Agent, an agent program and a checkpoint's record all ask here."""
    given = cfg.rollout.enable_thinking
    return trained_mode(cfg.model.name) if given is None else given


def trained_mode(name: str) -> bool | None:
    """`enable_thinking` that model `name` (a preset or a folder) was trained with; None: unknown."""
    if name in THINKING:
        return THINKING[name]
    try:
        recorded = json.loads(read_regular(Path(name) / MODE_FILE, max_bytes=4096))
    except (OSError, ValueError, RecursionError):  # no such folder or file, or not ours: the template's default
        return None
    value = recorded.get("enable_thinking") if isinstance(recorded, dict) else None
    return value if isinstance(value, bool) else None


def record_mode(folder: str | Path, enable_thinking: bool | None) -> None:
    """Write the mode a model in `folder` was trained with (nothing when it is the template's default)."""
    if enable_thinking is not None:
        write_atomic(Path(folder) / MODE_FILE, json.dumps({"enable_thinking": enable_thinking}).encode())
