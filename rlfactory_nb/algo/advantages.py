"""Group-relative advantages: how much better one rollout did than its siblings on the same prompt.

GRPO (Shao et al. 2024) replaces a learned value function with the other samples of the same prompt:
a rollout's advantage is its reward minus the group mean, optionally divided by the group std.
Dr. GRPO (Liu et al. 2025) argues the std division over-weights near-unanimous groups and drops it
(`scale=False`).

The std is the population std (`unbiased=False`): the group *is* the whole sample being normalized,
not an estimate of a wider population, and with it a group of two rewards {0, 1} maps to exactly
{-1, +1}. (Bessel's correction would give +-0.71 for G=2 and make the scale depend on G.)

A group whose rewards are all equal carries no signal: its advantages are exactly 0 (never NaN),
and `zero_variance_groups` finds such groups so the loop can drop them.

Per-turn rewards (a reward for each assistant turn, e.g. for a well-formed tool call) use
reward-to-go, the standard REINFORCE credit assignment (Williams 1992; Sutton & Barto ch. 13): an
action is credited with the rewards that come at or after it, never with earlier ones it could not
influence. See `turn_advantages` for the exact definition.
"""

from __future__ import annotations

import torch
from torch import Tensor


def zero_variance_groups(rewards: Tensor) -> Tensor:
    """True for each group whose rewards are all exactly equal.

    rewards (G,) -> () or (N, G) -> (N,), bool.

    >>> zero_variance_groups(torch.tensor([[1.0, 1.0], [0.0, 1.0]])).tolist()
    [True, False]
    """
    return (rewards == rewards[..., :1]).all(dim=-1)


def group_advantages(rewards: Tensor, scale: bool = True, eps: float = 1e-6) -> Tensor:
    """Mean-centred rewards per group, divided by the group's population std when `scale`.

    rewards (G,) or (N, G) -> same shape; each row of G rewards is one group (one prompt).
    A zero-variance group gets exactly 0.

    >>> group_advantages(torch.tensor([0.0, 1.0]), eps=0.0).tolist()
    [-1.0, 1.0]
    >>> group_advantages(torch.tensor([0.0, 1.0, 2.0]), scale=False).tolist()
    [-1.0, 0.0, 1.0]
    """
    rewards = _as_float(rewards)
    _check_groups(rewards, "rewards")
    flat = zero_variance_groups(rewards).unsqueeze(-1)  # (..., 1)
    # An all-equal group's float mean may be off by one ulp; use the value itself so the result is exactly 0.
    mean = torch.where(flat, rewards[..., :1], rewards.mean(dim=-1, keepdim=True))  # (..., 1)
    centred = rewards - mean
    if not scale:
        return centred
    std = rewards.std(dim=-1, keepdim=True, unbiased=False)  # (..., 1)
    # A flat group is all zeros already; dividing it by 1 keeps it so even when eps is 0.
    return centred / torch.where(flat, torch.ones_like(std), std + eps)


