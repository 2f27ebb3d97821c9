"""Credit assignment: which tokens of a step's trajectories get how much advantage (`grpo.advantage`).

- "episode": one group-relative advantage per trajectory (algo.advantages.group_advantages); when
  the reward functions return `turn_scores`, each turn its reward-to-go (`turn_advantages`).
- "turn": each assistant turn its group-relative reward-to-go over per-turn rewards. A turn's reward
  is what the environment gave with its answer to that turn (`Response.reward`, kept as
  `Turn.env_reward`), and the last turn gets the rest of the episode's score, so a trajectory's return
  is still its score: the environment's rewards only move credit to the turns that earned it.
- "step_groups": the episode's advantage on every turn, plus `step_weight` times a step advantage
  (GiGPO, Feng et al. 2025): within a group, the turns that start from the same environment state are
  compared by their reward-to-go (`step_group_advantages`). The state a turn starts from is the
  environment's `state()` before it (the reset's for the first turn); an environment that shows none
  is keyed by the turn's whole context (the token ids before it), which is the same only when the
  histories are. `step_group_scope` says where the same state is looked for: among a group's siblings
  ("group", GiGPO's anchor states), or across every group of the step ("batch"). "batch" is valid
  when the state key is what the policy observes (no hidden task in it): then the turns compared from
  one state average over the hidden tasks (the guessing game's secrets), where within one group they
  compare luck on one task (docs/decisions.md).

Rows stay one per trajectory; "turn" and "step_groups" give a list of per-token advantages per
trajectory, aligned with `response_ids` (0 on tokens outside assistant turns). An agent program's
episode may hold several segments (programs/assembly.py): a turn is then a model call, wherever its
tokens landed, and the list covers every segment's response tokens in order (earlier segments first),
which `expand_segments` splits into one list per training row.
"""

from __future__ import annotations

import json

import torch

from rlfactory_nb.algo.advantages import (
    group_advantages,
    reward_to_go,
    step_group_advantages,
    turn_advantages,
)
from rlfactory_nb.errors import ConfigError
from rlfactory_nb.programs.assembly import segment_trajectories, token_turns
from rlfactory_nb.rewards.runner import RewardOutcome
from rlfactory_nb.types import Trajectory

Advantages = torch.Tensor | list[list[float]]
"""(N*G,) one per trajectory, or one list of per-token values per trajectory"""


def assign_credit(
    mode: str, groups: list[list[Trajectory]], rewards: torch.Tensor, outcomes: list[list[RewardOutcome]],
    scale: bool, gamma: float = 1.0, step_weight: float = 1.0, step_group_scope: str = "group",
) -> Advantages:
    """The advantages of `groups` (N groups of G) under `mode` (module docstring); rewards (N, G)."""
    if not groups:
        return torch.zeros(0)
    given = all(o.turn_scores for group in outcomes for o in group)
    if mode == "episode":
        if not given:
            return group_advantages(rewards, scale=scale).flatten()
        return _by_turn(groups, [[o.turn_scores for o in g] for g in outcomes], scale, gamma)
    per_turn = [[list(o.turn_scores) if given else turn_rewards(t, o.score) for t, o in zip(g, s)] for g, s in zip(groups, outcomes)]
    if mode == "turn":
        return _by_turn(groups, per_turn, scale, gamma)
    if mode == "step_groups":
        return _with_step_groups(groups, rewards, per_turn, scale, gamma, step_weight, step_group_scope)
    raise ConfigError(f"grpo.advantage must be episode, turn or step_groups, got {mode!r}")


def turn_rewards(traj: Trajectory, score: float) -> list[float]:
    """One reward per assistant turn: the environment's for each turn but the last, which gets the rest
    of `score` (so the turns sum to it).

    >>> from rlfactory_nb.types import Turn
    >>> turns = [Turn(text="3", env_reward=0.1), Turn(text="5"), Turn(text="4", env_reward=1.0)]
    >>> traj = Trajectory(prompt_ids=[1], turns=turns)
    >>> turn_rewards(traj, 0.9)
    [0.1, 0.0, 0.8]
    """
    if not traj.turns:
        return []
    earlier = [float(turn.env_reward or 0.0) for turn in traj.turns[:-1]]
    return [*earlier, float(score) - sum(earlier)]


def state_keys(traj: Trajectory) -> list[str]:
    """A key of the state each assistant turn starts from (module docstring)."""
    keys = []
    for k, (row, start) in enumerate(_turn_starts(traj)):
        state = traj.metadata.get("env_state") if k == 0 else (traj.turns[k - 1].state if k - 1 < len(traj.turns) else None)
        if state is not None:
            keys.append("state:" + json.dumps(state, sort_keys=True, default=str))
        else:
            keys.append("context:" + ",".join(map(str, [*row.prompt_ids, *row.response_ids[:start]])))
    return keys


