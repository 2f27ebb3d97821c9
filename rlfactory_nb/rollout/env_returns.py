"""What an environment returns, checked before it enters a trajectory.

An environment is user code, or a server's: `reset` may return a string (TRL's environment classes
do), a `Response` may hold a string where its messages go (`Response("text")`), its `info` a count
that is not a number. Unchecked, each raised a bare ValueError from deep in the loop and failed the
whole evaluation or training step. Here each is an EpisodeError naming the method and the field,
which the episode records as its own error (rollout/session.py: finish_reason "error", `env_error` in the
metadata), so one row's malformed return ends that row's episode only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rlfactory_nb.envs.base import Reset
from rlfactory_nb.errors import EpisodeError
from rlfactory_nb.types import Message

_SHOWN = 80
"""characters of a wrong value an error quotes"""


def opening(value: Any) -> Reset | None:
    """What `reset` returned as a Reset of checked messages (None: nothing to add)."""
    if value is None:
        return None
    if isinstance(value, Reset):
        return Reset(messages(value.messages, "reset()'s Reset.messages is", "reset"), value.replace_prompt)
    return Reset(messages(value, "reset() returned", "reset"))


def messages(value: Any, where: str, kind: str) -> list[Message]:
    """`value` as a list of message dicts (copies), or an EpisodeError of `kind` saying what `where`
    holds instead."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise EpisodeError(
            kind,
            f"{where} {_shown(value)}, not a list of messages ({{'role': ..., 'content': ...}} dicts): "
            "wrap a text as [{'role': 'user', 'content': text}]"
        )
    for index, message in enumerate(value):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise EpisodeError(kind, f"{where} a list whose item {index} is {_shown(message)}, not a message dict with a 'role'")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise EpisodeError(kind, f"{where} a list whose message {index} has content {_shown(content)}, not text")
    return [dict(message) for message in value]


def user_counts(info: Any) -> tuple[int, float]:
    """(tokens, seconds) a simulated user reported in `Response.info`, checked: whole or real numbers,
    finite and not negative (else an EpisodeError of kind "respond")."""
    if not isinstance(info, Mapping):
        raise EpisodeError("respond", f"Response.info is {_shown(info)}, not a dict")
    tokens, seconds = info.get("user_tokens", 0), info.get("user_s", 0.0)
    for name, number in (("user_tokens", tokens), ("user_s", seconds)):
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number) or number < 0:
            raise EpisodeError("respond", f"Response.info[{name!r}] is {_shown(number)}, not a number >= 0")
    return int(tokens), float(seconds)


def _shown(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= _SHOWN else text[:_SHOWN] + "..."
    return f"a {type(value).__name__} ({text})"
