"""tool_verified: a reward that runs a tool, with fake toolsets (sync and async `call`)."""

from __future__ import annotations

import asyncio
from typing import Any

from rlfactory_nb.rewards import RewardRunner, make_sample, tool_verified
from rlfactory_nb.types import Sample, ToolResult


class FakePythonTools:
    """Runs "tests" as a lookup: the answer passes when it is the square of the input."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        self.calls.append((name, arguments))
        if arguments["code"] == "crash":
            return ToolResult(name, "error", "Traceback: ZeroDivisionError")
        passed = int(arguments["code"]) == 7 * 7
        return ToolResult(name, "ok", "1 passed" if passed else "1 failed")


class AsyncFakeTools(FakePythonTools):
    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        await asyncio.sleep(0.01)
        return super().call(name, arguments)


def code_args(sample: Sample) -> dict[str, Any] | None:
    return {"code": sample.final_answer} if sample.final_answer else None


def unit_tests_pass(result: ToolResult, sample: Sample) -> float:
    return float(result.ok and "1 passed" in result.content)


async def test_scores_on_the_tool_result() -> None:
    tools = FakePythonTools()
    reward = tool_verified(tools, "python_sandbox", code_args, unit_tests_pass)
    assert reward.__name__ == "verified_by_python_sandbox"
    assert await reward(make_sample("<answer>49</answer>")) == 1.0
    assert await reward(make_sample("<answer>48</answer>")) == 0.0
    assert await reward(make_sample("<answer>crash</answer>")) == 0.0
    assert tools.calls == [
        ("python_sandbox", {"code": "49"}),
        ("python_sandbox", {"code": "48"}),
        ("python_sandbox", {"code": "crash"}),
    ]


async def test_nothing_to_verify_scores_zero_without_a_call() -> None:
    tools = FakePythonTools()
    reward = tool_verified(tools, "python_sandbox", code_args, unit_tests_pass)
    assert await reward(make_sample("<think>no answer</think>")) == 0.0
    assert tools.calls == []


async def test_async_toolset_through_the_runner() -> None:
    reward = tool_verified(
        AsyncFakeTools(),
        "python_sandbox",
        code_args,
        lambda result, sample: {"score": unit_tests_pass(result, sample), "ran": 1.0},
        name="unit_tests",
    )
    outcomes = await RewardRunner(reward).score(
        [make_sample("<answer>49</answer>"), make_sample("<answer>1</answer>")]
    )
    assert [o.score for o in outcomes] == [1.0, 0.0]
    assert outcomes[0].components == {"unit_tests": 1.0, "unit_tests/ran": 1.0}
