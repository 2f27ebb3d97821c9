"""The step source: each training step's groups, rolled out, scored, and with their episodes closed.

    step k's prompts (seeded by (seed, k), train/selection.py) -> group rollouts on the engines
    (each trajectory seeded by its SampleId) -> rewards, each episode's environment still open ->
    close every episode -> dynamic sampling's extra rounds while the step lacks groups with signal

`StepSource` owns what plays the episodes (an `EpisodePlayer`: rf.Agent or rf.AgentProgram, through `rollout`, `env_of`,
`close_episodes`) and the reward runner, so an episode's whole life, from its environment's reset
to its close, happens here. The trainer only takes a step's scored groups (`take`) and says when the
engines hold new weights (`publish`); nothing here calls back into the trainer.

When a step's rollouts start is train/pipeline.py's rule (`RolloutSchedule`, grpo.max_staleness):
synchronous, a step's rollouts start when the trainer takes them; asynchronous, up to k steps start
ahead, each as its own task, while the trainer updates. A step's groups are checked against that
bound as they are taken (`check_versions`). Rollouts in flight when the run stops are discarded.

Which groups a step keeps is train/selection.py's business: a group one of whose episodes failed
before the model's first token is left out unscored (its episodes closed all the same), and
`StepGroups.trained` names the groups with signal. A Ray actor that dies during the rollouts or the
rewards fails the step with StepFailed (train/failures.py); every other error passes unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.rows import PromptOrder, Row
from rlfactory_nb.errors import TrainingError
from rlfactory_nb.rewards.runner import RewardOutcome, RewardRunner
from rlfactory_nb.rollout.groups import rollout_groups
from rlfactory_nb.rollout.player import EpisodePlayer
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.train.failures import StepGuard
from rlfactory_nb.train.metrics import StepTimer
from rlfactory_nb.train.pipeline import RolloutSchedule, check_versions
from rlfactory_nb.train.selection import Groups, StepGroups, split_failed
from rlfactory_nb.types import Sample


@dataclass(frozen=True)
class ScoredStep:
    """One step's groups as the trainer takes them: scored, their episodes closed."""

    drawn: StepGroups
    """every group the step rolled out, over all its rounds, with the outcomes of those scored"""
    seconds: dict[str, float]
    """the draw's phase times (time/rollout_s, time/reward_s), spent before or during the take"""
    waited_s: float
    """how long the trainer waited for them"""


class StepSource:
    """Steps' scored groups, generated at most `max_staleness` weight versions ahead of the trainer.

    `agent`: what plays the episodes; `rows`: the training rows; `version`: the weights the engines
    hold now (the step a run starts or resumes from); `guard`: turns an actor's death into StepFailed."""

    def __init__(
        self,
        cfg: RunConfig,
        agent: EpisodePlayer,
        reward: RewardRunner,
        rows: Sequence[Row],
        guard: StepGuard,
        version: int,
        max_staleness: int,
    ):
        self.cfg, self.agent, self.reward, self.rows, self.guard = cfg, agent, reward, rows, guard
        self.order = PromptOrder(len(rows), cfg.grpo.prompts_per_step, cfg.grpo.seed)
        self.schedule = RolloutSchedule(max_staleness, version, cfg.grpo.steps)
        self._running: dict[int, tuple[asyncio.Task[StepGroups], StepTimer]] = {}

    async def take(self, step: int) -> ScoredStep:
        """Step `step`'s groups, scored; raises what drawing them raised."""
        self._start(self.schedule.request(step))
        if step not in self._running:
            raise TrainingError(
                f"step {step}'s rollouts were never started "
                f"(next {self.schedule.next}, engines at version {self.schedule.version})"
            )
        task, timer = self._running.pop(step)
        started = time.perf_counter()
        drawn = await task
        waited_s = time.perf_counter() - started
        trajectories = [traj for group in drawn.groups for traj in group]
        check_versions(trajectories, step - 1, self.schedule.max_staleness, step)
        return ScoredStep(drawn, timer.seconds(), waited_s)

    def publish(self, version: int) -> None:
        """Every engine now holds `version` (a weight sync finished): start the rollouts that allows."""
        self._start(self.schedule.publish(version))

    def in_flight(self) -> list[int]:
        """The steps whose rollouts are being generated or wait to be taken."""
        return sorted(self._running)

    async def close(self, timeout_s: float = 30.0) -> None:
        """Discard the rollouts in flight: cancel them and wait up to `timeout_s` for them to end
        (a cancelled draw closes the episodes it holds)."""
        tasks = [task for task, _ in self._running.values()]
        self._running.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        for task in tasks:  # retrieve the exceptions, so none is reported as never retrieved
            if task.done() and not task.cancelled():
                with contextlib.suppress(BaseException):
                    task.result()

    def _start(self, steps: list[int]) -> None:
        for step in steps:
            timer = StepTimer()
            self._running[step] = (asyncio.ensure_future(self._draw(step, timer)), timer)

    async def _draw(self, step: int, timer: StepTimer) -> StepGroups:
        """Roll out and score the step's prompts, then dynamic sampling's extra rounds while needed."""
        grpo, drawn = self.cfg.grpo, StepGroups()
        extra_rounds = grpo.dynamic_sampling.max_rounds if grpo.dynamic_sampling is not None else 0
        for round_ in range(extra_rounds + 1):
            indices = self.order.indices(step) if round_ == 0 else self.order.refill(step, round_)
            with timer("rollout"), self.guard.during(step, "the rollouts", actor_deaths_only=True):
                groups = await self._rollouts(step, [self.rows[index] for index in indices], drawn.prompts)
            played, failed = split_failed(groups)
            with timer("reward"), self.guard.during(step, "the rewards", actor_deaths_only=True):
                outcomes = await self._score(played, left_out=failed)
            drawn.add(groups, outcomes)
            if len(drawn.trained(grpo)) >= grpo.prompts_per_step:
                break
        drawn.check_some_episode_ran(step)
        return drawn

    async def _rollouts(self, step: int, rows: list[Row], first: int) -> Groups:
        """Group rollouts of `rows`, rows[0] being the step's prompt `first` (prompts count on
        across rounds); each request is seeded by (seed, step, prompt, sample, turn), so a step
        samples the same tokens on every run."""
        grpo, in_flight = self.cfg.grpo, self.cfg.rollout.max_in_flight
        # rewards read `sample.env` before it closes (a shared ToolSet episode is never kept)
        return await rollout_groups(
            self.agent, rows, grpo.group_size, in_flight, keep_open=True,
            sample_ids=lambda prompt, sample: SampleId(grpo.seed, step, first + prompt, sample),
        )

    async def _score(self, groups: Groups, left_out: Groups) -> list[list[RewardOutcome]]:
        """Score `groups` with each episode's environment still open (`sample.env`), then close
        their episodes and those of the `left_out` groups, which are not scored; an episode whose
        environment failed gets `rollout.env_error_reward` (when set)."""
        agent = self.agent
        try:
            samples = [[Sample.from_trajectory(t, env=agent.env_of(t)) for t in group] for group in groups]
            outcomes = await self.reward.score_groups(samples)
        finally:
            await agent.close_episodes([traj for group in [*groups, *left_out] for traj in group])
        failed, value = "env_error", self.cfg.rollout.env_error_reward
        if value is None:
            return outcomes
        return [
            [dataclasses.replace(o, score=value) if failed in traj.metadata else o for traj, o in zip(group, scored)]
            for group, scored in zip(groups, outcomes)
        ]
