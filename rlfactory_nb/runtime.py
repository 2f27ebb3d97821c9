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
from typing import TYPE_CHECKING, Any

from rlfactory_nb._views import view_of
from rlfactory_nb.config import RewardConfig, RunConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.data.rows import Row, load_rows
from rlfactory_nb.engines.base import Engine
from rlfactory_nb.envs.base import EnvReward
from rlfactory_nb.rewards.judge import LLMJudge
from rlfactory_nb.rewards.lab import RewardLab
from rlfactory_nb.rewards.runner import RewardRunner
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.tools.cache import SharedCache
from rlfactory_nb.tools.config import ToolSetSettings, ToolsFile, load_tools_config
from rlfactory_nb.tools.extra import ExtraTools, extra_tools
from rlfactory_nb.tools.toolset import ToolSet
from rlfactory_nb.types import Message

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rlfactory_nb.models.policy import Policy
    from rlfactory_nb.rewards.lab import RewardFunctions
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
        return cls(cfg, tools, objects, policy, engine, reward)

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
            raise ValueError("this run declares no judge (reward.judge)")
        self._reward = self.reward.with_function("judge", LLMJudge.from_config(judge, engine), first=judge.use == "reward")
        return self._reward

    @property
    def reward(self) -> RewardRunner:
        """The run's reward runner: the kernel's functions, else the config's `reward.function`; with
        an environment, its own reward too, as "env" (first or logged beside, `rollout.env_reward`)."""
        if self._reward is None:
            runner = RewardRunner.from_config(self.cfg.reward, self.objects.reward)
            use = self.env_reward_use()
            if use != "off":
                runner = runner.with_function("env", EnvReward(self.cfg.rollout.env_error_reward or 0.0), first=use == "reward")
            self._reward = runner
        return self._reward

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
        named = self.objects.reward is not None or self.cfg.reward.function != RewardConfig().function
        return "logged" if named else "reward"

    def agent(self, temperature: float | None = None, drift: DriftMode | None = None) -> Agent:
        """The run's Agent at `temperature` (None: the config's; 0: greedy); `drift` replaces
        `rollout.drift_check`."""
        if self.policy is None and self.engine is None:
            raise ValueError("this runtime has neither a policy nor an engine: Runtime.from_config(cfg, objects, policy)")
        return Agent.from_config(
            self.cfg, self.policy, self.tools, engine=self.engine, temperature=temperature, drift=drift, env=self.objects.env
        )

    # ------------------------------------------------------------------ the run's rows

    def train_rows(self, limit: int | None = None) -> list[Row]:
        """The training rows (the kernel's, else the config's `data.train`), at most `limit`."""
        kept = self.objects.train_data
        return kept[:limit] if kept else load_rows(self.cfg.data.train, limit)

    def eval_rows(self) -> list[Row]:
        """The held-out rows (the kernel's, else the config's `data.eval`), at most `data.eval_size`."""
        size = self.cfg.data.eval_size
        return (self.objects.eval_data or load_rows(self.cfg.data.eval, size))[:size]

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
        """Stop the tools this runtime started (the engine is the caller's)."""
        if self.tools is not None and self.tools.started:
            await self.tools.stop()
