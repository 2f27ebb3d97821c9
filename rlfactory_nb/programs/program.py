"""`rf.AgentProgram`: train the model behind an agent someone already wrote against an OpenAI client.

    async def solve(row, llm):                       # the researcher's own agent, unchanged
        client = llm.client()                        # openai.AsyncOpenAI pointed at this episode
        reply = await client.chat.completions.create(model=llm.model, messages=row["messages"])
        return reply.choices[0].message.content      # the answer: sample.final_answer

    program = rf.AgentProgram(solve, policy)
    traj = await program.rollout(row)                 # -> Trajectory, as rf.Agent's

A program stands wherever an `rf.Agent` does (RewardLab, RolloutStepper with one step per model call,
`rf.evaluate`, `rf.train_sync`, `rf.launch(cfg, cluster, agent=program)`): it has the same `rollout`
and `start` methods, and a run binds it to its engine, tools, limits and sampling (`bind`). Each
episode gets a session on this process's endpoint (endpoint.py); its calls become the trajectory
(assembly.py). A program travels by value to a cluster like a reward function, or is named
`module:function` in a config (`rollout.program`).

A program that raises, outlives `timeout_s`, or returns something other than a string ends as data:
finish reason "error", `metadata["program_error"]` naming what happened, and the reward functions
score it as any other sample (its final answer is empty). The step and the run go on.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from rlfactory_nb._threads import in_thread
from rlfactory_nb.chat import ChatFormat, resolve_chat_format
from rlfactory_nb.code_names import load_object
from rlfactory_nb.engines.base import Engine, SamplingParams
from rlfactory_nb.errors import ArgumentTypeError, ConfigError, DatasetError
from rlfactory_nb.programs.assembly import Episode, assemble
from rlfactory_nb.programs.endpoint import Endpoint
from rlfactory_nb.programs.handle import CALLER, LLM, ProgramSettings
from rlfactory_nb.programs.sessions import EpisodeSession, Limits, Serving
from rlfactory_nb.reasoning_mode import thinking_mode
from rlfactory_nb.rollout.session import new_trajectory_id
from rlfactory_nb.rollout.tokens import prompt_ids, prompt_opens, thinks_by_default
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.types import Message, Trajectory, Turn

ProgramFunction = Callable[[dict[str, Any], "LLM"], Awaitable[Any] | Any]


class AgentProgram:
    """An agent written against an OpenAI-compatible client, trained as it is (module docstring)."""

    def __init__(
        self,
        fn: ProgramFunction | str,
        policy: Any = None,
        engine: Engine | None = None,
        *,
        tools: Any = None,
        tokenizer: Any = None,
        settings: ProgramSettings | None = None,
        **options: Any,
    ):
        """`fn(row, llm) -> answer` (async, or a plain function run in a thread), or "module:function";
        `policy` or `engine` may be left out where a run brings the engine; `options` are
        ProgramSettings fields, or max_calls / max_new_tokens / max_total_tokens (the limits)."""
        self.fn = load_object(fn, "rollout.program", "agent program") if isinstance(fn, str) else fn
        if not callable(self.fn):
            raise ArgumentTypeError(f"AgentProgram needs a function fn(row, llm), got a {type(fn).__name__}")
        self.policy = policy
        self._engine = engine
        self.tools = tools
        self._tokenizer = tokenizer
        self.settings = _with_options(settings or ProgramSettings(), options)
        self._serving: Serving | None = None
        self._endpoint: asyncio.Task[Endpoint] | None = None
        """the start of the endpoint the program's episodes use now (endpoint())"""
        self._root: AgentProgram = self
        """the program this one was bound from: its endpoint serves every binding (one per process)"""
        self.drift_count = 0

    # ------------------------------------------------------------------ what a run sets

    def bind(
        self, policy: Any = None, tools: Any = None, cfg: Any = None, *, engine: Engine | None = None,
        temperature: float | None = None, drift: str | None = None,
    ) -> AgentProgram:
        """This program on a run's engine, tools, limits and sampling (`cfg.rollout`); the run's
        sampling wins over requests. What `Runtime.agent()` returns when the run has a program."""
        settings, thinking = self.settings, None
        if cfg is not None:
            rollout, thinking = cfg.rollout, thinking_mode(cfg)
            temperature = rollout.temperature if temperature is None else temperature
            settings = replace(
                settings, chat_format=rollout.chat_format, request_sampling=False, drift=drift or rollout.drift_check,
                enable_thinking=settings.enable_thinking if thinking is None else thinking,
                limits=Limits(
                    rollout.max_turns, rollout.max_new_tokens, rollout.max_total_tokens,
                    max_text_chars=cfg.tools.max_result_chars or Limits.max_text_chars,
                ),
                sampling=SamplingParams(temperature=temperature, top_p=rollout.top_p if temperature else 1.0),
            )
        bound = AgentProgram(
            self.fn, policy if policy is not None else self.policy, engine or (None if policy is not None else self._engine),
            tools=tools if tools is not None else self.tools, tokenizer=self._tokenizer, settings=settings,
        )
        bound._root = self._root
        if cfg is not None and thinking is None:  # unset, and no mode recorded: the template's default, as rf.Agent's
            bound.settings = replace(bound.settings, enable_thinking=thinks_by_default(bound.tokenizer))
        return bound

    # ------------------------------------------------------------------ what callers of an Agent use

    @property
    def tokenizer(self) -> Any:
        found = self._tokenizer or getattr(self.policy, "tokenizer", None) or getattr(self._engine, "tokenizer", None)
        if found is None:
            raise ConfigError("AgentProgram needs a tokenizer: pass policy=, tokenizer=, or an engine that carries one")
        return found

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            if self.policy is None:
                raise ConfigError("AgentProgram has no engine: pass policy= or engine=, or run it in a run (train, evaluate)")
            self._engine = self.policy.engine("hf")
        return self._engine

    @property
    def max_turns(self) -> int:
        return self.settings.limits.max_calls

    @property
    def chat_format(self) -> ChatFormat:
        """The chat format the program's calls are rendered in (an Agent's attribute of that name)."""
        return resolve_chat_format(self.settings.chat_format, self.tokenizer)

    @property
    def enable_thinking(self) -> bool:
        return self.settings.enable_thinking

    def start(
        self, messages: Sequence[Message] | dict[str, Any], metadata: dict[str, Any] | None = None,
        sample_id: SampleId | None = None, stepped: bool = True,
    ) -> ProgramSession:
        """An episode that advances one model call per `await session.step()` (the RolloutStepper's view)."""
        return ProgramSession(self, _row(messages, metadata), sample_id, stepped)

    async def rollout(
        self, messages: Sequence[Message] | dict[str, Any], metadata: dict[str, Any] | None = None,
        sample_id: SampleId | None = None, *, keep_open: bool = False,
    ) -> Trajectory:
        """Run one episode of `fn` on a dataset row (or prompt messages and the row's other columns
        as `metadata`, as rf.Agent takes them); `sample_id` seeds its calls. `keep_open` is rf.Agent's:
        a program's episode holds no environment, so nothing stays open."""
        return await ProgramSession(self, _row(messages, metadata), sample_id, stepped=False).run()

    env_factory = None
    """rf.Agent's environment factory: a program runs no Environment (its tools are `llm.tools`)"""

    def env_of(self, traj: Trajectory) -> None:
        """rf.Agent's hook for rewards that read an episode's environment: a program has none."""

    async def close_episodes(self, trajectories: Any) -> None:
        """rf.Agent's hook: nothing of a program's episode is left open."""

    # ------------------------------------------------------------------ serving

    def serving(self) -> Serving:
        if self._serving is None:
            tokenizer, settings = self.tokenizer, self.settings
            fmt = resolve_chat_format(settings.chat_format, tokenizer)
            starts = fmt.reasoning is not None and prompt_opens(tokenizer, fmt.reasoning.open, settings.enable_thinking)
            self._serving = Serving(
                self.engine, tokenizer, fmt, settings.limits, settings.sampling, settings.request_sampling,
                settings.enable_thinking, settings.model_name, starts,
            )
        return self._serving

    async def endpoint(self) -> Endpoint:
        """This process's endpoint for the program, on the running event loop: started by the first
        episode (concurrent first episodes await the same start, so one socket listens), closed when
        the last episode open on it ends (`release`)."""
        root, loop = self._root, asyncio.get_running_loop()
        starting = root._endpoint
        if starting is None or starting.get_loop() is not loop or (starting.done() and _failed(starting)):
            starting = root._endpoint = loop.create_task(Endpoint(root.settings.max_body_bytes).start())
        return await asyncio.shield(starting)

    async def release(self, endpoint: Endpoint) -> None:
        """Close `endpoint` once no episode is open on it: a run's episodes ended, nothing listens."""
        if endpoint.sessions:
            return
        root = self._root
        current = root._endpoint
        if current is not None and current.done() and not _failed(current) and current.result() is endpoint:
            root._endpoint = None  # the next episode starts a new one, even while this one closes
        await endpoint.close()

    async def close(self) -> None:
        """Stop the endpoint (the engine stays the caller's)."""
        root = self._root
        starting, root._endpoint = root._endpoint, None
        if starting is None or starting.get_loop() is not asyncio.get_running_loop():
            return
        await asyncio.wait([starting])
        if not _failed(starting):
            await starting.result().close()

    def __getstate__(self) -> dict[str, Any]:
        """What travels to a cluster: the function and settings; the run brings engine and tools."""
        return {"fn": self.fn, "settings": self.settings, "tokenizer": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["fn"], settings=state["settings"])

    def __repr__(self) -> str:
        return f"AgentProgram({getattr(self.fn, '__qualname__', self.fn)!r}, max_calls={self.max_turns})"


