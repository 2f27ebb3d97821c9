"""`AgentSession`: one trajectory in progress, one step (assistant turn) at a time.

`Agent.rollout` is `session.run()`, i.e. `step()` until `done`, and the RolloutStepper calls `step()`
per click, so both share every rule. A step generates a turn, then hands the environment either the
turn's tool calls or, for an answer without a call, the turn itself (`respond`: a user's reply, a
game's move, or the end). Whatever comes back enters the ids as a masked delta (rollout/tokens.py),
for every model family alike.

The episode's environment is opened on the first step (made off the event loop and reset with the
row: rollout/episode.py) and closed when the trajectory ends, however it ends: an environment that
fails ends the trajectory with finish_reason "error" and `metadata["env_error"]` naming where; a
cancelled step closes it before the cancellation goes on.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.envs.base import Response
from rlfactory_nb.errors import DatasetError, EpisodeError
from rlfactory_nb.rollout.episode import env_error_record
from rlfactory_nb.rollout.tokens import delta_ids, prompt_ids
from rlfactory_nb.seeds import SampleId, episode_seed
from rlfactory_nb.types import FinishReason, Message, Trajectory, Turn

Prompt = Sequence[Message] | Mapping[str, Any]
"""what a rollout starts from: the prompt's messages, or a dataset row holding them as "messages\""""


def new_trajectory_id() -> str:
    """A trajectory's own id. Never a row's column: the members of a GRPO group, a retry and
    evaluation's sampled and greedy passes share a row, and everything keyed by trajectory (the
    episodes kept open for the rewards, the views, the reward runner's names) would merge them. The
    row's `id` stays in the metadata with its other columns."""
    return uuid.uuid4().hex[:16]


def split_prompt(prompt: Prompt, metadata: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[Message]]:
    """(the row `reset` sees, the prompt's messages). A row's columns other than "messages" and the
    given metadata form the row; messages alone make a row of just them. A row without messages (a
    task whose environment writes the prompt in `reset`) starts from none.

    >>> row, messages = split_prompt({"messages": [{"role": "user", "content": "hi"}], "goal": 3}, None)
    >>> row["goal"], messages[0]["content"]
    (3, 'hi')
    """
    if isinstance(prompt, Mapping):
        row = {**dict(prompt), **dict(metadata or {})}
        messages = prompt.get("messages", [])
    else:
        row = {"messages": list(prompt), **dict(metadata or {})}
        messages = prompt
    return row, [dict(message) for message in messages]  # type: ignore[misc]


@dataclass
class Progress:
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


