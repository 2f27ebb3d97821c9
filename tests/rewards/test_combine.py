"""combine: a weighted sum that logs every part."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from rlfactory_nb.rewards import InvalidRewardValue, combine, exact_match, format_ok, make_sample

SAMPLE = make_sample("<answer>Paris</answer>", ground_truth="paris")


def test_weighted_sum_with_bare_function_weight_one() -> None:
    reward = combine({"em": exact_match, "format": (format_ok, 0.5), "none": (lambda s: 0.25, -2.0)})
    assert not inspect.iscoroutinefunction(reward)
    assert reward(SAMPLE) == {"score": 1.0 + 0.5 - 0.5, "em": 1.0, "format": 1.0, "none": 0.25}


def test_dict_parts_log_their_components_and_name_is_set() -> None:
    def detailed(sample):
        return {"score": 0.5, "precision": 1.0}

    reward = combine({"detail": (detailed, 2.0)}, name="mine")
    assert reward.__name__ == "mine"
    assert reward(SAMPLE) == {"score": 1.0, "detail": 0.5, "detail/precision": 1.0}


async def test_an_async_part_makes_it_async_and_parts_run_concurrently() -> None:
    async def slow(sample):
        await asyncio.sleep(0.2)
        return 1.0

    reward = combine({"a": slow, "b": slow, "em": exact_match})
    assert inspect.iscoroutinefunction(reward)
    start = asyncio.get_running_loop().time()
    assert (await reward(SAMPLE))["score"] == 3.0
    assert asyncio.get_running_loop().time() - start < 0.35


def test_turn_scores_are_weighted_and_summed() -> None:
    reward = combine(
        {
            "process": (lambda s: {"score": 1.0, "turn_scores": [0.0, 1.0]}, 0.5),
            "more": (lambda s: {"score": 0.0, "turn_scores": [1.0, 1.0]}, 1.0),
            "outcome": exact_match,
        }
    )
    assert reward(SAMPLE)["turn_scores"] == [1.0, 1.5]


def test_turn_scores_of_different_lengths_are_an_error() -> None:
    reward = combine(
        {"a": lambda s: {"score": 1, "turn_scores": [1]}, "b": lambda s: {"score": 1, "turn_scores": []}}
    )
    with pytest.raises(InvalidRewardValue, match="different lengths"):
        reward(SAMPLE)


def test_a_bad_part_value_names_the_part() -> None:
    reward = combine({"em": exact_match, "broken": lambda s: None})
    with pytest.raises(InvalidRewardValue, match="combine part 'broken': the returned value is None"):
        reward(SAMPLE)


@pytest.mark.parametrize("parts", [{}, {"x": 3}, {"x": (exact_match, "1")}])
def test_bad_parts_are_rejected(parts) -> None:
    with pytest.raises((ValueError, TypeError)):
        combine(parts)
