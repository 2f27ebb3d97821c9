"""The agent loop: one multi-turn trajectory as one async task.

generate -> parse -> call tools (in parallel) -> append the tool turn -> repeat, until the model
answers without a call, the turn limit, or the token budget. Each trajectory runs on its own, so
while one waits for a tool the engine serves the others: there is no barrier across trajectories
(rollout/groups.py runs many of them at once).

Token ids follow rollout/tokens.py: the engine's ids are kept as sampled (loss mask 1), everything
the loop adds (tool responses, the next assistant header) is a masked delta.

What differs between model families (the parser, the reasoning markers, the token that ends a turn,
the special tokens decoding keeps, the template's history rewriting) comes from one `ChatFormat`
(rlfactory_nb/chat/), named or read off the tokenizer's template (`chat_format="auto"`).

A trajectory started with a `SampleId` (what the trainer's rollouts pass) seeds each turn's request
from that id and the turn index (rollout/seeds.py), so it samples the same tokens however the
engine schedules it; without one, requests keep the agent's `sampling.seed` (None: the engine's own
generator).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from rlfactory_nb.chat import ChatFormat, format_error_for_model, get_parser, resolve_chat_format
from rlfactory_nb.engines.base import Engine, SamplingParams
from rlfactory_nb.errors import DriftError
from rlfactory_nb.rollout.seeds import SampleId
from rlfactory_nb.rollout.tokens import DriftMode, delta_ids, drift_check, prompt_ids, prompt_opens
from rlfactory_nb.types import FinishReason, Message, ToolResult, Trajectory, Turn

log = logging.getLogger(__name__)


@dataclass
class _Progress:
    """The growing trajectory, kept apart from the finished record."""

    ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]

    def add(self, ids: Sequence[int], sampled: bool, logprobs: Sequence[float] = ()) -> None:
        self.response_ids.extend(ids)
        self.loss_mask.extend([1 if sampled else 0] * len(ids))
        self.logprobs.extend(logprobs)

    @property
    def all_ids(self) -> list[int]:
        return self.ids + self.response_ids


class Agent:
    """Runs trajectories of `policy` (or of an engine: with its tokenizer, or one given) with `tools`."""

    def __init__(
        self,
        policy: Any,
        tools: Any = None,
        parser: str | Any | None = None,
        max_turns: int = 4,
        max_new_tokens: int = 128,
        max_total_tokens: int = 1024,
        sampling: SamplingParams | None = None,
        engine: Engine | None = None,
        tokenizer: Any = None,
        enable_thinking: bool = False,
        drift: DriftMode = "warn",
        chat_format: str | ChatFormat = "auto",
    ):
        self.policy = policy
        # Without a policy, an engine on the cluster lends the kernel's tokenizer it carries.
        self.tokenizer = tokenizer or (policy.tokenizer if policy is not None else getattr(engine, "tokenizer", None))
        if self.tokenizer is None:
            raise ValueError("Agent needs a tokenizer: pass policy=, tokenizer=, or an engine from cluster.engine()")
        self.tools = tools
        self.chat_format = resolve_chat_format(chat_format, self.tokenizer)
        markers = self.chat_format.reasoning
        self.starts_in_reasoning = markers is not None and prompt_opens(self.tokenizer, markers.open, enable_thinking)
        """the generation prompt pre-fills the reasoning opener: each turn's text starts inside it"""
        if parser is None:
            self.parser = self.chat_format.new_parser(starts_in_reasoning=self.starts_in_reasoning)
        else:  # a parser by name or object in place of the family's (`rollout.parser`)
            self.parser = get_parser(parser) if isinstance(parser, str) else parser
        self.max_turns = max_turns
        self.max_total_tokens = max_total_tokens
        self.sampling = replace(sampling or SamplingParams(), max_new_tokens=max_new_tokens)
        self._engine = engine
        self.enable_thinking = enable_thinking
        self.drift = drift
        self.drift_count = 0
        """rollouts whose ids differ from a full render in a way the template does not explain"""
        self.expected_drift_count = 0
        """rollouts that differ only by the empty think blocks the family's template drops (by design)"""

    @classmethod
    def from_config(
        cls,
        cfg: Any,
        policy: Any,
        tools: Any = None,
        *,
        engine: Engine | None = None,
        temperature: float | None = None,
        drift: DriftMode | None = None,
    ) -> Agent:
        """The agent a RunConfig describes (its `rollout` section): what training, `rf.evaluate` and
        the notebooks all build, so a notebook's rollouts match the trainer's. `temperature`
        replaces the config's (0: greedy)."""
        rollout = cfg.rollout
        temperature = rollout.temperature if temperature is None else temperature
        return cls(
            policy,
            tools,
            parser=rollout.parser,
            chat_format=rollout.chat_format,
            max_turns=rollout.max_turns,
            max_new_tokens=rollout.max_new_tokens,
            max_total_tokens=rollout.max_total_tokens,
            sampling=SamplingParams(temperature=temperature, top_p=rollout.top_p if temperature else 1.0),
            engine=engine,
            drift=drift or rollout.drift_check,
        )

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = self.policy.engine("hf")
        return self._engine

    def tool_schemas(self) -> list[dict] | None:
        return [spec.to_openai() for spec in self.tools.specs] if self.tools else None

    def start(
        self, messages: Sequence[Message], metadata: dict[str, Any] | None = None, sample_id: SampleId | None = None
    ) -> AgentSession:
        """A trajectory that advances one turn per `await session.step()` (the RolloutStepper's view)."""
        return AgentSession(self, messages, metadata, sample_id)

    async def rollout(
        self, messages: Sequence[Message], metadata: dict[str, Any] | None = None, sample_id: SampleId | None = None
    ) -> Trajectory:
        """Run one trajectory from `messages` (the prompt) to its end; `sample_id` seeds its requests."""
        return await self.start(messages, metadata, sample_id).run()

    async def _generate(self, traj: Trajectory, progress: _Progress, budget: int, seed: int | None) -> Turn:
        sampling = replace(
            self.sampling,
            max_new_tokens=min(self.sampling.max_new_tokens, budget),
            seed=self.sampling.seed if seed is None else seed,
        )
        started = time.perf_counter()
        generation = await self.engine.generate(progress.all_ids, sampling)
        progress.add(generation.token_ids, sampled=True, logprobs=generation.logprobs)
        text = self.chat_format.decode(self.tokenizer, generation.token_ids)
        parsed = self.parser.parse(text)
        reasoning, outside = self.chat_format.split_reasoning(text, self.starts_in_reasoning)
        turn = Turn(
            text=text,
            num_tokens=len(generation.token_ids),
            calls=parsed.calls,
            parse_errors=parsed.errors,
            finish_reason=generation.finish_reason,
            generate_s=time.perf_counter() - started,
            policy_version=generation.policy_version,
            reasoning=reasoning,
            answer=outside,
            calls_in_reasoning=getattr(parsed, "calls_in_reasoning", 0),
        )
        traj.turns.append(turn)
        traj.messages.append(self.chat_format.assistant_message(text, parsed.calls, reasoning))
        return turn

    async def _call_tools(self, turn: Turn) -> list[Message]:
        """Run the turn's calls in parallel; parse errors are answered too, so the model learns."""
        started = time.perf_counter()
        if turn.calls and self.tools is None:
            results = [ToolResult(c.name, "unknown_tool", f"no tools are available; cannot call {c.name!r}") for c in turn.calls]
        elif turn.calls:
            results = await self.tools.call_many([(call.name, call.arguments) for call in turn.calls])
        else:
            results = []
        turn.results = list(results)
        turn.tools_s = time.perf_counter() - started
        answers = [(result.content, call) for result, call in zip(results, turn.calls)]
        answers += [(format_error_for_model(error), None) for error in turn.parse_errors]
        message = self.chat_format.tool_message
        return [message(content, call, index) for index, (content, call) in enumerate(answers)]

    def _check_drift(self, traj: Trajectory, tools: list[dict] | None) -> None:
        """Record the drift check in `traj.metadata` (`drift_position`, `dropped_think_blocks`) and
        count it. Qwen3's expected non-thinking drift is counted in `expected_drift_count` and shown by
        the trajectory view; other drift raises (strict) or warns once per agent (warn)."""
        if self.drift == "off":
            return
        found = drift_check(
            self.tokenizer,
            traj.prompt_ids + traj.response_ids,
            traj.messages,
            tools,
            self.enable_thinking,
            drops_past_reasoning=self.chat_format.drops_past_reasoning,
            rendered_as=self.chat_format.rendered_as_ids(self.tokenizer),
            unrendered_stop_ids=self.chat_format.end_of_turn_ids(self.tokenizer) if self.chat_format.turn_end_opens_next else (),
            dropped_span=self.chat_format.past_reasoning_ids(self.tokenizer),
        )
        traj.metadata["drift_position"] = found.position
        traj.metadata["dropped_think_blocks"] = found.dropped_think_blocks
        traj.metadata["rewritten_tokens"] = found.rewritten_tokens
        if found.ok:
            return
        traj.metadata["drift_tokens"] = found.differing()
        message = (
            f"trajectory {traj.id}: rollout ids differ from a full chat-template render at position "
            f"{found.position}: {found.differing()}, in {found.rollout_context!r} "
            "(training uses the rollout ids; see docs/decisions.md on template drift)"
        )
        if self.drift == "strict":
            raise DriftError(message)
        if found.expected:
            self.expected_drift_count += 1
            return
        self.drift_count += 1
        if self.drift_count == 1:
            log.warning("%s; further drift is counted in agent.drift_count", message)


