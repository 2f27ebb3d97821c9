"""`Runtime.from_config`: what a run's rollouts need, built from its config in one place.

"Load the run's objects, build the tools, the reward runner and the Agent" is what the trainer,
`rf.evaluate`, `job.stepper()`, `rf.example(...).runtime(...)` and the RewardLab each need; they all
build it here, so a notebook's rollouts are the trainer's (the same tools, settings, parser, limits
and reward). The engine is not made here: the caller brings one (the trainer its backend's, `rf.evaluate`
the policy's, a job its snapshot's) or the Agent uses the policy's own.

A run's tools are the config's tools file plus, optionally, tools from the kernel (a ToolSet or
`@rf.tool` functions: `launch(cfg, cluster, tools=[my_tool])`, as a ToolsFile: tools/extra.py).
Settings come in this order: the ToolSet defaults, then the tools file's `settings:`, then the run
config's `tools.*` keys that are set (they default to None, so `max_result_chars: 1000` in a tools
file holds in training unless the run config says otherwise).

Where a job's rollouts run in more than one process, they can share one tool cache: a
`shared_cache` tier (tools/cache.py's SharedCache; the job's Ray actor from cluster/tool_cache.py)
behind each process's LRU, which then records the tools file's `cache_path` in their stead.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rlfactory_nb._views import view_of
from rlfactory_nb.algo.registry import loss_names, loss_reduction
from rlfactory_nb.chat import chat_format_names, parser_names
from rlfactory_nb.code_names import load_object
from rlfactory_nb.config import RunConfig
from rlfactory_nb.config_distill import distill_problems
from rlfactory_nb.config_schema import import_spec
from rlfactory_nb.config_sections import RewardConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.data.rows import Row, load_rows, require_prompts
from rlfactory_nb.engines.base import Engine, engine_kinds
from rlfactory_nb.envs.base import EnvReward
from rlfactory_nb.envs.factory import env_factory
from rlfactory_nb.errors import ConfigError, DatasetError, LoadError
from rlfactory_nb.programs.program import AgentProgram
from rlfactory_nb.reasoning_mode import thinking_mode
from rlfactory_nb.reward_lab import RewardLab
from rlfactory_nb.rewards.judge import LLMJudge
from rlfactory_nb.rewards.loading import is_run_record, load_reward
from rlfactory_nb.rewards.runner import RewardRunner
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.rollout.player import EpisodePlayer
from rlfactory_nb.rollout.settings import RolloutSettings
from rlfactory_nb.tools.cache import SharedCache
from rlfactory_nb.tools.config import ToolSetSettings, ToolsFile, load_tools_config
from rlfactory_nb.tools.extra import ExtraTools, extra_tools
from rlfactory_nb.tools.python import load_function
from rlfactory_nb.tools.toolset import ToolSet
from rlfactory_nb.types import Message

if TYPE_CHECKING:
    from rlfactory_nb.models.policy import Policy
    from rlfactory_nb.reward_lab import RewardFunctions
    from rlfactory_nb.rollout.tokens import DriftMode


def run_tools(cfg: RunConfig, extra: ExtraTools | None = None, **settings: Any) -> ToolsFile | None:
    """The tools of a run: the config's tools file and `extra`, with settings ordered as the module
    docstring says and `settings` (ToolSetSettings fields) over them; None when the run has no tools."""
    parts = [load_tools_config(cfg.tools.config)] if cfg.tools.config is not None else []
    added = extra_tools(extra)
    if added is not None:
        parts.append(added)
    if not parts:
        return None
    base = parts[0].settings if cfg.tools.config is not None else (added.settings if added else ToolSetSettings())
    return ToolsFile(
        servers=tuple(server for part in parts for server in part.servers),
        functions=tuple(function for part in parts for function in part.functions),
        settings=dataclasses.replace(base, **{**cfg.tools.overrides(), **settings}),
        source=" + ".join(part.source for part in parts),
    )


def build_tools(
    cfg: RunConfig,
    extra: ExtraTools | None = None,
    *,
    shared_cache: SharedCache | None = None,
    **settings: Any,
) -> ToolSet | None:
    """The run's ToolSet (not started: `await tools.start()`), or None when it has no tools;
    `settings` as `run_tools` takes them, `shared_cache` as the ToolSet does.

    >>> cfg = RunConfig(name="x")
    >>> build_tools(cfg) is None
    True
    """
    spec = run_tools(cfg, extra, **settings)
    return None if spec is None else ToolSet.from_config(spec, shared_cache=shared_cache)


def check_names(cfg: RunConfig, objects: RunObjects | None = None, resume: bool = False) -> None:
    """Resolve everything `cfg` names before any work (no model loaded, no Ray): the registry names
    (loss, parser, chat format, engine kinds), each with its closest known name, then every
    `module:name` key (`config_schema.ImportSpec`: the reward function, ...), the tools file and its
    function tools, and the datasets, unless `objects` from the kernel replace them. `launch` and
    `train` call it first, so a typo costs a second, not a model load and a step."""
    objects = objects or RunObjects()
    problems = [f"{key}: {problem}" for key, name, known in _registry_names(cfg) if (problem := _unknown(name, known))]
    for key, spec in _import_specs(cfg):
        if key != "reward.function":
            try:
                load_object(spec, key, "object")
            except LoadError as error:
                problems.append(str(error))
    problems += distill_problems(cfg)
    if problems:
        raise ConfigError(problems, "the names it gives")
    if objects.reward is None and not (resume and is_run_record(cfg.reward.function)):
        load_reward(cfg.reward.function, cfg.reward.args)  # a RewardLoadError names the spec and the fix
    if cfg.tools.config is not None:
        for function in load_tools_config(cfg.tools.config).functions:
            if isinstance(function.target, str):
                load_function(function.target)
    if objects.agent is None and cfg.rollout.program is not None:
        load_object(cfg.rollout.program, "rollout.program", "agent program")  # rf.AgentProgram's function
    if objects.env is None and cfg.rollout.env is not None:
        env_factory(cfg.rollout.env)  # the Environment `module:Class`
    sources = [("data.train", cfg.data.train)] if objects.train_data is None else []
    if cfg.grpo.eval_every and objects.eval_data is None:
        sources.append(("data.eval", cfg.data.eval))
    for key, source in sources:
        rows = load_rows(source, 1)
        if objects.env is None and cfg.rollout.env is None:  # an environment may write the prompt
            require_prompts(rows, key)


def _registry_names(cfg: RunConfig) -> list[tuple[str, str, Callable[[], Sequence[str]]]]:
    """(key, name, the names its registry knows) for each registry lookup the run will make."""
    names: list[tuple[str, str, Callable[[], Sequence[str]]]] = [
        ("grpo.loss", cfg.grpo.loss, loss_names),
        ("model.engine", cfg.model.engine, engine_kinds),
    ]
    if cfg.rollout.chat_format != "auto":
        names.append(("rollout.chat_format", cfg.rollout.chat_format, chat_format_names))
    if cfg.rollout.parser is not None:
        names.append(("rollout.parser", cfg.rollout.parser, parser_names))
    if cfg.reward.judge is not None:
        names.append(("reward.judge.engine", cfg.reward.judge.engine, engine_kinds))
    if cfg.distill is not None:
        names.append(("distill.engine", cfg.distill.engine, engine_kinds))
    return names


def _unknown(name: str, known: Callable[[], Sequence[str]]) -> str | None:
    """Why `name` names nothing (with the closest known name), or None; a `module:function` loss is
    imported, which registers it."""
    if known is loss_names and ":" in name:
        try:
            loss_reduction(name)
        except LoadError as error:  # the module or the name is not there: its message names the key
            return str(error).removeprefix("grpo.loss: ")
        except KeyError as error:
            return str(error.args[0])
        return None
    if name in known():
        return None
    close = difflib.get_close_matches(name, known(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown name {name!r}{hint}; known: {', '.join(known())}"


def _import_specs(cfg: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, value) of every set field annotated `ImportSpec`, in nested sections too."""
    found = []
    hints = typing.get_type_hints(type(cfg), include_extras=True)
    for field in dataclasses.fields(cfg):
        value, key = getattr(cfg, field.name), f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            found.extend(_import_specs(value, f"{key}."))
        elif isinstance(value, str) and _is_import_spec(hints[field.name]):
            found.append((key, value))
    return found


