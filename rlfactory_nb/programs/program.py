"""`rf.AgentProgram`: train the model behind an agent someone already wrote against an OpenAI client.

    async def solve(row, llm):                       # the researcher's own agent, unchanged
        client = llm.client()                        # openai.AsyncOpenAI pointed at this episode
        reply = await client.chat.completions.create(model=llm.model, messages=row["messages"])
        return reply.choices[0].message.content      # the answer: sample.final_answer

    program = rf.AgentProgram(solve, policy)
    traj = await program.rollout(row)                 # -> Trajectory, as rf.Agent's

A program stands wherever an `rf.Agent` does (RewardLab, RolloutStepper with one step per model call,
`rf.evaluate`, `rf.train_sync`, `rf.launch(cfg, cluster, agent=program)`): both are an
`EpisodePlayer` (rollout/player.py), and a run binds the program to its engine, tools and
`RolloutSettings` (`bind`), the ones its Agent would have had. Each episode plays in a
`rollout/episode.Episode` as an Agent's does (play.py): its environment (the run's ToolSet, or
`rollout.env`'s, one per episode) is reset with the row, serves `llm.tools`, answers through
`llm.respond()`, gives its reward and is closed. The program's model calls go to a session on this
process's endpoint (endpoint.py) and become the trajectory (assembly.py). A program travels by value
to a cluster like a reward function, or is named `module:function` in a config (`rollout.program`).

A program that raises, outlives `timeout_s`, or returns something other than a string ends as data:
finish reason "error", `metadata["program_error"]` naming what happened, and the reward functions
score it as any other sample (its final answer is empty). The step and the run go on.
"""

from __future__ import annotations

import asyncio
from dataclasses import fields, replace
from typing import Any

from rlfactory_nb.chat import ChatFormat, resolve_chat_format
from rlfactory_nb.code_names import load_object
from rlfactory_nb.engines.base import Engine
from rlfactory_nb.envs.base import ToolSetEnvironment
from rlfactory_nb.envs.factory import env_factory
from rlfactory_nb.errors import ArgumentTypeError, ConfigError
from rlfactory_nb.programs.endpoint import Endpoint
from rlfactory_nb.programs.handle import ProgramSettings
from rlfactory_nb.programs.play import ProgramFunction, ProgramSession
from rlfactory_nb.programs.sessions import Serving
from rlfactory_nb.rollout.episodes import Episodes, PlaysEpisodes
from rlfactory_nb.rollout.session import Prompt
from rlfactory_nb.rollout.settings import RolloutSettings
from rlfactory_nb.rollout.tokens import DriftMode, prompt_opens, thinks_by_default
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.types import Trajectory


