"""On-policy distillation as an advantage: the teacher's per-token reverse KL on the student's samples.

The student samples a trajectory; a teacher scores the very token ids it sampled. For a sampled
token x_t the single-sample estimate of the reverse KL, KL(student || teacher), is

    kl_t = log p_student(x_t | x_<t) - log p_teacher(x_t | x_<t)

and the advantage of that token is -coef * kl_t (Agarwal et al. 2024, "On-Policy Distillation of
Language Models"; Thinking Machines, "On-Policy Distillation", 2025): a token the teacher finds more
likely than the student did is pushed up, one it finds less likely is pushed down, with the usual
policy-gradient loss. It is dense (every sampled token gets its own value) where a reward is one
number per trajectory, so it can stand alone or be added to the group-relative advantage.

Only trained tokens count (loss mask 1: the tokens the policy sampled); tool results, user turns
and template tokens get 0 whatever the models say about them, in every multi-turn shape alike.

Every tensor here is aligned with a trajectory's `response_ids` and padded on the right: (B, R).
"""

from __future__ import annotations

import torch
from torch import Tensor


def reverse_kl(student: Tensor, teacher: Tensor, mask: Tensor) -> Tensor:
    """Per-token reverse KL estimate of the sampled tokens: student - teacher log-prob, 0 off the mask.

    student, teacher (B, R) float: the log-prob of each response token under each model; mask (B, R)
    bool or 0/1 -> (B, R) float32.

    >>> reverse_kl(torch.tensor([[-1.0, -2.0, -0.5]]), torch.tensor([[-1.5, -9.0, -0.25]]),
    ...            torch.tensor([[1, 0, 1]])).tolist()
    [[0.5, 0.0, -0.25]]
    """
    trained = mask.bool()
    gap = student.float() - teacher.float()  # (B, R)
    return torch.where(trained, gap, torch.zeros_like(gap))


def distill_advantages(kl: Tensor, mask: Tensor, coef: float, base: Tensor | None = None) -> Tensor:
    """Per-token advantages: -coef * kl on trained tokens, plus `base` (the reward's advantage).

    kl (B, R) from `reverse_kl`; mask (B, R); base None (distillation alone), (B,) one advantage per
    trajectory, or (B, R) one per token -> (B, R) float32. Off the mask the value is `base`'s (or 0):
    the loss never reads it there.

    >>> kl = torch.tensor([[0.5, 0.0, -0.25]])
    >>> distill_advantages(kl, torch.tensor([[1, 0, 1]]), coef=2.0).tolist()
    [[-1.0, 0.0, 0.5]]
    >>> distill_advantages(kl, torch.tensor([[1, 0, 1]]), coef=2.0, base=torch.tensor([1.0])).tolist()
    [[0.0, 1.0, 1.5]]
    """
    kl = kl.float()
    term = torch.where(mask.bool(), -coef * kl, torch.zeros_like(kl))  # (B, R)
    if base is None:
        return term
    base = base.float()
    return term + (base.unsqueeze(-1) if base.dim() == 1 else base)


def mean_reverse_kl(kl: Tensor, mask: Tensor) -> float:
    """The mean of `kl` over trained tokens (0.0 when there are none): the `distill/reverse_kl` metric.

    >>> mean_reverse_kl(torch.tensor([[0.5, 7.0, -0.25]]), torch.tensor([[1, 0, 1]]))
    0.125
    """
    trained = mask.bool()
    count = int(trained.sum())
    return float(kl.float()[trained].sum() / count) if count else 0.0
