"""`Environment`: what one trajectory talks to, one instance per trajectory.

A ToolSet is shared by every trajectory of a run: its MCP servers, its cache. A task whose tools
change a state (a shop database, a game board, a sandbox folder) needs its own copy per episode, a
reward that reads the state left behind, and something other than a tool that can answer the model
(a simulated user, the game's move). An Environment is that copy:

    class Shop(rf.Environment):
        def reset(self, row, *, seed):       # the row's prompt stays; the state starts here
            self.db = copy_database(row["db"])
        @rf.tool
        def cancel(self, order_id: str) -> str:
            '''Cancel an order.'''
            ...
        def respond(self, turn):             # the model answered without a call
            return Response([{"role": "user", "content": "Thanks!"}], done=True)
        def reward(self):
            return float(self.db.matches_goal())
        def close(self):
            self.db.close()

Methods may be sync or async: the rollout loop (rollout/agent.py) awaits coroutines and runs sync
`reset`, `respond`, `reward` and `close` in a worker thread, where they may block (open a database,
start a browser) without stalling the other trajectories. `tool_specs` and `state` are called in the
loop: keep them cheap.

A method marked `@rf.tool` is bound to the instance: the schema comes from its type hints and
docstring as for a function tool (`self` left out), and a call that raises comes back as an error
result the model reads (a tool failure is data, as in a ToolSet).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rlfactory_nb.tools import validate
from rlfactory_nb.tools.python import PythonTool
from rlfactory_nb.types import Message, ToolCall, ToolResult, ToolSpec, Turn

Speaker = Literal["env", "user"]
"""who said a Response's messages: the environment (a game's move, an observation) or a user"""

EnvErrorKind = Literal["create", "reset", "tool", "respond", "reward", "close", "timeout"]
"""where an episode's environment failed"""


@dataclass(frozen=True)
class Reset:
    """What `reset` returns: messages added after the row's prompt, or in its place."""

    messages: Sequence[Message] = ()
    replace_prompt: bool = False
    """True: `messages` are the whole prompt (the row's messages are dropped)"""


@dataclass(frozen=True)
class Response:
    """What an environment says when the model answers without a tool call."""

    messages: Sequence[Message] = ()
    done: bool = False
    """True: the episode ends here (its messages, if any, are recorded but the model gets no turn)"""
    reward: float | None = None
    """a reward the environment gives with this response (a game's win); the last one given is the
    episode's `env_reward` unless `reward()` gives one"""
    speaker: Speaker = "env"
    """who is speaking, for the views: "user" (a simulated user) or "env" (a game, an observation)"""
    info: dict[str, Any] = field(default_factory=dict)
    """numbers the loop adds to the trajectory's metrics (a user simulator's tokens and latency)"""


