"""RewardLab: live samples scored by several reward functions side by side, before any training.

A reward that GRPO cannot learn from usually looks fine on one sample. It shows up across groups:
every sample of a prompt scores the same (a zero-variance group: advantage 0, no gradient), a
function returns one value whatever the model does, or the model never calls a tool, so a
tool-based reward is constant. The lab samples `group_size` rollouts for each of a few prompts,
scores them with every function, computes the advantages each sample would get in training, and
says which of these traps the current setup falls into.

The lab is a plain object: `sample`, `rescore`, `table()` (a pandas DataFrame), `advantages`,
`warnings()`; `view()` draws it (rlfactory_nb/widgets/reward_lab.py). After editing a reward
function in a cell, `await lab.rescore(mine=mine)` scores the same rollouts again. Group rewards
(`@rf.rewards.group_reward`) are scored once per prompt's group, as in training.

The lab hands its reward to training: `rf.launch(cfg, cluster, reward=lab.reward("mine"))` in the
same kernel, or `lab.save_reward(path, "mine")` and, in another kernel (notebook 03 after 02),
`rf.RewardLab.load_reward(path)`.
"""

from __future__ import annotations

import functools
import html
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlfactory_nb._async import run_sync
from rlfactory_nb._views import view_of
from rlfactory_nb.algo.advantages import group_advantages, zero_variance_groups
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.data.readable import source_listing
from rlfactory_nb.data.rows import Row, load_rows
from rlfactory_nb.errors import ConfigError, LabNotSampled, RegistryKeyError
from rlfactory_nb.rewards.runner import RewardOutcome, RewardRunner
from rlfactory_nb.rollout.groups import rollout_groups
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.signing import check_file, sign_file
from rlfactory_nb.types import Sample, Trajectory

if TYPE_CHECKING:
    import pandas as pd

    from rlfactory_nb.rollout.agent import Agent

RewardFunctions = Callable[[Sample], Any] | Mapping[str, Callable[[Sample], Any]]


class LabWarnings(list[str]):
    """The traps a lab's samples show: a list of str that reads as a list in a notebook."""

    def __repr__(self) -> str:
        if not self:
            return "no warnings: every reward varies within some group"
        return "\n".join(f"- {message}" for message in self)

    def _repr_html_(self) -> str:
        if not self:
            return f"<div style='color:#1b7f3b'>{html.escape(repr(self))}</div>"
        items = "".join(f"<li>{html.escape(message)}</li>" for message in self)
        return f"<div style='color:#b35c00'><b>warnings</b><ul class='rf-warnings'>{items}</ul></div>"


