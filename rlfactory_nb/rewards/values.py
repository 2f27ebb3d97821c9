"""What a reward function may return, checked in one place.

A reward function returns a number, or a dict with a `score` key, optional logged components (any other
numeric keys) and optional `turn_scores` (one per assistant turn, for process rewards). Anything else,
None, NaN and infinities included, is a bug in the reward function: it must not become a silent 0 or a
NaN advantage, so `to_reward_value` raises `InvalidRewardValue` with what was returned and the fix.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rlfactory_nb.errors import InvalidRewardValue

RewardReturn = float | dict[str, Any] | None
RewardFunction = Callable[..., RewardReturn | Awaitable[RewardReturn]]
"""`def reward(sample: Sample) -> float | dict[str, float]`, sync or async; or a group reward"""

_FIX = 'return a float, or a dict like {"score": 1.0, "component": 0.5}'


@dataclass(frozen=True)
class RewardValue:
    """A reward function's return value, checked."""

    score: float
    components: dict[str, float] = field(default_factory=dict)
    """the dict's other numeric keys, logged next to the score"""
    turn_scores: list[float] | None = None
    """one score per assistant turn, when the function gives them"""


def to_number(value: Any, what: str = "the reward") -> float:
    """`value` as a finite float (bools, numpy and 0-d torch scalars allowed), else InvalidRewardValue."""
    if value is None:
        raise InvalidRewardValue(f"{what} is None; {_FIX}")
    if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
        raise InvalidRewardValue(f"{what} is a {type(value).__name__} ({value!r:.60}), not a number; {_FIX}")
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidRewardValue(f"{what} ({value!r:.60}) cannot be read as a number: {exc}") from exc
    if not math.isfinite(number):
        raise InvalidRewardValue(f"{what} is {number}; rewards must be finite numbers")
    return number


def to_reward_value(value: Any) -> RewardValue:
    """Check and normalize what a reward function returned."""
    if not isinstance(value, dict):
        return RewardValue(to_number(value, "the returned value"))
    if "score" not in value:
        raise InvalidRewardValue(f"the returned dict has no 'score' key (keys: {sorted(value)}); {_FIX}")
    components = {
        str(key): to_number(item, f"component {key!r}")
        for key, item in value.items()
        if key not in ("score", "turn_scores")
    }
    turn_scores = value.get("turn_scores")
    if turn_scores is not None:
        if not isinstance(turn_scores, (list, tuple)):
            raise InvalidRewardValue(
                f"'turn_scores' must be a list of numbers, got {type(turn_scores).__name__}"
            )
        turn_scores = [to_number(item, f"turn_scores[{i}]") for i, item in enumerate(turn_scores)]
    return RewardValue(to_number(value["score"], "'score'"), components, turn_scores)


def is_async_function(function: Any) -> bool:
    """True for `async def` functions, partials of them and objects with an `async def __call__`."""
    if inspect.iscoroutinefunction(function):
        return True
    return not inspect.isroutine(function) and inspect.iscoroutinefunction(type(function).__call__)


async def score_of(function: Callable[..., Any], sample: Any) -> float:
    """`function(sample)` as one number, sync or async, its "score" when it returns components: how
    a reward written in a cell builds on another (notebook 02's `shaped` on the example's reward).

    >>> import asyncio
    >>> asyncio.run(score_of(lambda sample: {"score": 0.5, "em": 1.0}, None))
    0.5
    """
    value = function(sample)
    if inspect.isawaitable(value):
        value = await value
    return to_reward_value(value).score


def group_reward(function: Callable[..., Any]) -> Callable[..., Any]:
    """Mark `function` as a group reward: it takes the list of samples of one prompt and returns one
    score (number or dict, as above) per sample, in order, so it can judge them against each other
    (RULER-style relative judging, rank-based rewards). The runner calls it once per group.

    >>> @group_reward
    ... def shortest_wins(samples):
    ...     lengths = [len(s.final_answer) for s in samples]
    ...     return [float(n == min(lengths)) for n in lengths]
    >>> is_group_reward(shortest_wins)
    True
    """
    function.group_reward = True  # type: ignore[attr-defined]
    return function


def is_group_reward(function: Any) -> bool:
    return getattr(function, "group_reward", False) is True
