"""Rewards that verify an answer by running a tool: execute the model's SQL against a database tool,
run unit tests on its code in `python_sandbox`, look a claimed fact up with search.

The reward goes through the same ToolSet the rollout used, so it sees the same tools, timeouts and
cache. Only `call(name, arguments)` returning (or awaiting to) a ToolResult is needed, so a unit test
can pass a small fake.

A synchronous `call` (NL2SQL's in-process `LocalSql` runs the model's SQL) and a synchronous `check`
run in a daemon thread (rewards/threads.py), never on the event loop, so the reward runner's timeout
holds however slow the model's query is.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from rlfactory_nb._threads import in_thread
from rlfactory_nb.rewards.values import RewardReturn, is_async_function
from rlfactory_nb.types import Sample, ToolResult


class CallsTools(Protocol):
    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult | Awaitable[ToolResult]: ...


def tool_verified(
    toolset: CallsTools,
    tool_name: str,
    make_args: Callable[[Sample], dict[str, Any] | None],
    check: Callable[[ToolResult, Sample], RewardReturn],
    name: str | None = None,
) -> Callable[[Sample], Awaitable[RewardReturn]]:
    """An async reward that calls `tool_name` with `make_args(sample)` and returns `check(result, sample)`.

    `make_args` returning None means there is nothing to verify (say, no code in the answer): the
    score is 0.0 and no tool runs. `check` sees every result, failed ones included (a program that
    crashes is usually worth 0; a check may decide otherwise), and may return a float or a dict.
    """

    call_is_async = is_async_function(toolset.call)
    check_is_async = is_async_function(check)

    async def reward(sample: Sample) -> RewardReturn:
        arguments = make_args(sample)
        if arguments is None:
            return 0.0
        if call_is_async:
            result = await toolset.call(tool_name, arguments)
        else:
            result = await in_thread("reward", toolset.call, tool_name, arguments)
        if inspect.isawaitable(result):
            result = await result
        if check_is_async:
            return await check(result, sample)
        return await in_thread("reward", check, result, sample)

    reward.__name__ = reward.__qualname__ = name or f"verified_by_{tool_name}"
    return reward
