"""The distillation advantage against hand-computed cases (rlfactory_nb/algo/distill.py)."""

import math

import pytest
import torch

from rlfactory_nb.algo.distill import distill_advantages, mean_reverse_kl, reverse_kl

# Two rows of response tokens: row 0 has a tool result in the middle (mask 0), row 1 is shorter
# (padding at the end, mask 0). Log-probs chosen so the gaps are easy to add up by hand.
STUDENT = torch.tensor([[-0.5, -3.0, -1.0, -2.0], [-0.1, -0.7, 0.0, 0.0]])
TEACHER = torch.tensor([[-1.5, -0.1, -1.0, -0.5], [-0.3, -0.2, 0.0, 0.0]])
def close(actual: torch.Tensor, expected: list) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected), rtol=0, atol=1e-6)


MASK = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)


def test_reverse_kl_is_student_minus_teacher_on_trained_tokens_only():
    kl = reverse_kl(STUDENT, TEACHER, MASK)
    # row 0: 1.0, (tool token: 0), 0.0, -1.5; row 1: 0.2, -0.5, (padding: 0), (padding: 0)
    close(kl, [[1.0, 0.0, 0.0, -1.5], [0.2, -0.5, 0.0, 0.0]])
    assert kl.dtype == torch.float32


def test_the_mean_counts_trained_tokens_only():
    kl = reverse_kl(STUDENT, TEACHER, MASK)
    # (1.0 + 0.0 - 1.5 + 0.2 - 0.5) / 5 trained tokens
    assert mean_reverse_kl(kl, MASK) == pytest.approx(-0.8 / 5)
    assert mean_reverse_kl(kl, torch.zeros_like(MASK)) == 0.0


def test_alone_the_advantage_is_minus_coef_times_the_kl():
    kl = reverse_kl(STUDENT, TEACHER, MASK)
    advantages = distill_advantages(kl, MASK, coef=0.5)
    close(advantages, [[-0.5, 0.0, 0.0, 0.75], [-0.1, 0.25, 0.0, 0.0]])


def test_added_to_one_reward_advantage_per_trajectory():
    kl = reverse_kl(STUDENT, TEACHER, MASK)
    advantages = distill_advantages(kl, MASK, coef=2.0, base=torch.tensor([1.0, -1.0]))
    # trained tokens: base - 2 * kl; the tool token and the padding keep the base (the loss skips them)
    close(advantages, [[-1.0, 1.0, 1.0, 4.0], [-1.4, 0.0, -1.0, -1.0]])


def test_added_to_per_token_reward_advantages():
    kl = reverse_kl(STUDENT, TEACHER, MASK)
    base = torch.tensor([[0.1, 0.0, 0.3, 0.3], [0.5, 0.5, 0.0, 0.0]])  # per-turn credit
    advantages = distill_advantages(kl, MASK, coef=1.0, base=base)
    close(advantages, [[-0.9, 0.0, 0.3, 1.8], [0.3, 1.0, 0.0, 0.0]])


def test_a_teacher_that_agrees_gives_no_signal_and_the_gradient_is_the_kl_gradient():
    """With the advantage -kl and a ratio of 1, the policy-gradient loss -A * log p has the gradient of
    the reverse KL's single-sample estimate: d/dθ [log p] * (log p - log q)."""
    assert distill_advantages(reverse_kl(STUDENT, STUDENT, MASK), MASK, coef=3.0).abs().max() == 0
    student = torch.tensor([-0.2], requires_grad=True)
    teacher = torch.tensor([math.log(0.5)])
    advantage = distill_advantages(reverse_kl(student.detach(), teacher, torch.tensor([True])), torch.tensor([True]), 1.0)
    (-(advantage * student)).sum().backward()
    assert student.grad.item() == pytest.approx(-0.2 - math.log(0.5))