class RewardLab:
    def __init__(
        self,
        agent: Agent,
        dataset: Sequence[Row] | str,
        rewards: RewardFunctions,
        group_size: int = 8,
        scale_rewards: bool = True,
        timeout_s: float = 60.0,
    ):
        if group_size < 2:
            raise ConfigError(f"group_size must be >= 2 (advantages compare samples of one prompt), got {group_size}")
        self.agent = agent
        self.rows = _rows(dataset)
        self.rewards = dict(rewards) if isinstance(rewards, Mapping) else {getattr(rewards, "__name__", "reward"): rewards}
        self.group_size = group_size
        self.scale_rewards = scale_rewards
        self.timeout_s = timeout_s
        self.groups: list[list[Trajectory]] = []
        self.outcomes: list[list[RewardOutcome]] = []
        self._on_change: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ sampling and scoring

    async def sample(self, n_prompts: int = 8, start: int = 0) -> RewardLab:
        """Roll out `group_size` samples for rows[start : start + n_prompts], then score them. With
        an environment, each episode's instance stays open (rewards read `sample.env`, rescoring
        too) until the next `sample`, which closes them first."""
        rows = self.rows[start : start + n_prompts]
        if not rows:
            raise ConfigError(f"no dataset rows in [{start}, {start + n_prompts}); the dataset has {len(self.rows)}")
        await self.agent.close_episodes(self.groups and [traj for group in self.groups for traj in group])
        draw = random.getrandbits(32)  # named samples, as training's: a group's members play one task
        named = functools.partial(SampleId, draw, 0)
        self.groups = await rollout_groups(self.agent, rows, self.group_size, keep_open=True, sample_ids=named)
        return await self.rescore()

    async def rescore(self, rewards: Mapping[str, Callable[[Sample], Any]] | None = None, **named: Callable[[Sample], Any]) -> RewardLab:
        """Score the current rollouts again, after replacing or adding functions by name."""
        self.rewards.update(rewards or {}, **named)
        if not self.groups:
            raise LabNotSampled("no rollouts yet: `await lab.sample(n_prompts)` first")
        runner = RewardRunner(self.rewards, on_error="zero", timeout_s=self.timeout_s)
        self.outcomes = await runner.score_groups(
            [[Sample.from_trajectory(traj, env=self._env_of(traj)) for traj in group] for group in self.groups]
        )
        for callback in self._on_change:
            callback()
        return self

    def _env_of(self, traj: Any) -> Any:
        """The episode's open environment, for rewards that read it (`sample.env`); None without an agent."""
        return None if self.agent is None else self.agent.env_of(traj)

    def sample_sync(self, n_prompts: int = 8, start: int = 0) -> RewardLab:
        return run_sync(self.sample(n_prompts, start))

    def rescore_sync(self, rewards: Mapping[str, Callable[[Sample], Any]] | None = None, **named: Any) -> RewardLab:
        return run_sync(self.rescore(rewards, **named))

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call `callback()` after every (re)scoring: how open views redraw."""
        self._on_change.append(callback)

    # ------------------------------------------------------------------ handing over to training

    def reward(self, *names: str) -> Callable[[Sample], Any] | dict[str, Callable[[Sample], Any]]:
        """The lab's reward as `launch(..., reward=)` takes it: one function by name, or several as a
        dict (the first trains, the others are logged); no names: all of them, the first training."""
        unknown = [name for name in names if name not in self.rewards]
        if unknown:
            raise RegistryKeyError(f"the lab has no reward {unknown[0]!r}; it has {', '.join(self.rewards)}")
        if len(names) == 1:
            return self.rewards[names[0]]
        return {name: self.rewards[name] for name in names or self.rewards}

    def save_reward(self, path: str | Path, *names: str) -> Path:
        """Write `reward(*names)` to `path` (pickled by value, as launch sends it) with its source
        next to it (`path` with .py), for another kernel: `RewardLab.load_reward(path)`."""
        objects = RunObjects.of(reward=self.reward(*names))
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = objects.dumps()
        path.write_bytes(data)
        sign_file(path, data)
        header = (
            f"The lab reward saved by RewardLab.save_reward, for reading: this file is never run. "
            f"RewardLab.load_reward loads the pickled copy, {path.name}, in this folder."
        )
        path.with_suffix(".py").write_text(source_listing(objects.functions(), header), encoding="utf-8")
        return path

    @staticmethod
    def load_reward(path: str | Path, if_missing: Any = FileNotFoundError, trust_run_objects: bool = False) -> Any:
        """What `save_reward` wrote, when this user's signature is beside it (`<path>.sig.json`, the
        run folders' rule: signing.py) or `trust_run_objects`: unpickling runs its code. When
        there is no such file, `if_missing` (e.g. None: use the config's reward) unless it is the default."""
        path = Path(path)
        if not path.exists() and if_missing is not FileNotFoundError:
            return if_missing
        data = path.read_bytes()
        if not trust_run_objects:
            check_file(path, data, path.with_suffix(".py"))
        return RunObjects.loads(data).reward

    # ------------------------------------------------------------------ what the samples say

    @property
    def names(self) -> list[str]:
        return list(self.rewards)

    def scores(self, name: str | None = None) -> torch.Tensor:
        """(N prompts, G samples) scores of one function (default: the first); 0 where it failed."""
        name = name or self.names[0]
        return torch.tensor([[o.components.get(name, 0.0) for o in group] for group in self.outcomes])

    def advantages(self, name: str | None = None) -> torch.Tensor:
        """(N, G): the GRPO advantage each sample would get if `name` were the training reward."""
        return group_advantages(self.scores(name), scale=self.scale_rewards)

    def table(self) -> pd.DataFrame:
        """One row per sample: prompt, answer, ground truth, every score, the advantage (of the first
        reward), tool use, and reward errors."""
        import pandas as pd

        columns = [
            "prompt", "sample", "question", "answer", "ground_truth", *self.names,
            "advantage", "tool_calls", "turns", "finish", "errors",
        ]  # fmt: skip
        advantages = self.advantages() if self.outcomes else None
        rows = []
        for p, (group, outcomes) in enumerate(zip(self.groups, self.outcomes)):
            for s, (traj, outcome) in enumerate(zip(group, outcomes)):
                sample = Sample.from_trajectory(traj)
                rows.append(
                    {
                        "prompt": p,
                        "sample": s,
                        "question": sample.prompt[-1]["content"] if sample.prompt else "",
                        "answer": sample.final_answer,
                        "ground_truth": sample.ground_truth,
                        **{name: outcome.components.get(name, 0.0) for name in self.names},
                        "advantage": float(advantages[p, s]),
                        "tool_calls": len(sample.tool_calls),
                        "turns": sample.num_turns,
                        "finish": sample.finish_reason,
                        "errors": "; ".join(_errors(traj, outcome)),
                    }
                )
        return pd.DataFrame(rows, columns=columns)

    def warnings(self) -> LabWarnings:
        """The traps this setup falls into (see the module docstring); empty when none."""
        found = LabWarnings()
        if not self.outcomes:
            return found
        trajectories = [traj for group in self.groups for traj in group]
        if self.agent.tools is not None and not any(traj.tool_calls() for traj in trajectories):
            found.append(_no_tool_call(trajectories))
        for name in self.names:
            scores = self.scores(name)
            if bool((scores == scores.flatten()[0]).all()):
                found.append(f"reward {name!r} is {float(scores.flatten()[0]):g} for every sample: it never changes, so it teaches nothing")
                continue
            flat = zero_variance_groups(scores)
            if bool(flat.any()):
                found.append(
                    f"reward {name!r}: {int(flat.sum())} of {len(flat)} groups have zero variance (all samples of the "
                    "prompt score the same): their advantages are 0 and they are dropped from training"
                )
        failures = sum(len(o.errors) for group in self.outcomes for o in group)
        if failures:
            found.append(f"{failures} reward call(s) failed and scored 0; see the 'errors' column")
        malformed = sum(len(turn.parse_errors) for traj in trajectories for turn in traj.turns)
        if malformed and any(traj.tool_calls() for traj in trajectories):
            found.append(f"{malformed} tool call(s) could not be parsed and never ran; see the 'errors' column")
        return found

    def view(self) -> Any:
        """A notebook widget (RewardLabView): warnings, the table, histograms, advantages, trajectories."""
        return view_of(self)


def _no_tool_call(trajectories: list[Trajectory]) -> str:
    """The "no tool call" warning, saying whether the model never tried or tried and failed to parse."""
    malformed = [error for traj in trajectories for turn in traj.turns for error in turn.parse_errors]
    tried = sum(1 for traj in trajectories if any(turn.parse_errors for turn in traj.turns))
    if not malformed:
        return (
            f"no tool call fired in {len(trajectories)} samples: the model never tried to call a tool, so "
            "tool-based rewards cannot vary (check the system prompt, or that the model knows the tools)"
        )
    first = malformed[0].message
    return (
        f"no tool call fired in {len(trajectories)} samples: the model tried in {tried} of them, but none of its "
        f"{len(malformed)} call(s) parsed (first: {first}); see the 'errors' column (check the parser "
        "(rollout.parser / chat_format) or max_new_tokens, which may cut a call short)"
    )


def _errors(traj: Trajectory, outcome: RewardOutcome) -> list[str]:
    """A sample's errors: tool calls that did not parse (they never ran), then failed reward calls."""
    parsed = [f"tool call did not parse: {error.message}" for turn in traj.turns for error in turn.parse_errors]
    return parsed + [f"reward: {error}" for error in outcome.errors]


def _rows(dataset: Sequence[Row] | str) -> list[Row]:
    if isinstance(dataset, str):
        return load_rows(dataset)
    return list(dataset)