class AgentProgram(PlaysEpisodes):
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
        ProgramSettings or RolloutSettings fields (`env=Shop`, `enable_thinking=True`), or
        max_calls / max_new_tokens / max_total_tokens (the limits)."""
        self.fn = load_object(fn, "rollout.program", "agent program") if isinstance(fn, str) else fn
        if not callable(self.fn):
            raise ArgumentTypeError(f"AgentProgram needs a function fn(row, llm), got a {type(fn).__name__}")
        self.policy = policy
        self._engine = engine
        self.tools = tools
        self._tokenizer = tokenizer
        self.settings = _with_options(settings or ProgramSettings(), options)
        rollout = self.settings.rollout
        factory = env_factory(rollout.env) if rollout.env is not None else ToolSetEnvironment.shared_by(tools)
        self.episodes = Episodes(factory, rollout.limits)
        """how each episode's environment is made (the ToolSet's, shared, by default), the bounds,
        the counters, and the episodes kept open for the reward functions (as an rf.Agent's)"""
        self._serving: Serving | None = None
        self._endpoint: asyncio.Task[Endpoint] | None = None
        """the start of the endpoint the program's episodes use now (endpoint())"""
        self._root: AgentProgram = self
        """the program this one was bound from: its endpoint serves every binding (one per process)"""
        self.drift_count = 0

    # ------------------------------------------------------------------ what a run sets

    def bind(
        self, policy: Any = None, tools: Any = None, cfg: Any = None, *, engine: Engine | None = None,
        temperature: float | None = None, drift: DriftMode | None = None, settings: RolloutSettings | None = None,
    ) -> AgentProgram:
        """This program on a run's engine, tools and `settings` (what `Runtime.agent()` returns when
        the run has a program: the settings its Agent would have had), or those of `cfg.rollout`
        (`RolloutSettings.from_config(cfg, temperature=, drift=)`). The run's sampling wins over
        requests."""
        if settings is None and cfg is not None:
            settings = RolloutSettings.from_config(cfg, temperature=temperature, drift=drift)
        program = self.settings if settings is None else replace(self.settings, rollout=settings, request_sampling=False)
        bound = AgentProgram(
            self.fn, policy if policy is not None else self.policy, engine or (None if policy is not None else self._engine),
            tools=tools if tools is not None else self.tools, tokenizer=self._tokenizer, settings=program,
        )
        bound._root = self._root
        return bound

    # ------------------------------------------------------------------ the EpisodePlayer contract

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
        """The model calls an episode may make (a run's `rollout.max_turns`)."""
        return self.settings.rollout.limits.max_turns

    @property
    def chat_format(self) -> ChatFormat:
        """The chat format the program's calls are rendered in (an Agent's attribute of that name)."""
        return resolve_chat_format(self.settings.rollout.chat_format, self.tokenizer)

    @property
    def enable_thinking(self) -> bool:
        """The reasoning mode the calls are rendered in (unset: the template's default)."""
        given = self.settings.rollout.enable_thinking
        return thinks_by_default(self.tokenizer) if given is None else given

    def start(
        self, prompt: Prompt, metadata: dict[str, Any] | None = None, sample_id: SampleId | None = None, *,
        keep_open: bool = False,
    ) -> ProgramSession:
        """An episode that advances one model call per `await session.step()` (the RolloutStepper's view)."""
        return ProgramSession(self, prompt, metadata, sample_id, stepped=True, keep_open=keep_open)

    async def rollout(
        self, prompt: Prompt, metadata: dict[str, Any] | None = None, sample_id: SampleId | None = None, *,
        keep_open: bool = False,
    ) -> Trajectory:
        """Run one episode of `fn` on a dataset row (or prompt messages and the row's other columns
        as `metadata`, as rf.Agent takes them); `sample_id` seeds its calls and its environment's
        reset. `keep_open`: leave the environment open after the episode (reward functions read it as
        `sample.env`) until `close_episodes`."""
        return await ProgramSession(self, prompt, metadata, sample_id, stepped=False, keep_open=keep_open).run()

    # ------------------------------------------------------------------ serving

    def serving(self) -> Serving:
        if self._serving is None:
            tokenizer, settings, rollout = self.tokenizer, self.settings, self.settings.rollout
            fmt, thinking = resolve_chat_format(rollout.chat_format, tokenizer), self.enable_thinking
            starts = fmt.reasoning is not None and prompt_opens(tokenizer, fmt.reasoning.open, thinking)
            self._serving = Serving(
                self.engine, tokenizer, fmt, rollout.limits, rollout.sampling, settings.request_sampling,
                thinking, settings.model_name, starts, rollout.parser,
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


def _failed(task: asyncio.Task) -> bool:
    """Whether a finished task failed (cancelled or raised)."""
    return task.cancelled() or task.exception() is not None


def _with_options(settings: ProgramSettings, options: dict[str, Any]) -> ProgramSettings:
    """`settings` with the constructor's `options`: limits, RolloutSettings and ProgramSettings fields."""
    limit_names = {"max_calls": "max_turns", "max_turns": "max_turns", "max_new_tokens": "max_new_tokens",
                   "max_total_tokens": "max_total_tokens"}
    limits = {limit_names[key]: options.pop(key) for key in list(options) if key in limit_names}
    rollout_names = {f.name for f in fields(RolloutSettings)} - {"limits"}
    rollout = {key: options.pop(key) for key in list(options) if key in rollout_names}
    known = {f.name for f in fields(ProgramSettings)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ArgumentTypeError(f"AgentProgram got unknown options {unknown}; known: {sorted(known | rollout_names | set(limit_names))}")
    settings = replace(settings, **options)
    if limits:
        rollout["limits"] = replace(settings.rollout.limits, **limits)
        sampling = rollout.get("sampling", settings.rollout.sampling)
        rollout["sampling"] = replace(sampling, max_new_tokens=rollout["limits"].max_new_tokens)
    return replace(settings, rollout=replace(settings.rollout, **rollout)) if rollout else settings

