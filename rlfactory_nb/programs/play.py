"""`ProgramSession`: one episode of an agent program, played in a `rollout/episode.Episode`.

The episode goes as an rf.Agent's does (rollout/session.py), with the program in the loop's place:
1. its environment is made (off the event loop, bounded by `max_open`) and reset with the row and
   the episode's seed; what `reset` returns joins the prompt the program gets (`row["messages"]`);
2. the program runs (`fn(row, llm)`) against a session of the endpoint; `llm.tools` are the
   environment's tools and `llm.respond()` its answer to the model's last reply (a customer's turn);
3. its calls become the trajectory (assembly.py), with what the environment added to the metadata
   (`env_state`, `env_reward` of a response, a user's tokens);
4. the environment's `reward()` is taken, then it is closed, or kept open for the reward functions
   (`keep_open`) until the player's `close_episodes`.
An environment that fails (in its factory, `reset`, a tool, `respond`, `reward` or `close`) ends the
episode as data (`metadata["env_error"]`, finish reason "error"), as it does an Agent's.

A program that raises, outlives `timeout_s`, or returns something other than a string ends as data
too: finish reason "error", `metadata["program_error"]` naming what happened.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from rlfactory_nb._threads import in_thread
from rlfactory_nb.envs.base import Response
from rlfactory_nb.errors import DatasetError, EpisodeError
from rlfactory_nb.programs.assembly import ProgramOutcome, assemble
from rlfactory_nb.programs.endpoint import Endpoint
from rlfactory_nb.programs.handle import CALLER, LLM, EpisodeTools
from rlfactory_nb.programs.sessions import CallSession
from rlfactory_nb.rollout.episode import env_error_record
from rlfactory_nb.rollout.session import Prompt, new_trajectory_id
from rlfactory_nb.rollout.tokens import prompt_ids
from rlfactory_nb.seeds import SampleId, episode_seed
from rlfactory_nb.types import Trajectory, Turn

ProgramFunction = Callable[[dict[str, Any], LLM], Awaitable[Any] | Any]


class ProgramSession:
    """One episode in progress of `program` (an rf.AgentProgram, which imports this module). `step`
    lets one model call through and waits for it; `run` lets the program finish; `close` ends it
    where it stands. `Trajectory` so far: `trajectory`."""

    def __init__(
        self, program: Any, prompt: Prompt, metadata: dict[str, Any] | None, sample_id: SampleId | None,
        *, stepped: bool, keep_open: bool = False,
    ):
        self.program = program
        self.episode = program.episodes.new()
        self.row = _row(prompt, metadata, needs_messages=self.episode.shared)
        self._prompt = list(self.row["messages"])
        """the row's own prompt messages: trusted, rendered as they are (rollout/guard.py)"""
        self.sample_id = sample_id
        self.keep_open = keep_open
        self.id = new_trajectory_id()  # the row's `id` stays in the metadata
        self.gate = asyncio.Semaphore(0) if stepped else None
        self.done = False
        self.env_metadata: dict[str, Any] = {}
        """what the environment adds to the trajectory's metadata (env_state, env_reward, user counts)"""
        self._calls: CallSession | None = None
        self._task: asyncio.Future | None = None
        """(answer, error) once the episode's play ended (set at once when its environment failed)"""
        self._playing: asyncio.Task | None = None
        self._finishing: asyncio.Future | None = None
        self._current: Trajectory | None = None

    @property
    def env(self) -> Any:
        """The episode's Environment instance (None before it is made)."""
        return self.episode.instance

    @property
    def trajectory(self) -> Trajectory:
        """The episode so far: before any call, its prompt alone (rendered only when asked for)."""
        if self._current is None:
            serving = self.program.serving()
            messages = self.row["messages"]
            self._current = Trajectory(
                prompt_ids(serving.tokenizer, messages, None, serving.enable_thinking, chat_format=serving.chat_format, trusted=self._prompt),
                messages=list(messages), metadata={**_metadata(self.row), **self.env_metadata}, id=self.id,
            )
        return self._current

    async def step(self) -> Turn | None:
        """Let the program make its next model call; returns that call's turn (None once it ended)."""
        if self.done:
            return None
        await self._ensure_started()
        calls, task = self._calls, self._task
        before = len(calls.calls) if calls is not None else 0
        if calls is not None:
            calls.changed.clear()
            self.gate.release()
            while len(calls.calls) == before and not task.done():
                waiter = asyncio.ensure_future(calls.changed.wait())
                await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                calls.changed.clear()
        if task.done():
            await self._finish()
        else:
            self._current = self._assemble(ProgramOutcome(self.row["messages"], self._metadata()))
        turns = self.trajectory.turns
        return turns[-1] if calls is not None and len(calls.calls) > before and turns else None

    async def run(self) -> Trajectory:
        """Let the program run to its end; returns the episode's Trajectory."""
        await self._ensure_started()
        if self.gate is not None:
            for _ in range(self.program.max_turns + 1):  # every call the limits allow
                self.gate.release()
        await asyncio.wait([self._task])
        await self._finish()
        return self.trajectory

    async def close(self) -> None:
        """End the episode where it stands (a stepper's Reset): the program is cancelled and the
        environment closed unscored."""
        self.done = True
        if self._playing is not None and not self._playing.done():
            self._playing.cancel()
            await asyncio.wait([self._playing])
        await self.episode.end(self.trajectory, score=False, timeout_s=self.program.episodes.limits.timeout_s)

    async def _ensure_started(self) -> None:
        """Open and reset the episode's environment, then start the program; an environment that
        fails here ends the episode before the program runs."""
        if self._task is not None:
            return
        self._task = asyncio.get_running_loop().create_future()
        try:
            await self._open_episode()
        except EpisodeError as error:
            self.env_metadata["env_error"] = env_error_record(error)
            self._task.set_result((None, None))
            return
        endpoint = await self.program.endpoint()
        self._calls = endpoint.open(CallSession(self.program.serving(), self.sample_id, self.gate, self._prompt))
        settings = self.program.settings
        specs = self.episode.tool_specs()
        tools = EpisodeTools(self.episode, settings.rollout.limits.max_text_chars) if specs else None
        llm = LLM(endpoint.base_url(self._calls), self._calls.key, settings.model_name, tools, settings, endpoint, self._respond)
        self._playing = asyncio.ensure_future(self._play(endpoint, llm))
        self._playing.add_done_callback(lambda done: _pass_on(done, self._task))

    async def _open_episode(self) -> None:
        episodes, rollout = self.program.episodes, self.program.settings.rollout
        if self.episode.shared:
            return
        await self.episode.take_slot(episodes.slots())
        seed = episode_seed(self.sample_id, rollout.env_seed, rollout.sampling.seed)
        try:
            await asyncio.wait_for(self.episode.reset(self.row, seed, self.row["messages"], rollout.limits.max_text_chars), rollout.limits.timeout_s)
        except TimeoutError as error:
            raise self.episode.failed("timeout", TimeoutError(f"reset ran past env_timeout_s={rollout.limits.timeout_s}")) from error
        state = self.episode.state()
        if state is not None:
            self.env_metadata["env_state"] = state
        self._current = None  # the prompt now holds the reset's opening

    async def _respond(self) -> Response | None:
        """`llm.respond()`: the environment's answer to the last call's reply (rollout/episode.py)."""
        calls = self._calls.calls if self._calls is not None else []
        turn = calls[-1].turn if calls else Turn(text="", answer="")
        response = await self.episode.respond(turn, self.program.settings.rollout.limits.max_text_chars, self.env_metadata)
        turn.state = self.episode.state()
        return response

    async def _play(self, endpoint: Endpoint, llm: LLM) -> tuple[Any, str | None]:
        """Run the program to its end or its timeout; (answer, error) with every failure named,
        never raised. At the timeout the episode ends whether or not the program stops: one that
        ignores its cancellation runs on abandoned, and the endpoint refuses its later calls."""
        CALLER.set(self._calls.id)  # this task's context, copied into the program's task and thread
        program = asyncio.ensure_future(self._program(llm))
        try:
            answer, error = await _outcome(program, self.program.settings.timeout_s)
        finally:
            endpoint.forget(self._calls)
            await llm.aclose()
            await self.program.release(endpoint)
        if self._calls.misuse is not None:
            return None, self._calls.misuse
        if error is None and not isinstance(answer, str):
            error = f"the program returned a {type(answer).__name__}, not a str (its answer must be text)"
        return answer, error

    async def _program(self, llm: LLM) -> Any:
        fn = self.program.fn
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
            return await fn(self.row, llm)
        return await in_thread("program", fn, self.row, llm)

    async def _finish(self) -> None:
        """The final trajectory, once: the environment's reward taken, then closed or kept open."""
        if self._finishing is None:
            self._finishing = asyncio.ensure_future(self._final())
        self._current = await asyncio.shield(self._finishing)
        self.done = True

    async def _final(self) -> Trajectory:
        answer, error = self._task.result()
        limit_hit = self._calls.limit_hit if self._calls is not None else None
        traj = self._assemble(ProgramOutcome(self.row["messages"], self._metadata(), answer, error, limit_hit))
        if "env_error" in traj.metadata:
            traj.finish_reason = "error"
        self.program.drift_count += traj.metadata["program"]["drift"]
        episodes = self.program.episodes
        await self.episode.end(traj, keep=episodes.kept if self.keep_open else None, timeout_s=episodes.limits.timeout_s)
        return traj

    def _metadata(self) -> dict[str, Any]:
        return {**_metadata(self.row), **self.env_metadata}

    def _assemble(self, outcome: ProgramOutcome) -> Trajectory:
        calls = list(self._calls.calls) if self._calls is not None else []
        return assemble(self.program.serving(), calls, outcome, self.id, self.program.settings.rollout.drift)


