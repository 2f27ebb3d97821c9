"""TRL-style environment classes, brought unchanged: `env=trl_env(MyEnv)`.

TRL's GRPOTrainer takes `environment_factory=MyEnv`: a class made once per rollout with no arguments,
whose public methods (each with a docstring in the Google style) are the model's tools, whose
`reset(**row)` receives the dataset row's columns and may return a string that is appended to the
prompt's last user message, and whose state a reward function reads (`environments=` in TRL).

This adapter gives such a class the rlfactory `Environment` shape without a line changed in it:

    class Counter:                       # written for TRL
        def reset(self, **kwargs): self.n = 0
        def increment(self, a: int) -> int:
            '''Increment the counter.

            Args:
                a: how much to add
            '''
            self.n += a
            return self.n

    agent = rf.Agent(policy, env=trl_env(Counter, reward=lambda env: float(env.n == 3)))
    agent = rf.Agent(policy, env=Counter)  # the same: a TRL-style class is wrapped (envs/factory.py)

The episode's own reward is, in this order: `reward(inner)` if given; the class's `get_reward()`, the
method TRL reserves for an environment that owns its reward (never a tool; it may be async); its
`reward()`. A reward function sees the TRL object as `sample.env.inner`. The adapter imports nothing
from TRL: the convention is plain Python.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from rlfactory_nb.envs.base import EnvFactory, Environment, Reset
from rlfactory_nb.errors import ArgumentTypeError
from rlfactory_nb.tools.python import PythonTool, tool
from rlfactory_nb.types import Message

NOT_TOOLS = frozenset({"reset", "close", "get_reward"})
"""public methods that are part of the convention, never offered to the model (TRL reserves `reset`
and `get_reward`)"""
OWN_REWARDS = ("get_reward", "reward")
"""the methods whose value is the episode's reward when trl_env is given no `reward=`, first found wins"""


def trl_env(
    factory: Callable[[], Any], *, reward: Callable[[Any], float | dict[str, float] | None] | None = None
) -> EnvFactory:
    """An Environment factory over a TRL-style class (or zero-argument factory).

    `reward(inner)`, if given, scores the final state of the TRL object; otherwise the object's own
    zero-argument `get_reward()` (TRL's) or `reward()` method, if it has one, is used (and is then
    not a tool)."""
    if not callable(factory):
        raise ArgumentTypeError(f"trl_env: expected a class or zero-argument factory, got {factory!r}")
    return functools.partial(TRLEnvironment, factory, reward)


class TRLEnvironment(Environment):
    """One TRL-style object per episode; its documented public methods are the episode's tools."""

    def __init__(self, factory: Callable[[], Any], reward: Callable[[Any], Any] | None = None):
        self.inner = factory()
        self._reward_fn = reward
        self._methods = methods_as_tools(self.inner, skip=NOT_TOOLS | ({"reward"} if reward is None else set()))

    def _tools(self) -> dict[str, PythonTool]:
        # the base class's tool_specs and call_tools read the episode's tools from here
        return self._methods

    def reset(self, row: dict[str, Any], *, seed: int) -> Reset | None:
        reset = getattr(self.inner, "reset", None)
        if reset is None:
            return None
        opening = reset(**accepted_kwargs(reset, row_columns(row, seed)))
        if not opening:
            return None
        return Reset(messages=appended_to_last_user(row.get("messages", []), str(opening)), replace_prompt=True)

    def reward(self) -> float | dict[str, float] | None:
        if self._reward_fn is not None:
            return self._reward_fn(self.inner)
        for name in OWN_REWARDS:
            own = getattr(self.inner, name, None)
            if callable(own):
                return own()  # a coroutine from an async get_reward is awaited by the episode
        return None

    def state(self) -> dict[str, Any] | None:
        public = {k: v for k, v in vars(self.inner).items() if not k.startswith("_")}
        return {k: v for k, v in public.items() if isinstance(v, (str, int, float, bool, type(None), list, dict))}

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()


def methods_as_tools(instance: Any, skip: frozenset[str] | set[str] = NOT_TOOLS) -> dict[str, PythonTool]:
    """The documented public methods of `instance` as tools bound to it, by name (TRL's rule: a
    method without a docstring is not a tool, since the model would be told nothing about it)."""
    found: dict[str, PythonTool] = {}
    for name in dir(type(instance)):
        if name.startswith("_") or name in skip:
            continue
        if not inspect.isfunction(inspect.getattr_static(instance, name)):
            continue  # properties and attributes are read by nobody here: no side effects
        method = getattr(instance, name)
        if not inspect.getdoc(method):
            continue
        found[name] = tool(method, name=name)
    return found


def row_columns(row: dict[str, Any], seed: int) -> dict[str, Any]:
    """What `reset(**row)` receives: the row's columns but its prompt, plus the episode's seed."""
    columns = {k: v for k, v in row.items() if k not in ("messages", "prompt")}
    columns.setdefault("seed", seed)
    return columns


def accepted_kwargs(fn: Callable[..., Any], columns: dict[str, Any]) -> dict[str, Any]:
    """The columns `fn` accepts: all of them with **kwargs, else only its named parameters."""
    parameters = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return dict(columns)
    names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in columns.items() if k in names}


def appended_to_last_user(messages: Sequence[Message], text: str) -> list[Message]:
    """The prompt with `text` appended to its last user message (a new user message if it has none).

    >>> appended_to_last_user([{"role": "user", "content": "Play."}], "Board: X..")
    [{'role': 'user', 'content': 'Play.\\n\\nBoard: X..'}]
    """
    out = [dict(m) for m in messages]
    for message in reversed(out):
        if message["role"] == "user":
            message["content"] = f"{message['content']}\n\n{text}" if message["content"] else text
            return out  # type: ignore[return-value]
    return [*out, {"role": "user", "content": text}]  # type: ignore[list-item]
