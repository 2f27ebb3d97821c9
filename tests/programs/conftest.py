"""Shared pieces of the agent-program tests: a replaying engine (the model's part, when the tiny
model's own replies are too unreliable for a check), the calculator tool, and a mask audit.

The engine is a local stand-in until the settings issue's public `rlfactory_nb.engines.testing`
lands; the endpoint, the frameworks and the token assembly under test are all real."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

import rlfactory_nb as rf
from rlfactory_nb.chat import resolve_chat_format
from rlfactory_nb.engines.base import Generation, SamplingParams
from rlfactory_nb.programs import AgentProgram
from rlfactory_nb.rollout.tokens import drift_check
from rlfactory_nb.types import Trajectory


def call_text(name: str, arguments: dict[str, Any]) -> str:
    """A Qwen3 tool-call reply, as the tiny model writes one."""
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


class ReplayEngine:
    """Replies with `texts` in order (the last repeats), each followed by the family's end-of-turn
    token; keeps every prompt and sampling it was asked with."""

    def __init__(
        self, tokenizer: Any, texts: Sequence[str], chat_format: str = "auto", delay_s: float = 0.0, by_turn: bool = False
    ):
        """`by_turn`: pick the text by the assistant turns already in the prompt, not by call order
        (several episodes at once, each replaying `texts` from the start)."""
        self.tokenizer, self.texts, self.delay_s, self.by_turn = tokenizer, list(texts), delay_s, by_turn
        self.end = tokenizer.convert_tokens_to_ids(resolve_chat_format(chat_format, tokenizer).turn_end)
        self.stop_token_ids = (self.end,)
        self.prompts: list[list[int]] = []
        self.samplings: list[SamplingParams] = []
        self.sampled: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        index = self.tokenizer.decode(prompt_ids).count("<|im_start|>assistant") - 1 if self.by_turn else len(self.prompts)
        text = self.texts[min(index, len(self.texts) - 1)]
        self.prompts.append(list(prompt_ids))
        self.samplings.append(sampling)
        ids = self.tokenizer.encode(text, add_special_tokens=False)[: sampling.max_new_tokens - 1] + [self.end]
        self.sampled.append(ids)
        return Generation(ids, [-0.25] * len(ids), "stop", policy_version=0)

    async def update_weights(self, state_dict: Any, version: int | None = None) -> None:
        pass

    async def close(self) -> None:
        pass


@rf.tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    allowed = set("0123456789+-*/(). ")
    if not set(expression) <= allowed:
        return "error: only arithmetic"
    left, _, right = expression.partition("+")
    return str(int(left) + int(right)) if right else expression


CALCULATOR_SCHEMA = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object", "properties": {"expression": {"type": "string"}}, "additionalProperties": False,
            "required": ["expression"],
        },
    },
}


@pytest.fixture
def replay(tiny_policy):
    """`replay(texts, fn, **options)` -> (program, engine): `fn` served by a ReplayEngine."""

    def make(texts: Sequence[str], fn: Any, **options: Any) -> tuple[AgentProgram, ReplayEngine]:
        engine = ReplayEngine(tiny_policy.tokenizer, texts)
        return AgentProgram(fn, engine=engine, tokenizer=tiny_policy.tokenizer, **options), engine

    return make


def audit_masks(traj: Trajectory, engine: ReplayEngine, tokenizer: Any, tools: list[dict] | None = None) -> None:
    """loss_mask is 1 exactly on the ids the engine sampled, in order, with their log-probs; and the
    ids equal a full chat-template render of the history, except where the template drops past
    empty think blocks by design (the rf.Agent's drift rule)."""
    segments = [*traj.metadata.get("segments", []), {"response_ids": traj.response_ids, "loss_mask": traj.loss_mask}]
    sampled = [i for s in segments for i, m in zip(s["response_ids"], s["loss_mask"]) if m]
    assert sampled == [i for ids in engine.sampled for i in ids]
    assert len(traj.loss_mask) == len(traj.response_ids) and sum(traj.loss_mask) == len(traj.logprobs)
    fmt = resolve_chat_format("auto", tokenizer)
    found = drift_check(
        tokenizer, traj.prompt_ids + traj.response_ids, traj.messages, tools, drops_past_reasoning=fmt.drops_past_reasoning
    )
    assert found.ok or found.expected, f"ids differ from a full render: {found}"
