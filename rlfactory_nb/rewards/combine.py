"""`combine`: several reward functions as one weighted sum that logs each part.

The combined function returns `{"score": weighted sum, "<name>": part score, "<name>/<component>": ...}`
so a dashboard shows why a sample scored what it did. Per-turn scores of the parts that give them are
summed with the same weights; parts without them add to `score` only. It is sync when every part is
sync (call it directly in a notebook) and async otherwise.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from typing import Any

from rlfactory_nb.errors import ArgumentTypeError, ConfigError
from rlfactory_nb.rewards.values import (
    InvalidRewardValue,
    RewardFunction,
    RewardValue,
    is_async_function,
    to_reward_value,
)
from rlfactory_nb.types import Sample

Part = RewardFunction | tuple[RewardFunction, float]


def combine(parts: Mapping[str, Part], name: str = "combined") -> RewardFunction:
    """A reward that is the weighted sum of `parts`: `{"name": (function, weight)}`, or a bare function
    for weight 1.0.

    >>> from rlfactory_nb.rewards.functions import format_ok, numeric_match
    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> reward = combine({"correct": (numeric_match, 1.0), "format": (format_ok, 0.1)})
    >>> reward(make_sample("<answer>36</answer>", ground_truth=36))
    {'score': 1.1, 'correct': 1.0, 'format': 1.0}
    """
    weighted = {key: part if isinstance(part, tuple) else (part, 1.0) for key, part in parts.items()}
    if not weighted:
        raise ConfigError("combine needs at least one reward function")
    for key, (function, weight) in weighted.items():
        if not callable(function) or isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ArgumentTypeError(
                f"combine part {key!r} must be a function or (function, weight), got {parts[key]!r}"
            )

    if any(is_async_function(function) for function, _ in weighted.values()):

        async def combined_async(sample: Sample) -> dict[str, Any]:
            values = await asyncio.gather(*(_call_async(f, sample) for f, _ in weighted.values()))
            return _weighted_sum(weighted, dict(zip(weighted, values)))

        combined_async.__name__ = combined_async.__qualname__ = name
        return combined_async

    def combined(sample: Sample) -> dict[str, Any]:
        return _weighted_sum(weighted, {key: function(sample) for key, (function, _) in weighted.items()})

    combined.__name__ = combined.__qualname__ = name
    return combined


async def _call_async(function: RewardFunction, sample: Sample) -> Any:
    value = function(sample)
    return await value if inspect.isawaitable(value) else value


def _weighted_sum(
    weighted: Mapping[str, tuple[RewardFunction, float]], raw: Mapping[str, Any]
) -> dict[str, Any]:
    values: dict[str, RewardValue] = {}
    for key, value in raw.items():
        try:
            values[key] = to_reward_value(value)
        except InvalidRewardValue as exc:
            raise InvalidRewardValue(f"combine part {key!r}: {exc}") from None
    result: dict[str, Any] = {"score": sum(weighted[key][1] * value.score for key, value in values.items())}
    for key, value in values.items():
        result[key] = value.score
        result.update({f"{key}/{component}": number for component, number in value.components.items()})
    turn_scores = _weighted_turn_scores(weighted, values)
    if turn_scores is not None:
        result["turn_scores"] = turn_scores
    return result


def _weighted_turn_scores(
    weighted: Mapping[str, tuple[RewardFunction, float]], values: Mapping[str, RewardValue]
) -> list[float] | None:
    given = {key: value.turn_scores for key, value in values.items() if value.turn_scores is not None}
    if not given:
        return None
    lengths = {key: len(scores) for key, scores in given.items()}
    if len(set(lengths.values())) > 1:
        raise InvalidRewardValue(f"combine parts give turn_scores of different lengths: {lengths}")
    return [
        sum(weighted[key][1] * scores[i] for key, scores in given.items())
        for i in range(len(next(iter(given.values()))))
    ]