class Environment:
    """One episode's world: see the module docstring. Every method has a default, so a subclass
    writes only what its task needs; the defaults give today's behaviour (no opening messages, the
    episode ends when the model answers without a call)."""

    def reset(self, row: dict[str, Any], *, seed: int) -> Reset | Sequence[Message] | None:
        """Start the episode from the dataset `row`; `seed` is fixed by the trajectory's SampleId, so
        a run is reproducible. Return messages to add after the row's prompt, a `Reset`, or None."""
        return None

    def tool_specs(self) -> list[ToolSpec]:
        """What the model is told about this episode's tools (default: the `@rf.tool` methods)."""
        return [bound.spec for bound in self._tools().values()]

    async def call_tools(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """One result per call, in order (default: the `@rf.tool` methods, one after another, since
        they share this instance's state)."""
        tools = self._tools()
        return [await _call_method_tool(tools, call) for call in calls]

    def finished(self) -> bool:
        """Whether the episode is over after this turn's tool calls (a game won by a move, an
        observation with done=True): the episode then ends, its results recorded but not fed back."""
        return False

    def respond(self, turn: Turn) -> Response | None:
        """What the environment says to an answer without a tool call; None ends the episode."""
        return None

    def reward(self) -> float | dict[str, float] | None:
        """A score from the final state (None: no score of its own); reward functions also see the
        still-open instance as `sample.env`."""
        return None

    def state(self) -> dict[str, Any] | None:
        """The episode's state as the stepper and trajectory view show it after each step."""
        return None

    def close(self) -> None:
        """Release what the episode holds; always awaited, however the episode ended."""

    def _tools(self) -> dict[str, PythonTool]:
        cached = self.__dict__.get("_bound_tools")
        if cached is None:
            cached = self.__dict__["_bound_tools"] = bound_tools(self)
        return cached


def bound_tools(instance: Any) -> dict[str, PythonTool]:
    """The `@rf.tool` methods of `instance`'s class, bound to it, by tool name (`self` left out of
    each schema)."""
    found: dict[str, PythonTool] = {}
    for klass in reversed(type(instance).__mro__):
        for attribute in vars(klass).values():
            if isinstance(attribute, PythonTool):
                found[attribute.name] = _bind(attribute, instance)
    return found


def _bind(method: PythonTool, instance: Any) -> PythonTool:
    schema = dict(method.input_schema)
    first = next(iter(inspect.signature(method.fn).parameters), None)
    if first is not None:
        schema["properties"] = {k: v for k, v in schema.get("properties", {}).items() if k != first}
        required = [name for name in schema.get("required", []) if name != first]
        schema.pop("required", None)
        if required:
            schema["required"] = required
    return PythonTool(functools.partial(method.fn, instance), method.name, method.description, schema)


async def _call_method_tool(tools: dict[str, PythonTool], call: ToolCall) -> ToolResult:
    started = time.perf_counter()
    bound = tools.get(call.name)
    if bound is None:
        known = ", ".join(sorted(tools)) or "none"
        return ToolResult(call.name, "unknown_tool", f"unknown tool {call.name!r}; this episode's tools: {known}")
    arguments, problem = validate.checked_arguments(call.name, bound.input_schema, call.arguments)
    if problem:  # the ToolSet's own check: a schema binds a method as it binds a server's tool
        return ToolResult(call.name, "invalid_args", validate.shown_text(problem), time.perf_counter() - started)
    try:
        reply = await bound.run(arguments)
    except Exception as error:  # noqa: BLE001 - a tool failure is data: the model reads it
        return ToolResult(call.name, "error", f"{type(error).__name__}: {error}", time.perf_counter() - started)
    return ToolResult(call.name, "ok", reply.text, time.perf_counter() - started, details=reply.details or None)


class ToolSetEnvironment(Environment):
    """Today's loop as an environment: the tools of one ToolSet, shared by every episode (stateless,
    so nothing to reset or close); the episode ends when the model answers without a call. It is the
    default environment of every player (`ToolSetEnvironment.shared_by(tools)`)."""

    def __init__(self, toolset: Any):
        self.toolset = toolset

    @classmethod
    def shared_by(cls, toolset: Any) -> SharedEnvironment:
        """The default environment: one instance over `toolset`, for every episode."""
        return SharedEnvironment(cls(toolset))

    def tool_specs(self) -> list[ToolSpec]:
        return list(self.toolset.specs) if self.toolset is not None else []

    async def call_tools(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        if self.toolset is None:
            return [ToolResult(c.name, "unknown_tool", f"no tools are available; cannot call {c.name!r}") for c in calls]
        return list(await self.toolset.call_many([(call.name, call.arguments) for call in calls]))


@dataclass(frozen=True)
class EnvReward:
    """The environment's own reward as a reward function named "env": what `reward()` returned (or
    the last `Response.reward`), kept in `metadata["env_reward"]` before the instance closed;
    `error_reward` for an episode whose environment failed, 0.0 for one that gave none."""

    error_reward: float = 0.0
    __name__ = "env"

    def __call__(self, sample: Any) -> float | dict[str, float]:
        if "env_error" in sample.metadata:
            return self.error_reward
        value = sample.metadata.get("env_reward")
        if isinstance(value, dict):
            return {str(key): float(number) for key, number in value.items()}
        return 0.0 if value is None else float(value)


env_reward = EnvReward()
"""the environment's own reward as a `module:function` spec names it (`rlfactory_nb.envs.base:env_reward`):
what an environment example's notebook.yaml lists as its lab reward"""

EnvFactory = Callable[[], Environment]
"""a class or zero-argument callable that makes one episode's Environment"""


@dataclass(frozen=True)
class SharedEnvironment:
    """An EnvFactory whose one instance serves every episode (the ToolSet's stateless tools): the
    loop neither makes it off the event loop, nor bounds, resets, keeps open or closes it."""

    instance: Environment

    def __call__(self) -> Environment:
        return self.instance