def turn_advantage_means(traj: Trajectory, per_token: list[float]) -> list[float]:
    """The advantage of each assistant turn of `traj` (the mean over its tokens), for the views."""
    index = torch.tensor(_episode_turns(traj), dtype=torch.long)
    values = torch.tensor(per_token[: len(index)], dtype=torch.float32)
    index = index[: len(values)]
    return [round(float(values[index == k].mean()), 4) for k in range(int(index.max()) + 1)] if index.numel() else []


def record_turn_advantages(trajectories: list[Trajectory], advantages: Advantages) -> None:
    """Per-token credit: each trajectory's turn advantages into `metadata["turn_advantages"]`, where
    the trajectory view shows them beside each turn."""
    if isinstance(advantages, list):
        for traj, per_token in zip(trajectories, advantages):
            traj.metadata["turn_advantages"] = turn_advantage_means(traj, per_token)


def _episode_turns(traj: Trajectory) -> list[int]:
    """The turn of each response token of the episode's rows, in order (-1: not sampled)."""
    return [turn for row in token_turns(traj) for turn in row]


def _turn_starts(traj: Trajectory) -> list[tuple[Trajectory, int]]:
    """Where each turn begins: (its training row, the index of its first response token there)."""
    starts: dict[int, tuple[Trajectory, int]] = {}
    for row, turns in zip(segment_trajectories(traj), token_turns(traj)):
        for position, turn in enumerate(turns):
            if turn >= 0 and turn not in starts:
                starts[turn] = (row, position)
    return [starts[k] for k in sorted(starts)]


def _token_turns(groups: list[list[Trajectory]]) -> torch.Tensor:
    """(N*G, T): the turn of each response token (-1: none), over every row of each episode."""
    flat = [_episode_turns(traj) for group in groups for traj in group]
    width = max(max(len(turns) for turns in flat), 1)
    token_turn = torch.full((len(flat), width), -1, dtype=torch.long)
    for row, turns in enumerate(flat):
        token_turn[row, : len(turns)] = torch.tensor(turns, dtype=torch.long)
    return token_turn


def _padded(per_turn: list[list[float]], turns: int) -> torch.Tensor:
    table = torch.zeros(len(per_turn), turns)
    for row, values in enumerate(per_turn):
        table[row, : len(values)] = torch.tensor(values[:turns], dtype=torch.float32)
    return table


def _by_turn(groups: list[list[Trajectory]], per_turn: list[list[list[float] | None]], scale: bool, gamma: float) -> list[list[float]]:
    flat_scores = [list(s or []) for group in per_turn for s in group]
    token_turn = _token_turns(groups)
    width = token_turn.shape[-1]
    turns = max(max(len(s) for s in flat_scores), int(token_turn.max()) + 1, 1)
    size = len(groups[0])
    per_token = turn_advantages(
        _padded(flat_scores, turns).view(len(groups), size, turns), token_turn.view(len(groups), size, width),
        scale=scale, gamma=gamma,
    ).view(-1, width)
    return _rows(groups, per_token)


def _with_step_groups(
    groups: list[list[Trajectory]], rewards: torch.Tensor, per_turn: list[list[list[float]]],
    scale: bool, gamma: float, step_weight: float, scope: str,
) -> list[list[float]]:
    if scope not in ("group", "batch"):
        raise ConfigError(f"grpo.step_group_scope must be group or batch, got {scope!r}")
    token_turn = _token_turns(groups)
    episode = group_advantages(rewards, scale=scale).flatten()  # (N*G,)
    turns = max(int(token_turn.max()) + 1, 1)
    returns = [reward_to_go(_padded(scores, turns), gamma) for scores in per_turn]  # N x (G, K)
    if scope == "batch":  # one id per state key over the whole step: its turns form one step group
        shared: dict[str, int] = {}
        states = [_state_ids(group, turns, shared) for group in groups]
        step = step_group_advantages(torch.cat(returns), torch.cat(states), scale=scale)
    else:
        states = [_state_ids(group, turns, {}) for group in groups]
        step = torch.cat([step_group_advantages(r, ids, scale=scale) for r, ids in zip(returns, states)])
    in_turn = token_turn >= 0  # (N*G, T)
    per_token = episode.unsqueeze(-1) + step_weight * step.gather(-1, token_turn.clamp(min=0))  # (N*G, T)
    return _rows(groups, torch.where(in_turn, per_token, torch.zeros_like(per_token)))


def _state_ids(group: list[Trajectory], turns: int, ids: dict[str, int]) -> torch.Tensor:
    """(G, K): the id in `ids` (new keys added) of the state each turn of `group` starts from; -1: no turn k."""
    states = torch.full((len(group), turns), -1, dtype=torch.long)
    for row, traj in enumerate(group):
        for k, key in enumerate(state_keys(traj)[:turns]):
            states[row, k] = ids.setdefault(key, len(ids))
    return states


def _rows(groups: list[list[Trajectory]], per_token: torch.Tensor) -> list[list[float]]:
    flat = [traj for group in groups for traj in group]
    lengths = [sum(len(row.response_ids) for row in segment_trajectories(traj)) for traj in flat]
    return [per_token[row, :length].tolist() for row, length in enumerate(lengths)]