class AgentSession:
    """One trajectory in progress of `agent` (a rollout.agent.Agent, which imports this module: its
    generation, tool calls and limits); see the module docstring."""

    def __init__(
        self,
        agent: Any,
        prompt: Prompt,
        metadata: dict[str, Any] | None = None,
        sample_id: SampleId | None = None,
        *,
        keep_open: bool = False,
    ):
        self.agent = agent
        self.sample_id = sample_id
        self.keep_open = keep_open
        self.row, messages = split_prompt(prompt, metadata)
        self._prompt = list(messages)
        """the row's own prompt messages: trusted data, rendered as they are (rollout/guard.py)"""
        columns = {key: value for key, value in self.row.items() if key != "messages"}
        if isinstance(prompt, Mapping):
            columns = {**columns, **dict(metadata or {})}
        self._progress = Progress([], [], [], [])
        self.trajectory = Trajectory(
            prompt_ids=self._progress.ids,
            response_ids=self._progress.response_ids,
            loss_mask=self._progress.loss_mask,
            logprobs=self._progress.logprobs,
            messages=messages,
            metadata=columns,
            id=new_trajectory_id(),
        )
        self.done = False
        self._tools: list[dict] | None = None
        self._specs: list = []
        self._spent_s = 0.0
        self._lock: asyncio.Lock | None = None
        self.episode = agent.episodes.new()
        self.opened = self.episode.shared  # the shared ToolSet: nothing to make, reset or close
        if self.opened:
            if not messages:
                raise DatasetError(f"a dataset row given to rollout needs a 'messages' column (or an env= whose reset writes the prompt); it has {sorted(self.row)}")
            self._begin()

    @property
    def env(self) -> Any:
        """The episode's Environment instance (None before the first step of a made-per-episode one)."""
        return self.episode.instance

    async def step(self) -> Turn | None:
        """Generate the next assistant turn and answer it (tool results, or the environment's
        response); None when nothing was generated (the budget was spent, or the episode failed
        before a turn). Sets `done` (and the trajectory's finish_reason) when the trajectory ended.

        A step on an ended trajectory returns None. Steps never overlap: a step requested while one
        runs (a second button click while a tool call is in flight) waits for it. Overlapping, it
        would generate from ids that still lack the tool response, which the real-browser test caught."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.done:
                return None
            return await self._bounded_step()

    async def run(self) -> Trajectory:
        """Step until the trajectory ends; returns it."""
        while not self.done:
            await self.step()
        return self.trajectory

    async def close(self) -> None:
        """End the episode where it stands (a stepper's Reset): its environment is closed unscored."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            self.done = True
            await self._end_episode(score=False)

    async def _bounded_step(self) -> Turn | None:
        """One step under what is left of the episode timeout; a failure or the timeout ends the
        episode as data, anything else (a cancellation, a DriftError) closes it and goes on up.
        An ended episode's reward and close run after the step, outside its timeout (close has a
        bound of its own), so a slow close is counted as one and not as the episode's timeout."""
        timeout = self.agent.episodes.limits.timeout_s
        remaining = None if timeout is None else max(timeout - self._spent_s, 0.0)
        turns = self.trajectory.num_turns
        if not self.opened:
            await self.episode.take_slot(self.agent.episodes.slots())
        started = time.perf_counter()
        try:
            async with asyncio.timeout(remaining) as bound:
                try:
                    if not self.opened:
                        await self._open()
                    turn = await self._step()
                except EpisodeError as error:
                    turn = self._fail(error, turns)
        except TimeoutError:
            if not bound.expired():
                raise
            turn = self._fail(self.episode.failed("timeout", TimeoutError(f"the episode ran past env_timeout_s={timeout}")), turns)
        except BaseException:
            self.done = True
            await self._end_episode(score=False)
            raise
        finally:
            self._spent_s += time.perf_counter() - started
        if self.done:
            await self._end_episode()
        return turn

    async def _open(self) -> None:
        seed = episode_seed(self.sample_id, self.agent.env_seed, self.agent.sampling.seed)
        await self.episode.reset(self.row, seed, self.trajectory.messages, self.agent.max_text_chars)
        self.opened = True
        self._begin()

    def _begin(self) -> None:
        """Assemble the prompt's ids (after the reset's opening: rollout/episode.py), the row's own
        messages trusted, the rest guarded."""
        traj = self.trajectory
        specs = self.episode.tool_specs()
        self._specs = list(specs)  # the parser types XML-style arguments by them (chat/schema.py)
        self._tools = [spec.to_openai() for spec in specs] or None
        self._progress.ids.extend(prompt_ids(
            self.agent.tokenizer, traj.messages, self._tools, self.agent.enable_thinking,
            chat_format=self.agent.chat_format, trusted=self._prompt,
        ))
        state = self.episode.state()
        if state is not None:
            traj.metadata["env_state"] = state

    async def _step(self) -> Turn | None:
        agent, traj, progress = self.agent, self.trajectory, self._progress
        if traj.num_turns >= agent.max_turns:
            return self._finish("max_turns", None)
        budget = agent.max_total_tokens - len(progress.all_ids)
        if budget <= 0:
            return self._finish("length", None)
        seed = self.sample_id.turn_seed(traj.num_turns) if self.sample_id is not None else None
        turn = await agent.generate(traj, progress, budget, seed, self._specs)
        if turn.finish_reason == "length":
            return self._finish("length", turn)
        if turn.calls or turn.parse_errors:
            if traj.num_turns >= agent.max_turns:
                # The model would never read these results: no tool time, and no masked feedback tokens
                # that every later forward pass (training, reference, recompute) would have to carry.
                return self._finish("max_turns", turn)
            answer = await agent.call_tools(turn, self.episode)
            if self.episode.overrides("finished") and await self.episode.call("tool", "finished"):
                return self._finish("stop", turn)
        else:
            response = await self._respond(turn)
            if response is None or response.done:
                return self._finish("stop", turn)
            if traj.num_turns >= agent.max_turns:
                return self._finish("max_turns", turn)
            answer = [dict(message) for message in response.messages]
        ended = None if turn.calls or turn.parse_errors else self._stop_token()
        delta = delta_ids(agent.tokenizer, answer, agent.enable_thinking, agent.chat_format, traj.messages[-1], ended)
        if len(progress.all_ids) + len(delta) >= agent.max_total_tokens:
            return self._finish("length", turn)
        progress.add(delta, sampled=False)
        traj.messages.extend(answer)  # type: ignore[arg-type]
        turn.state = self.episode.state()
        return turn

    def _stop_token(self) -> str | None:
        """The family's end-of-turn token the last turn stopped on (None: another or none)."""
        ids = self._progress.response_ids
        token = self.agent.tokenizer.convert_ids_to_tokens(ids[-1]) if ids else None
        return token if token in self.agent.chat_format.end_of_turn else None

    async def _respond(self, turn: Turn) -> Response | None:
        """The environment's answer to a turn without a call (None: the end)."""
        return await self.episode.respond(turn, self.agent.max_text_chars, self.trajectory.metadata)

    def _fail(self, error: EpisodeError, turns_before: int) -> Turn | None:
        """End the episode as data: finish_reason "error", the error named in the metadata."""
        self.trajectory.metadata["env_error"] = env_error_record(error)
        self.trajectory.finish_reason = "error"
        self.done = True
        return self.trajectory.turns[-1] if self.trajectory.num_turns > turns_before else None

    def _finish(self, reason: FinishReason, turn: Turn | None) -> Turn | None:
        self.trajectory.finish_reason = reason
        self.done = True
        if turn is not None and turn.state is None:
            turn.state = self.episode.state()
        self.agent.check_drift(self.trajectory, self._tools)
        return turn

    async def _end_episode(self, score: bool = True) -> None:
        """Take the environment's reward (`score`), then close it, or keep it open for the reward
        functions (`keep_open`)."""
        episodes = self.agent.episodes
        keep = episodes.kept if self.keep_open else None
        await self.episode.end(self.trajectory, score=score, keep=keep, timeout_s=episodes.limits.timeout_s)
