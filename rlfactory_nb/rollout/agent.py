"""The agent loop: one multi-turn trajectory as one async task, running an Environment.

reset -> generate -> parse -> the environment's tools (in parallel for a ToolSet) or, for an answer
without a call, the environment's `respond` (a user, a game) -> append its turn -> repeat, until the
model or the environment ends the episode, the turn limit, or the token budget. Each trajectory runs
on its own, so while one waits for a tool or a user the engine serves the others: there is no
barrier across trajectories (rollout/groups.py runs many of them at once).

There is one loop. Without `env=`, the environment is the agent's ToolSet (`ToolSetEnvironment`:
stateless tools shared by every episode, the episode ends at the first answer without a call), so
the RolloutStepper, the RewardLab, `rf.evaluate` and training all run an Environment. With `env=`
(a class or factory), each trajectory gets its own instance (rollout/episode.py: made off the loop,
bounded, timed out, always closed, its failures recorded as data); the rollout then takes a dataset
row, whose columns `reset` sees.

Token ids follow rollout/tokens.py: the engine's ids are kept as sampled (loss mask 1), everything
the loop adds (tool responses, the next assistant header) is a masked delta.

What differs between model families (the parser, the reasoning markers, the token that ends a turn,
the special tokens decoding keeps, the template's history rewriting) comes from one `ChatFormat`
(rlfactory_nb/chat/), named or read off the tokenizer's template (`chat_format="auto"`).

A trajectory started with a `SampleId` (what the trainer's rollouts pass) seeds each turn's request
from that id and the turn index (seeds.py), so it samples the same tokens however the
engine schedules it; without one, requests keep the agent's `sampling.seed` (None: the engine's own
generator).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rlfactory_nb.chat import ChatFormat, format_error_for_model, get_parser, resolve_chat_format
from rlfactory_nb.config import DEFAULTS
from rlfactory_nb.engines.base import Engine, SamplingParams
from rlfactory_nb.envs.base import ToolSetEnvironment
from rlfactory_nb.envs.factory import env_factory
from rlfactory_nb.errors import ConfigError, DriftError
from rlfactory_nb.rollout.episode import Episode
from rlfactory_nb.rollout.episodes import EpisodeLimits, Episodes, PlaysEpisodes
from rlfactory_nb.rollout.session import AgentSession, Progress, Prompt
from rlfactory_nb.rollout.settings import RolloutSettings
from rlfactory_nb.rollout.tokens import DriftMode, drift_check, prompt_opens, thinks_by_default
from rlfactory_nb.seeds import EnvSeed, SampleId
from rlfactory_nb.tools.config import ToolSetSettings
from rlfactory_nb.types import Message, ToolSpec, Trajectory, Turn

__all__ = ["Agent", "AgentSession"]

log = logging.getLogger(__name__)


class Agent(PlaysEpisodes):
    """Runs trajectories of `policy` (or of an engine: with its tokenizer, or one given) with `tools`,
    or with one `env` instance per trajectory (`env=Shop`, a factory, or "module:Class").

    `env_timeout_s` bounds the time one episode spends in its steps (`rollout.env_timeout_s`: an
    hour unless set; None: no bound); `max_open_envs` the episodes running at once (an environment
    may hold a process or a database each); `max_text_chars` the characters of any one text an
    environment adds (default: the ToolSet's `max_result_chars`). `env_seed`: whether the members of
    a group reset with one seed (same task, "group") or each with its own ("sample"). A run builds
    its Agent from its `RolloutSettings` instead (`from_settings`)."""

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
        enable_thinking: bool | None = False,
        drift: DriftMode = "warn",
        chat_format: str | ChatFormat = "auto",
        env: Any = None,
        env_timeout_s: float | None = DEFAULTS.rollout.env_timeout_s,
        max_open_envs: int | None = None,
        max_text_chars: int | None = None,
        env_seed: EnvSeed = DEFAULTS.rollout.env_seed,
    ):
        toolset_limit = getattr(getattr(tools, "settings", None), "max_result_chars", None)
        limits = EpisodeLimits(
            max_turns, max_new_tokens, max_total_tokens, max_text_chars or toolset_limit or ToolSetSettings.max_result_chars,
            env_timeout_s, max_open_envs,
        )
        settings = RolloutSettings(
            chat_format, parser, enable_thinking, drift, limits, replace(sampling or SamplingParams(), max_new_tokens=max_new_tokens),
            env, env_seed,
        )
        self._configure(settings, policy, tools, engine, tokenizer)

    @classmethod
    def from_settings(
        cls, settings: RolloutSettings, policy: Any, tools: Any = None, *, engine: Engine | None = None, tokenizer: Any = None,
    ) -> Agent:
        """The agent that plays by `settings` (what a run builds: rollout/settings.py)."""
        agent = cls.__new__(cls)
        agent._configure(settings, policy, tools, engine, tokenizer)
        return agent

    @classmethod
    def from_config(
        cls, cfg: Any, policy: Any, tools: Any = None, *, engine: Engine | None = None, temperature: float | None = None,
        drift: DriftMode | None = None, env: Any = None, trained_thinking: bool | None = None,
    ) -> Agent:
        """The agent a RunConfig describes (`RolloutSettings.from_config`, whose arguments these are)."""
        settings = RolloutSettings.from_config(cfg, trained_thinking=trained_thinking, temperature=temperature, drift=drift, env=env)
        return cls.from_settings(settings, policy, tools, engine=engine)

    def _configure(self, settings: RolloutSettings, policy: Any, tools: Any, engine: Engine | None, tokenizer: Any) -> None:
        self.settings = settings
        self.policy = policy
        # Without a policy, an engine on the cluster lends the kernel's tokenizer it carries.
        self.tokenizer = tokenizer or (policy.tokenizer if policy is not None else getattr(engine, "tokenizer", None))
        if self.tokenizer is None:
            raise ConfigError("Agent needs a tokenizer: pass policy=, tokenizer=, or an engine from cluster.engine()")
        self.tools = tools
        limits = settings.limits
        self.max_text_chars = limits.max_text_chars
        """the most characters of any one text entering a trajectory from outside the model
        (rollout/guard.py `admitted`): the ToolSet's `max_result_chars` unless given"""
        self.chat_format = resolve_chat_format(settings.chat_format, self.tokenizer)
        enable_thinking = thinks_by_default(self.tokenizer) if settings.enable_thinking is None else settings.enable_thinking
        markers = self.chat_format.reasoning
        self.starts_in_reasoning = markers is not None and prompt_opens(self.tokenizer, markers.open, enable_thinking)
        """the generation prompt pre-fills the reasoning opener: each turn's text starts inside it"""
        parser = settings.parser
        if parser is None:
            self.parser = self.chat_format.new_parser(starts_in_reasoning=self.starts_in_reasoning)
        else:  # a parser by name or object in place of the family's (`rollout.parser`)
            self.parser = get_parser(parser) if isinstance(parser, str) else parser
        self.max_turns = limits.max_turns
        self.max_total_tokens = limits.max_total_tokens
        self.sampling = replace(settings.sampling, max_new_tokens=limits.max_new_tokens)
        self._engine = engine
        self.enable_thinking = enable_thinking
        self.drift = settings.drift
        self.drift_count = 0
        """rollouts whose ids differ from a full render in a way the template does not explain"""
        self.expected_drift_count = 0
        """rollouts that differ only by the empty think blocks the family's template drops (by design)"""
        factory = env_factory(settings.env) if settings.env is not None else ToolSetEnvironment.shared_by(tools)
        self.episodes = Episodes(factory, limits)
        """how each episode's environment is made (the ToolSet's, shared, by default), the bounds,
        the counters, and the episodes kept open for the reward functions"""
        self.env_seed: EnvSeed = settings.env_seed
        """what a named trajectory's reset seed is shared by (seeds.py): its group, or nothing"""

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = self.policy.engine("hf")
        return self._engine

    def start(
        self,
        prompt: Prompt,
        metadata: dict[str, Any] | None = None,
        sample_id: SampleId | None = None,
        *,
        keep_open: bool = False,
    ) -> AgentSession:
        """A trajectory that advances one turn per `await session.step()` (the RolloutStepper's view).
        `prompt`: messages, or a dataset row (`{"messages": [...], **columns}`) whose columns land in
        the trajectory's metadata and which the environment's `reset` sees."""
        return AgentSession(self, prompt, metadata, sample_id, keep_open=keep_open)

    async def rollout(
        self,
        prompt: Prompt,
        metadata: dict[str, Any] | None = None,
        sample_id: SampleId | None = None,
        *,
        keep_open: bool = False,
    ) -> Trajectory:
        """Run one trajectory from `prompt` (messages or a dataset row) to its end; `sample_id` seeds
        its requests and its environment's reset. `keep_open`: leave the environment open after the
        episode (reward functions read it as `sample.env`) until `close_episodes`."""
        return await self.start(prompt, metadata, sample_id, keep_open=keep_open).run()

    async def generate(
        self, traj: Trajectory, progress: Progress, budget: int, seed: int | None, tools: Sequence[ToolSpec] = ()
    ) -> Turn:
        """One sampled turn, parsed with the episode's `tools` (their schemas type XML-style arguments)."""
        sampling = replace(
            self.sampling,
            max_new_tokens=min(self.sampling.max_new_tokens, budget),
            seed=self.sampling.seed if seed is None else seed,
        )
        started = time.perf_counter()
        generation = await self.engine.generate(progress.all_ids, sampling)
        progress.add(generation.token_ids, sampled=True, logprobs=generation.logprobs)
        text = self.chat_format.decode(self.tokenizer, generation.token_ids)
        parsed = self.parser.parse(text, tools=list(tools) or None)
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

    async def call_tools(self, turn: Turn, episode: Episode) -> list[Message]:
        """Run the turn's calls in the episode's environment (a ToolSet runs them in parallel); parse
        errors are answered too, so the model learns."""
        started = time.perf_counter()
        turn.results = await episode.call_tools(list(turn.calls), self.max_text_chars) if turn.calls else []
        turn.tools_s = time.perf_counter() - started
        answers = [(result.content, call) for result, call in zip(turn.results, turn.calls)]
        answers += [(format_error_for_model(error), None) for error in turn.parse_errors]
        message = self.chat_format.tool_message
        return [message(content, call, index) for index, (content, call) in enumerate(answers)]

    def check_drift(self, traj: Trajectory, tools: list[dict] | None) -> None:
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
