"""Built-in reward functions on hand-built samples (the doctests cover the happy paths)."""

from __future__ import annotations

import numpy as np
import pytest

from rlfactory_nb.rewards import (
    exact_match,
    f1,
    format_ok,
    length_penalty,
    make_sample,
    numeric_match,
    parse_number,
    tool_error_penalty,
    tool_success_rate,
)
from rlfactory_nb.types import MalformedCall, Sample, ToolResult, Turn


def answer(text: str, ground_truth: object) -> Sample:
    return make_sample(f"<think>hmm</think><answer>{text}</answer>", ground_truth=ground_truth)


@pytest.mark.parametrize(
    "text, ground_truth, em, expected_f1",
    [
        ("Paris", "paris", 1.0, 1.0),
        ("  The  Paris. ", "paris", 1.0, 1.0),
        ("an apple", "apple!", 1.0, 1.0),
        ("Paris, France", "paris", 0.0, 2 / 3),
        ("London", ["Paris", "london"], 1.0, 1.0),
        ("London", {"target": ["Paris", "London"]}, 1.0, 1.0),
        ("London", {"target": np.array(["Paris", "London"])}, 1.0, 1.0),
        ("42", 42, 1.0, 1.0),
        ("theater", "the ater", 0.0, 0.0),
        ("", "paris", 0.0, 0.0),
        ("Berlin", "Paris", 0.0, 0.0),
    ],
)
def test_exact_match_and_f1(text: str, ground_truth: object, em: float, expected_f1: float) -> None:
    sample = answer(text, ground_truth)
    assert exact_match(sample) == em
    assert f1(sample) == pytest.approx(expected_f1)


def test_final_answer_without_tags_is_the_last_turn_without_think() -> None:
    sample = make_sample("<tool_call>...</tool_call>", "<think>so</think>\nParis", ground_truth="paris")
    assert exact_match(sample) == 1.0


@pytest.mark.parametrize("reward", [exact_match, f1, numeric_match])
def test_missing_ground_truth_is_an_error_naming_the_sample(reward) -> None:
    with pytest.raises(ValueError, match="sample 'example' has no ground truth"):
        reward(make_sample("<answer>1</answer>"))
    with pytest.raises(ValueError, match="no ground truth"):
        reward(make_sample("<answer>1</answer>", ground_truth=[]))


def test_unsupported_ground_truth_type_is_named() -> None:
    with pytest.raises(TypeError, match="got set"):
        exact_match(answer("1", {1}))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("36", 36.0),
        ("3.0", 3.0),
        ("-5", -5.0),
        ("1,234", 1234.0),
        ("$1,234,567.25", 1234567.25),
        ("x = .5", 0.5),
        ("1e3", 1000.0),
        ("3-5", 5.0),
        ("Qwen3 says 7", 7.0),
        ("seven", None),
        ("", None),
    ],
)
def test_parse_number(text: str, expected: float | None) -> None:
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    "text, ground_truth, expected",
    [
        ("56088", 56088, 1.0),
        ("56,088", "56088", 1.0),
        ("56088.0000001", 56088, 1.0),
        ("56089", 56088, 0.0),
        ("-7", "-7", 1.0),
        ("7", "-7", 0.0),
        ("the answer is 12", ["11", "12"], 1.0),
        ("none", 1, 0.0),
    ],
)
def test_numeric_match(text: str, ground_truth: object, expected: float) -> None:
    assert numeric_match(answer(text, ground_truth)) == expected


def test_numeric_match_tolerance_is_configurable() -> None:
    sample = answer("3.14", "3.14159")
    assert numeric_match(sample) == 0.0
    assert numeric_match(sample, rel_tol=1e-3) == 1.0


OK = ToolResult("calculator", "ok", "36")
FAILED = ToolResult("calculator", "timeout", "timed out")
BAD_BLOCK = MalformedCall("not valid JSON")


def test_format_ok() -> None:
    assert format_ok(make_sample(Turn("<answer>36</answer>", results=[FAILED]))) == 1.0
    assert format_ok(make_sample("<think>only thinking</think>")) == 0.0
    assert format_ok(make_sample(Turn("x", parse_errors=[BAD_BLOCK]), "<answer>36</answer>")) == 0.0


@pytest.mark.parametrize(
    "turn, rate, penalty",
    [
        (Turn("no tools"), 0.0, 0.0),
        (Turn("x", results=[OK, OK]), 1.0, 0.0),
        (Turn("x", results=[OK, FAILED]), 0.5, -0.25),
        (Turn("x", results=[OK], parse_errors=[BAD_BLOCK]), 0.5, -0.25),
        (Turn("x", results=[FAILED] * 6), 0.0, -1.0),
    ],
)
def test_tool_success_rate_and_error_penalty(turn: Turn, rate: float, penalty: float) -> None:
    sample = make_sample(turn, "<answer>36</answer>")
    assert tool_success_rate(sample) == rate
    assert tool_error_penalty(sample) == penalty


@pytest.mark.parametrize("tokens, expected", [(0, 0.0), (768, 0.0), (896, -0.5), (1024, -1.0), (5000, -1.0)])
def test_length_penalty_default_ramp(tokens: int, expected: float) -> None:
    assert length_penalty(make_sample(Turn("x", num_tokens=tokens))) == expected


def test_length_penalty_needs_a_trajectory_and_a_valid_buffer() -> None:
    sample = make_sample("x")
    with pytest.raises(ValueError, match="buffer_tokens"):
        length_penalty(sample, max_tokens=10, buffer_tokens=20)
    sample.trajectory = None
    with pytest.raises(ValueError, match="needs sample.trajectory"):
        length_penalty(sample)