class AgentSession:
    """One trajectory in progress. `step` runs one assistant turn and the tool calls it makes;
    `Agent.rollout` is `run`, i.e. `step` until `done`, so both paths share every rule."""

    def __init__(
        self,
        agent: Agent,
        messages: Sequence[Message],
        metadata: dict[str, Any] | None = None,
        sample_id: SampleId | None = None,
    ):
        self.agent = agent
        self.sample_id = sample_id
        messages = [dict(m) for m in messages]
        self._tools = agent.tool_schemas()
        self._progress = _Progress(prompt_ids(agent.tokenizer, messages, self._tools, agent.enable_thinking), [], [], [])
        self.trajectory = Trajectory(
            prompt_ids=self._progress.ids,
            response_ids=self._progress.response_ids,
            loss_mask=self._progress.loss_mask,
            logprobs=self._progress.logprobs,
            messages=messages,
            metadata=dict(metadata or {}),
            id=(metadata or {}).get("id") or uuid.uuid4().hex[:12],
        )
        self.done = False
        self._lock: asyncio.Lock | None = None

    async def step(self) -> Turn | None:
        """Generate the next assistant turn and answer its tool calls; None when the token budget was
        already spent. Sets `done` (and the trajectory's finish_reason) when the trajectory has ended.

        A step on an ended trajectory returns None. Steps never overlap: a step requested while one runs (a second button click while a tool call
        is in flight) waits for it. Overlapping, it would generate from ids that still lack the tool
        response, which the real-browser test caught."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.done:
                return None
            return await self._step()

    async def _step(self) -> Turn | None:
        agent, traj, progress = self.agent, self.trajectory, self._progress
        if traj.num_turns >= agent.max_turns:
            return self._finish("max_turns", None)
        budget = agent.max_total_tokens - len(progress.all_ids)
        if budget <= 0:
            return self._finish("length", None)
        seed = self.sample_id.turn_seed(traj.num_turns) if self.sample_id is not None else None
        turn = await agent._generate(traj, progress, budget, seed)
        if turn.finish_reason == "length":
            return self._finish("length", turn)
        if not turn.calls and not turn.parse_errors:
            return self._finish("stop", turn)
        if traj.num_turns >= agent.max_turns:
            # The model would never read these results: no tool time, and no masked feedback tokens
            # that every later forward pass (training, reference, recompute) would have to carry.
            return self._finish("max_turns", turn)
        tool_messages = await agent._call_tools(turn)
        delta = delta_ids(agent.tokenizer, tool_messages, agent.enable_thinking, agent.chat_format, traj.messages[-1])
        if len(progress.all_ids) + len(delta) >= agent.max_total_tokens:
            return self._finish("length", turn)
        progress.add(delta, sampled=False)
        traj.messages.extend(tool_messages)
        return turn

    async def run(self) -> Trajectory:
        """Step until the trajectory ends; returns it."""
        while not self.done:
            await self.step()
        return self.trajectory

    def _finish(self, reason: FinishReason, turn: Turn | None) -> Turn | None:
        self.trajectory.finish_reason = reason
        self.done = True
        self.agent._check_drift(self.trajectory, self._tools)
        return turn