class ProgramSession:
    """One episode in progress. `step` lets one model call through and waits for it; `run` lets the
    program finish. `Trajectory` so far: `trajectory`."""

    def __init__(self, program: AgentProgram, row: dict[str, Any], sample_id: SampleId | None, stepped: bool):
        self.program = program
        self.row = row
        self.sample_id = sample_id
        self.id = new_trajectory_id()  # the row's `id` stays in the metadata
        self.gate = asyncio.Semaphore(0) if stepped else None
        self.done = False
        self._episode: EpisodeSession | None = None
        self._task: asyncio.Task | None = None
        self._result: Trajectory | None = None
        self._current: Trajectory | None = None

    @property
    def trajectory(self) -> Trajectory:
        """The episode so far: before any call, its prompt alone (rendered only when asked for)."""
        if self._current is None:
            serving = self.program.serving()
            self._current = Trajectory(
                prompt_ids(
                    serving.tokenizer, self.row["messages"], None, serving.enable_thinking,
                    chat_format=serving.chat_format, trusted=self.row["messages"],
                ),
                messages=list(self.row["messages"]), metadata=_metadata(self.row), id=self.id,
            )
        return self._current

    async def step(self) -> Turn | None:
        """Let the program make its next model call; returns that call's turn (None once it ended)."""
        if self.done:
            return None
        await self._ensure_started()
        episode = self._episode
        before = len(episode.calls)
        episode.changed.clear()
        self.gate.release()
        while len(episode.calls) == before and not self._task.done():
            waiter = asyncio.ensure_future(episode.changed.wait())
            await asyncio.wait([self._task, waiter], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            episode.changed.clear()
        if self._task.done():
            self._finish()
        else:
            self._current = self._assemble(Episode(self.row["messages"], _metadata(self.row)))
        turns = self.trajectory.turns
        return turns[-1] if len(episode.calls) > before and turns else None

    async def run(self) -> Trajectory:
        """Let the program run to its end; returns the episode's Trajectory."""
        await self._ensure_started()
        if self.gate is not None:
            for _ in range(self.program.max_turns + 1):  # every call the limits allow
                self.gate.release()
        await asyncio.wait([self._task])
        self._finish()
        return self.trajectory

    async def _ensure_started(self) -> None:
        if self._task is not None:
            return
        endpoint = await self.program.endpoint()
        self._episode = endpoint.open(EpisodeSession(self.program.serving(), self.sample_id, self.gate, self.row["messages"]))
        llm = LLM(endpoint.base_url(self._episode), self._episode.key, self.program.settings.model_name,
                  self.program.tools, self.program.settings, endpoint)
        self._task = asyncio.ensure_future(self._play(endpoint, llm))

    async def _play(self, endpoint: Endpoint, llm: LLM) -> tuple[Any, str | None]:
        """Run the program to its end or its timeout; (answer, error) with every failure named,
        never raised. At the timeout the episode ends whether or not the program stops: one that
        ignores its cancellation runs on abandoned, and the endpoint refuses its later calls."""
        CALLER.set(self._episode.id)  # this task's context, copied into the program's task and thread
        program = asyncio.ensure_future(self._program(llm))
        try:
            answer, error = await _outcome(program, self.program.settings.timeout_s)
        finally:
            endpoint.forget(self._episode)
            await llm.aclose()
            await self.program.release(endpoint)
        if self._episode.misuse is not None:
            return None, self._episode.misuse
        if error is None and not isinstance(answer, str):
            error = f"the program returned a {type(answer).__name__}, not a str (its answer must be text)"
        return answer, error

    async def _program(self, llm: LLM) -> Any:
        fn = self.program.fn
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
            return await fn(self.row, llm)
        return await in_thread("program", fn, self.row, llm)

    def _finish(self) -> None:
        if self._result is None:
            answer, error = self._task.result()
            episode = Episode(self.row["messages"], _metadata(self.row), answer, error, self._episode.limit_hit)
            self._result = self._assemble(episode)
            self.program.drift_count += self._result.metadata["program"]["drift"]
        self._current, self.done = self._result, True

    def _assemble(self, episode: Episode) -> Trajectory:
        calls = list(self._episode.calls)
        return assemble(self.program.serving(), calls, episode, self.id, self.program.settings.drift)


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


def _failed(task: asyncio.Task) -> bool:
    """Whether a finished task failed (cancelled or raised)."""
    return task.cancelled() or task.exception() is not None


def _row(messages: Sequence[Message] | dict[str, Any], metadata: dict[str, Any] | None) -> dict[str, Any]:
    """A dataset row from what a caller of rf.Agent passes: messages and the row's other columns."""
    if isinstance(messages, dict):
        if "messages" not in messages:
            raise DatasetError("a program's row needs 'messages' (the prompt as chat messages)")
        return {**(metadata or {}), **messages}
    return {**(metadata or {}), "messages": list(messages)}


def _metadata(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key != "messages"}


def _with_options(settings: ProgramSettings, options: dict[str, Any]) -> ProgramSettings:
    limits = {key: options.pop(key) for key in ("max_calls", "max_new_tokens", "max_total_tokens") if key in options}
    if "max_turns" in options:
        limits["max_calls"] = options.pop("max_turns")
    known = set(ProgramSettings.__dataclass_fields__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise ArgumentTypeError(f"AgentProgram got unknown options {unknown}; known: {sorted(known | set(limits))}")
    settings = replace(settings, **options)
    return replace(settings, limits=replace(settings.limits, **limits)) if limits else settings