def reward_to_go(turn_rewards: Tensor, gamma: float = 1.0) -> Tensor:
    """Discounted reward-to-go of each turn: R_k = sum_{j >= k} gamma^(j - k) r_j.

    turn_rewards (..., K) -> (..., K). With gamma = 1 it is the plain suffix sum; R_0 is the return.

    >>> reward_to_go(torch.tensor([1.0, 0.0, 2.0]), gamma=0.5).tolist()
    [1.5, 1.0, 2.0]
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    turn_rewards = _as_float(turn_rewards)
    to_go = torch.zeros_like(turn_rewards)
    running = torch.zeros_like(turn_rewards[..., 0])  # (...,)
    for k in range(turn_rewards.shape[-1] - 1, -1, -1):  # K is a handful of turns
        running = turn_rewards[..., k] + gamma * running
        to_go[..., k] = running
    return to_go


def turn_advantages(
    turn_rewards: Tensor, token_turn: Tensor, scale: bool = True, eps: float = 1e-6, gamma: float = 1.0
) -> Tensor:
    """Token-level advantages from per-turn rewards, by group-relative reward-to-go.

    turn_rewards (G, K) or (N, G, K): reward of each assistant turn k of each trajectory in a group;
        a trajectory with fewer than K turns is padded with 0.
    token_turn (G, T) or (N, G, T): the turn each response token belongs to, -1 for tokens in no
        assistant turn (template, tool output); see `turn_index`.
    returns (G, T) or (N, G, T): the advantage of each response token, 0 where token_turn == -1.

    Definition. For trajectory i with turn rewards r_i0..r_iK-1:
        reward-to-go  R_ik = sum_{j >= k} gamma^(j-k) r_ij   (R_i0 is the trajectory's return)
        advantage     A_ik = (R_ik - mean_g R_g0) / (std_g R_g0 + eps)
    and every token of turn k gets A_ik. The baseline and scale are the group's *return* statistics,
    the same numbers `group_advantages` uses: turn positions do not line up across a group (one
    rollout's turn 2 may be another's final answer), so comparing turns index by index would be
    comparing unlike things. A consequence worth relying on: with only an outcome reward (all reward
    on the last turn) every turn's R_ik is the return and this equals `group_advantages` on every token.
    A group whose returns spread by no more than eps is not scaled (std division would blow up
    differences in *when* equal totals arrived); one whose returns are all equal and whose rewards
    all arrive on the last turn gets exactly 0.
    """
    turn_rewards = _as_float(turn_rewards)
    if turn_rewards.dim() not in (2, 3) or token_turn.shape[:-1] != turn_rewards.shape[:-1]:
        raise ValueError(
            f"turn_rewards must be (G, K) or (N, G, K) and token_turn (G, T) or (N, G, T) with the same "
            f"leading dims; got {tuple(turn_rewards.shape)} and {tuple(token_turn.shape)}"
        )
    num_turns = turn_rewards.shape[-1]
    if token_turn.numel() and int(token_turn.max()) >= num_turns:
        raise ValueError(
            f"token_turn refers to turn {int(token_turn.max())} but turn_rewards has only {num_turns} turns "
            "per trajectory; give one reward per assistant turn (0 for turns without one)"
        )
    to_go = reward_to_go(turn_rewards, gamma)  # (..., G, K)
    returns = to_go[..., 0]  # (..., G)
    flat = zero_variance_groups(returns).unsqueeze(-1)  # (..., 1)
    mean = torch.where(flat, returns[..., :1], returns.mean(dim=-1, keepdim=True))  # (..., 1)
    per_turn = to_go - mean.unsqueeze(-1)  # (..., G, K)
    if scale:
        std = returns.std(dim=-1, keepdim=True, unbiased=False)  # (..., 1)
        divisor = torch.where(std > eps, std + eps, torch.ones_like(std))
        per_turn = per_turn / divisor.unsqueeze(-1)
    in_turn = token_turn >= 0  # (..., G, T)
    per_token = per_turn.gather(-1, token_turn.clamp(min=0).long())  # (..., G, T)
    return torch.where(in_turn, per_token, torch.zeros_like(per_token))


def step_group_advantages(returns: Tensor, state_ids: Tensor, scale: bool = True, eps: float = 1e-6) -> Tensor:
    """Step-level advantages of one group's turns, compared among the turns that start from the same
    environment state (GiGPO's anchor states; Feng et al. 2025, "Group-in-Group Policy Optimization").

    returns (G, K): the (discounted) reward-to-go of each turn of each trajectory (`reward_to_go`).
    state_ids (G, K) long: an id of the state each turn started from (equal ids: the same state);
        -1 where the trajectory has no turn k.
    returns (G, K): for turn k of trajectory i in step group S = {(j, l): state_ids[j, l] == state_ids[i, k]},
        (R_ik - mean_S R) / (std_S R + eps)  (population std, no division when `scale` is False);
        0 for a step group of one turn, a group whose returns are all equal, and padding.

    The sibling trajectories of a GRPO group play the same task (rollout.env_seed: group), so the
    same state recurs across them (every episode's first turn, and any state two of them reach):
    there the comparison says which action did better from that very state.

    >>> step_group_advantages(torch.tensor([[1.0, 1.0], [0.0, 0.0]]), torch.tensor([[0, 1], [0, 2]]), scale=False).tolist()
    [[0.5, 0.0], [-0.5, 0.0]]
    """
    returns = _as_float(returns)
    if returns.dim() != 2 or state_ids.shape != returns.shape:
        raise ValueError(
            f"returns and state_ids must both be (G, K); got {tuple(returns.shape)} and {tuple(state_ids.shape)}"
        )
    valid = state_ids >= 0  # (G, K)
    ids = state_ids[valid]  # (M,)
    values = returns[valid]  # (M,)
    if ids.numel() == 0:
        return torch.zeros_like(returns)
    _, group_of = torch.unique(ids, return_inverse=True)  # (M,): step group of each turn
    count = torch.zeros(int(group_of.max()) + 1).index_add_(0, group_of, torch.ones_like(values))  # (S,)
    mean = torch.zeros_like(count).index_add_(0, group_of, values) / count  # (S,)
    centred = values - mean[group_of]  # (M,)
    spread = torch.zeros_like(count).index_add_(0, group_of, centred**2)  # (S,)
    std = (spread / count).sqrt()  # (S,) population std
    signal = (count > 1) & (std > 0)  # (S,)
    if scale:
        centred = centred / torch.where(signal, std + eps, torch.ones_like(std))[group_of]
    advantages = torch.zeros_like(returns)
    advantages[valid] = torch.where(signal[group_of], centred, torch.zeros_like(centred))
    return advantages


def turn_index(loss_mask: Tensor) -> Tensor:
    """The assistant turn of each token: the k-th run of consecutive mask == 1 tokens is turn k.

    loss_mask (..., T) -> (..., T) long, -1 where loss_mask == 0.
    Relies on the project's mask convention (`rlfactory_nb.types`): within one assistant turn every
    generated token is sampled, and turns are separated by template or tool tokens (mask 0).

    >>> turn_index(torch.tensor([0, 1, 1, 0, 0, 1, 0, 1])).tolist()
    [-1, 0, 0, -1, -1, 1, -1, 2]
    """
    sampled = loss_mask.bool()
    previous = torch.zeros_like(sampled)
    previous[..., 1:] = sampled[..., :-1]
    starts = sampled & ~previous  # (..., T): first token of each run
    index = starts.long().cumsum(-1) - 1
    return torch.where(sampled, index, torch.full_like(index, -1))


def _as_float(x: Tensor) -> Tensor:
    return x if x.is_floating_point() else x.float()


def _check_groups(rewards: Tensor, name: str) -> None:
    if rewards.dim() not in (1, 2) or rewards.shape[-1] == 0:
        raise ValueError(
            f"{name} must be (G,) for one group or (N, G) for N groups of G rollouts; got shape "
            f"{tuple(rewards.shape)}"
        )