def _pass_on(done: asyncio.Future, into: asyncio.Future) -> None:
    """Hand the playing task's outcome to the session's future (cancelled: the program was)."""
    if into.done():
        return
    if done.cancelled():
        into.set_result((None, "the program was cancelled"))
    elif done.exception() is not None:
        into.set_exception(done.exception())
    else:
        into.set_result(done.result())


async def _outcome(program: asyncio.Task, timeout_s: float) -> tuple[Any, str | None]:
    """The program's (answer, error) by `timeout_s`; past it the program is cancelled and left
    behind, not waited for (a program that swallows the cancellation cannot hold its episode)."""
    try:
        await asyncio.wait([program], timeout=timeout_s)
    except asyncio.CancelledError:
        program.cancel()
        raise
    if not program.done():
        program.cancel()
        program.add_done_callback(_drop_outcome)
        return None, f"the program ran past its episode timeout (timeout_s={timeout_s:g})"
    if program.cancelled():
        return None, "the program was cancelled"
    error = program.exception()
    if error is not None:
        return None, f"the program raised {type(error).__name__}: {str(error)[:500]}"
    return program.result(), None


def _drop_outcome(program: asyncio.Task) -> None:
    """Read an abandoned program's late outcome, so that asyncio does not log it as never retrieved."""
    if not program.cancelled():
        program.exception()


def _row(prompt: Prompt, metadata: dict[str, Any] | None, needs_messages: bool) -> dict[str, Any]:
    """A dataset row from what a caller of rf.Agent passes: messages and the row's other columns (a
    row without messages starts from none, where an environment's reset writes the prompt)."""
    if isinstance(prompt, Mapping):
        if "messages" not in prompt and needs_messages:
            raise DatasetError("a program's row needs 'messages' (the prompt as chat messages)")
        row = {**(metadata or {}), **prompt}
        return {**row, "messages": [dict(m) for m in row.get("messages", [])]}
    return {**(metadata or {}), "messages": [dict(m) for m in prompt]}


def _metadata(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key != "messages"}
