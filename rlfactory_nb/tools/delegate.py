"""Other models and other agents as tools: `model_tool` and `agent_tool`.

A tool is anything the trained model does not generate itself: a program, but also another model (a
large one summarising a document) or another agent (a literature-review agent). Both kinds here are
PythonTools, so a ToolSet runs them next to MCP servers under the same timeouts, concurrency limits
and cache, and `launch(..., tools=[...])` takes them like `@rf.tool` functions:

    summarise = model_tool("summarise", "Summarise a text.", engine=cluster.engine("Qwen/Qwen3-8B"),
                           system_prompt="Summarise in three sentences.")
    research = agent_tool(rf.Agent(helper_policy, search_tools, max_turns=6), "research",
                          "Research a question with web search; returns a short report.")
    tools = rf.ToolSet.from_functions(summarise, research, timeout_s=120)

`model_tool`'s call is one chat completion, through the chat client the LLM judge uses
(`rlfactory_nb.engines.chat_client`): the model's own chat template renders it, and a down endpoint
comes back to the policy as an error result, not cached.

`agent_tool`'s call is a whole rollout of another agent. Its tokens are not trained: the policy's
trajectory holds only the agent's answer, as a tool response (loss mask 0); the agent's whole
transcript is kept in `ToolResult.details["trajectory"]` (`Trajectory.from_dict(...).view()` opens
it). An agent that loops is bounded twice: by its own `max_turns`, and by the tool's timeout
(`timeout_s` of the ToolSet or the tool), which cancels the rollout *and every agent-tool call it
started*: the ToolSet shields a running call from a cancelled caller (others may share it), so
without that an agent that can reach itself kept recursing after its call had come back "timeout"
(about 90 engine requests in 6 s). Delegation is also bounded in depth: an agent tool called
`max_depth` agent-tool calls deep is refused (an error result the model reads, never cached), and
`tool.fn.stats` counts calls, the deepest depth reached and the refusals. The agent is any object with
an async `rollout(messages)` returning a Trajectory (`rf.Agent` is one), so this module needs nothing
from the rollout layer above it.

A model tool whose engine died (`EngineActorDied`) fails the call loudly, as the judge does: the
ToolSet lets it through (no result, nothing cached), so the step fails naming the engine actor,
instead of training on "error" results until the run ends.
"""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlfactory_nb.engines.base import Engine
from rlfactory_nb.engines.chat_client import chat_client
from rlfactory_nb.engines.chat_types import ChatSettings
from rlfactory_nb.errors import ConfigError, ServerUnavailable
from rlfactory_nb.tools.python import PythonTool, ToolReply
from rlfactory_nb.types import Message, Sample, Trajectory


class RolloutAgent(Protocol):
    """What `agent_tool` needs of an agent (`rf.Agent` has it)."""

    async def rollout(self, messages: list[Message]) -> Trajectory: ...


def _text_schema(field: str, description: str) -> dict[str, Any]:
    """One required string argument: what a model or an agent is asked."""
    return {
        "type": "object",
        "properties": {field: {"type": "string", "description": description}},
        "required": [field],
        "additionalProperties": False,
    }


def model_tool(
    name: str,
    description: str,
    *,
    engine: Engine | None = None,
    base_url: str | None = None,
    model: str | None = None,
    tokenizer: Any = None,
    system_prompt: str | None = None,
    api_key: str | None = None,
    max_tokens: int = 1024,
    temperature: float = 0.0,
    max_concurrency: int = 8,
    timeout_s: float = 60.0,
    max_retries: int = 3,
) -> PythonTool:
    """A tool whose call (`{"prompt": ...}`) is one chat completion by another model: `engine` (a
    `cluster.engine(...)` handle or any engine, with its tokenizer or `tokenizer`) or the endpoint at
    `base_url` serving `model`. `system_prompt` comes first in every request. `timeout_s` bounds one
    attempt, `max_retries` the HTTP attempts repeated (the ToolSet's timeout bounds the whole call). The client is `tool.fn.client` (its
    `usage`: requests, tokens, seconds)."""
    settings = ChatSettings(
        max_concurrency, timeout_s, max_retries, temperature=temperature, max_tokens=max_tokens
    )
    client = chat_client(
        engine=engine, base_url=base_url, model=model, tokenizer=tokenizer, api_key=api_key, settings=settings
    )
    system: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []

    async def complete(prompt: str) -> str:
        reply = await client.complete([*system, {"role": "user", "content": prompt}])
        return reply.text

    complete.client = client  # type: ignore[attr-defined]
    schema = _text_schema("prompt", "what to ask the model")
    return PythonTool(complete, name, description, schema)