def _is_import_spec(annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Annotated:
        return import_spec in typing.get_args(annotation)[1:]
    return any(_is_import_spec(arg) for arg in typing.get_args(annotation))  # ImportSpec | None


class Runtime:
    """The tools, the reward runner and the Agent of one run (see the module docstring).

    `start()` starts the tools (their server processes) and `close()` stops them; the engine stays
    the caller's to close. The reward runner is built on first use, so a stepper, which never
    scores, never loads the config's reward function."""

    def __init__(
        self,
        cfg: RunConfig,
        tools: ToolSet | None,
        objects: RunObjects,
        policy: Policy | None = None,
        engine: Engine | None = None,
        reward: RewardRunner | None = None,
    ):
        self.cfg = cfg
        self.tools = tools
        self.objects = objects
        self.policy = policy
        self.engine = engine
        self._reward = reward

    @classmethod
    def from_config(
        cls,
        cfg: RunConfig,
        objects: RunObjects | None = None,
        policy: Policy | Engine | None = None,
        *,
        engine: Engine | None = None,
        reward: RewardRunner | None = None,
        shared_cache: SharedCache | None = None,
    ) -> Runtime:
        """The runtime `cfg` describes. `objects`: the kernel's reward, tools and rows, used instead of
        what `cfg` names (data/objects.py); `policy`: the Policy (the Agent's tokenizer, and its engine
        unless `engine` is given) or an engine that carries its tokenizer (`cluster.engine(...)`);
        `reward`: a runner to use as it is; `shared_cache`: the tool cache tier the job's processes
        share (module docstring). The tools file is read here, so a wrong one fails now."""
        objects = objects or RunObjects()
        if isinstance(policy, Engine):
            policy, engine = None, engine or policy
        tools = build_tools(cfg, objects.tools, shared_cache=shared_cache)
        runtime = cls(cfg, tools, objects, policy, engine, reward)
        _ = runtime.program  # a `rollout.program` that cannot load fails now, before any engine starts
        return runtime

    def use(self, engine: Engine, policy: Policy | None = None) -> Runtime:
        """Roll out on `engine` from now on, with `policy` when given (the trainer has its engine only
        once the backend runs, after the tools file and the reward were checked); returns self."""
        self.engine, self.policy = engine, policy or self.policy
        return self

    def use_judge(self, engine: Engine) -> RewardRunner:
        """The reward runner with the judge `reward.judge` declares, on `engine` (the backend started
        it): the training reward or logged beside it, as `reward.judge.use` says; returns the runner."""
        judge = self.cfg.reward.judge
        if judge is None:
            raise ConfigError("this run declares no judge (reward.judge)")
        self._reward = self.reward.with_function("judge", LLMJudge.from_config(judge, engine), first=judge.use == "reward")
        return self._reward

    @property
    def reward(self) -> RewardRunner:
        """The run's reward runner: the kernel's functions, else the config's `reward.function`; with
        an environment, its own reward too, as "env" (first or logged beside, `rollout.env_reward`).
        The default function reads a ground truth: with rows that carry none, an environment's reward
        trains alone, and without one the rows are refused (DatasetError) before any model loads."""
        if self._reward is None:
            use = self.env_reward_use()
            env = EnvReward(self.cfg.rollout.env_error_reward or 0.0)
            if self.names_reward() or self._rows_carry_ground_truth():
                runner = RewardRunner.from_config(self.cfg.reward, self.objects.reward)
                self._reward = runner if use == "off" else runner.with_function("env", env, first=use == "reward")
            elif use == "reward":
                self._reward = RewardRunner.from_config(self.cfg.reward, {"env": env})
            else:
                raise DatasetError(
                    f"the rows have no 'ground_truth' column, which the run's reward reads "
                    f"(reward.function: {self.cfg.reward.function}, the default): add the column, name a "
                    "reward of your own (reward.function, or reward= from the kernel), or give an "
                    "environment that owns the reward (env=, rollout.env_reward)"
                )
        return self._reward

    def names_reward(self) -> bool:
        """Whether the run names a reward of its own (the kernel's, or a `reward.function` of the config's)."""
        return self.objects.reward is not None or self.cfg.reward.function != RewardConfig().function

    def _rows_carry_ground_truth(self) -> bool:
        """Whether the run's rows (their first: a dataset has one shape) carry a ground truth."""
        rows = self.objects.train_data or self.objects.eval_data or load_rows(self.cfg.data.train, 1)
        return "ground_truth" in rows[0]

    @property
    def program(self) -> AgentProgram | None:
        """The run's agent program (the kernel's, else `rollout.program`), or None: the built-in loop."""
        if self.objects.agent is None and self.cfg.rollout.program is not None:
            self.objects = dataclasses.replace(self.objects, agent=AgentProgram(self.cfg.rollout.program))
        return self.objects.agent

    @property
    def env(self) -> Any:
        """The run's Environment class or factory (the kernel's, else `rollout.env`); None: the ToolSet."""
        return self.objects.env if self.objects.env is not None else self.cfg.rollout.env

    def env_reward_use(self) -> str:
        """How the environment's reward is used: "reward", "logged" or "off" (`rollout.env_reward`;
        "auto" trains on it unless the run names a reward function of its own)."""
        use = self.cfg.rollout.env_reward
        if self.env is None:
            return "off"
        if use != "auto":
            return use
        return "logged" if self.names_reward() else "reward"

    def settings(self, temperature: float | None = None, drift: DriftMode | None = None) -> RolloutSettings:
        """The run's `RolloutSettings` at `temperature` (None: the config's; 0: greedy); `drift`
        replaces `rollout.drift_check`. The reasoning mode, where `rollout.enable_thinking` is unset,
        is the one the model was trained in (`thinking_mode`)."""
        return RolloutSettings.from_config(
            self.cfg, trained_thinking=thinking_mode(self.cfg), temperature=temperature, drift=drift, env=self.objects.env
        )

    def agent(self, temperature: float | None = None, drift: DriftMode | None = None) -> EpisodePlayer:
        """The run's player with `settings(temperature, drift)`: its Agent, or its agent program bound
        to the run (the same settings, the same environment)."""
        if self.policy is None and self.engine is None:
            raise ConfigError("this runtime has neither a policy nor an engine: Runtime.from_config(cfg, objects, policy)")
        settings = self.settings(temperature, drift)
        if self.program is not None:
            return self.program.bind(self.policy, self.tools, engine=self.engine, settings=settings)
        return Agent.from_settings(settings, self.policy, self.tools, engine=self.engine)

    # ------------------------------------------------------------------ the run's rows

    def train_rows(self, limit: int | None = None) -> list[Row]:
        """The training rows (the kernel's, else the config's `data.train`), at most `limit`."""
        kept = self.objects.train_data
        if kept:
            return self.checked(kept[:limit], "train_data")
        return self.checked(load_rows(self.cfg.data.train, limit), "data.train")

    def eval_rows(self) -> list[Row]:
        """The held-out rows (the kernel's, else the config's `data.eval`), at most `data.eval_size`."""
        size, kept = self.cfg.data.eval_size, self.objects.eval_data
        if kept:
            return self.checked(kept[:size], "eval_data")
        return self.checked(load_rows(self.cfg.data.eval, size), "data.eval")

    def checked(self, rows: list[Row], what: str) -> list[Row]:
        """`rows`, once each is known to have a prompt where no environment writes one (DatasetError)."""
        if self.env is None:
            require_prompts(rows, what)
        return rows

    # ------------------------------------------------------------------ views over it

    def stepper(self, prompt: str | Sequence[Message] | Row | None = None) -> Any:
        """A RolloutStepper over `agent()` (start the tools first); `prompt` (text, messages or a
        dataset row) defaults to the first training row."""
        return view_of(self.agent(), prompt=prompt if prompt is not None else self.train_rows(1)[0])

    def reward_lab(
        self, dataset: Sequence[Row] | str | None = None, rewards: RewardFunctions | None = None, **options: Any
    ) -> RewardLab:
        """A RewardLab sampling with `agent()`, with training's group size, reward scaling and reward
        timeout unless `options` say otherwise. `dataset` defaults to the run's training rows,
        `rewards` to the run's reward functions."""
        settings = {
            "group_size": self.cfg.grpo.group_size,
            "scale_rewards": self.cfg.grpo.scale_rewards,
            "timeout_s": self.cfg.reward.timeout_s,
            **options,
        }
        rows = dataset if dataset is not None else self.train_rows()
        return RewardLab(self.agent(), rows, rewards if rewards is not None else self.reward.functions, **settings)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Runtime:
        """Start the tools (their servers); returns self."""
        if self.tools is not None:
            await self.tools.start()
        return self

    def start_sync(self) -> Runtime:
        """`start` from a plain script or a notebook cell."""
        if self.tools is not None:
            self.tools.start_sync()
        return self

    async def close(self) -> None:
        """Stop the tools this runtime started and a program's endpoint (the engine is the caller's)."""
        if self.objects.agent is not None:
            await self.objects.agent.close()
        if self.tools is not None and self.tools.started:
            await self.tools.stop()