class DelegationRefused(ServerUnavailable):
    """An agent tool called past its `max_depth`: the model reads the message; a refusal depends on
    where the call stands, not on its arguments, so it is never cached (a ServerUnavailable)."""


@dataclass
class DelegationStats:
    """What an agent tool counts: calls run, the deepest nesting reached, calls refused for depth."""

    calls: int = 0
    deepest: int = 0
    refused: int = 0


@dataclass
class _Scope:
    """One running agent-tool call: its depth, and the tasks running agent-tool calls it started."""

    depth: int
    children: set[asyncio.Task] = field(default_factory=set)


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("rlfactory_nb_delegation", default=None)
"""the agent-tool call this code runs under; tasks the ToolSet starts inherit it (context copies)"""


def agent_tool(agent: RolloutAgent, name: str, description: str, max_depth: int = 3) -> PythonTool:
    """A tool whose call (`{"task": ...}`) is a whole rollout of `agent` from the task as its user
    message; the model reads the agent's final answer, `details["trajectory"]` keeps its transcript.
    `max_depth`: how many agent-tool calls may be nested, this one included, counting every agent
    tool (see the module docstring)."""
    if not isinstance(max_depth, int) or max_depth < 1:
        raise ConfigError(f"agent_tool {name!r}: max_depth must be a whole number >= 1, got {max_depth!r}")
    stats = DelegationStats()

    async def delegate(task: str) -> ToolReply:
        parent = _SCOPE.get()
        depth = (parent.depth if parent else 0) + 1
        if depth > max_depth:
            stats.refused += 1
            raise DelegationRefused(
                f"agent {name} was not run: {max_depth} agent-tool call(s) are already nested here "
                f"(agent_tool max_depth={max_depth}); answer without delegating further"
            )
        stats.calls += 1
        stats.deepest = max(stats.deepest, depth)
        trajectory = await _run_in_scope(agent, task, parent, depth)
        answer = Sample.from_trajectory(trajectory).final_answer if trajectory.finish_reason == "stop" else ""
        if not answer:  # cut off (max_turns, length) or silent: its last text is no answer
            answer = f"agent {name} gave no answer ({trajectory.finish_reason} after {trajectory.num_turns} turn(s))"
        return ToolReply(answer, {"agent": name, "depth": depth, "trajectory": trajectory.to_dict()})

    delegate.agent = agent  # type: ignore[attr-defined]
    delegate.stats = stats  # type: ignore[attr-defined]
    return PythonTool(delegate, name, description, _text_schema("task", "the task for the agent, in full"))


async def _run_in_scope(agent: RolloutAgent, task: str, parent: _Scope | None, depth: int) -> Trajectory:
    """The agent's rollout under a new scope; cancelled (a timeout), it cancels the agent-tool calls
    the rollout started, which the ToolSet's shield would otherwise leave running."""
    me = asyncio.current_task()
    scope = _Scope(depth)
    if parent is not None and me is not None:
        parent.children.add(me)
    token = _SCOPE.set(scope)
    try:
        return await agent.rollout([{"role": "user", "content": task}])
    except asyncio.CancelledError:
        for child in list(scope.children):
            if child is not me:
                child.cancel()
        raise
    finally:
        _SCOPE.reset(token)
        if parent is not None and me is not None:
            parent.children.discard(me)
