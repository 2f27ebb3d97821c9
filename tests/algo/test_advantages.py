import math

import pytest
import torch

from rlfactory_nb.algo.advantages import (
    group_advantages,
    reward_to_go,
    step_group_advantages,
    turn_advantages,
    turn_index,
    zero_variance_groups,
)


def close(actual: torch.Tensor, expected: list, tol: float = 1e-5) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), rtol=0, atol=tol)


def test_two_rewards_map_to_plus_minus_one_with_population_std():
    # mean 0.5, population std sqrt(((0-.5)^2 + (1-.5)^2) / 2) = 0.5 -> (+-0.5) / 0.5 = +-1
    close(group_advantages(torch.tensor([0.0, 1.0]), eps=0.0), [-1.0, 1.0], tol=0)
    # with the default eps: 0.5 / (0.5 + 1e-6)
    close(group_advantages(torch.tensor([0.0, 1.0])), [-0.5 / 0.500001, 0.5 / 0.500001], tol=1e-7)


def test_three_rewards_use_population_not_sample_std():
    # mean 1; population std = sqrt((1 + 0 + 1) / 3) = 0.8165 (the sample std would be 1)
    s = math.sqrt(2 / 3)
    close(group_advantages(torch.tensor([0.0, 1.0, 2.0]), eps=0.0), [-1 / s, 0.0, 1 / s])


def test_unscaled_advantages_are_only_centred():
    close(group_advantages(torch.tensor([0.0, 1.0, 5.0]), scale=False), [-2.0, -1.0, 3.0], tol=0)


def test_many_groups_are_normalized_row_by_row_and_a_flat_group_is_exactly_zero():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 5.0, 5.0, 5.0]])
    # row 0: mean 2.5, deviations -1.5 -0.5 0.5 1.5, population std sqrt((2.25+.25+.25+2.25)/4) = sqrt(1.25)
    s = math.sqrt(1.25)
    out = group_advantages(rewards, eps=0.0)
    close(out[0], [-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s])
    assert out[1].tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("scale", [True, False])
def test_zero_variance_groups_give_exact_zeros_never_nan(scale):
    # 0.1 is not representable exactly; the float mean of three copies can be off by an ulp
    for value in (0.1, 0.0, 1.0, 1 / 3):
        out = group_advantages(torch.full((2, 3), value), scale=scale, eps=0.0)
        assert out.tolist() == [[0.0] * 3] * 2


def test_integer_rewards_are_accepted():
    close(group_advantages(torch.tensor([0, 2]), scale=False), [-1.0, 1.0], tol=0)


def test_zero_variance_group_mask():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.5]])
    assert zero_variance_groups(rewards).tolist() == [True, False, True]
    assert zero_variance_groups(torch.tensor([2.0, 2.0])).item() is True


def test_bad_shapes_name_the_expected_layout():
    with pytest.raises(ValueError, match=r"\(N, G\)"):
        group_advantages(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match=r"\(G,\)"):
        group_advantages(torch.zeros(2, 0))


def test_turn_index_numbers_runs_of_sampled_tokens():
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 0, 1], [1, 1, 0, 0, 0, 0, 0, 0]])
    assert turn_index(mask).tolist() == [[-1, 0, 0, -1, -1, 1, -1, 2], [0, 0, -1, -1, -1, -1, -1, -1]]


def test_turn_advantages_by_hand_with_reward_to_go():
    # trajectory 0: turn rewards 0.5, 1.0 -> reward-to-go [1.5, 1.0], return 1.5
    # trajectory 1: one turn, reward 0 (padded second turn 0) -> reward-to-go [0, 0], return 0
    # group returns {1.5, 0}: mean 0.75, population std 0.75
    # A_00 = (1.5 - .75)/.75 = 1;  A_01 = (1.0 - .75)/.75 = 1/3;  A_10 = (0 - .75)/.75 = -1
    turn_rewards = torch.tensor([[0.5, 1.0], [0.0, 0.0]])
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 1, 0, 0, 0]])
    out = turn_advantages(turn_rewards, turn_index(mask), eps=0.0)
    close(out, [[0.0, 1.0, 1.0, 0.0, 1 / 3], [0.0, -1.0, 0.0, 0.0, 0.0]])
    # unscaled: deviations from the mean return 0.75
    close(
        turn_advantages(turn_rewards, turn_index(mask), scale=False),
        [[0, 0.75, 0.75, 0, 0.25], [0, -0.75, 0, 0, 0]],
    )


def test_outcome_only_turn_rewards_equal_group_advantages_on_every_token():
    # all reward on each trajectory's last turn; trajectories with 3, 1 and 2 turns
    turn_rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.5, 0.0]])
    mask = torch.tensor([[1, 0, 1, 1, 0, 1], [1, 1, 0, 0, 0, 0], [1, 0, 0, 1, 1, 0]])
    token_turn = turn_index(mask)
    out = turn_advantages(turn_rewards, token_turn)
    expected = group_advantages(torch.tensor([1.0, 0.0, 0.5]))  # (G,)
    for row in range(3):
        sampled = mask[row].bool()
        assert torch.allclose(out[row][sampled], expected[row].expand(int(sampled.sum())))
        assert out[row][~sampled].tolist() == [0.0] * int((~sampled).sum())


def test_equal_returns_arriving_at_different_turns_do_not_blow_up():
    # returns 1 and 1 (std 0): not scaled; mean 1; reward-to-go [1, 0] and [1, 1]
    turn_rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    token_turn = torch.tensor([[0, 1], [0, 1]])
    out = turn_advantages(turn_rewards, token_turn)
    assert out.tolist() == [[0.0, -1.0], [0.0, 0.0]]


def test_turn_advantages_accept_many_groups():
    turn_rewards = torch.tensor([[[1.0], [0.0]], [[2.0], [2.0]]])  # (N=2, G=2, K=1)
    token_turn = torch.tensor([[[0, -1], [0, 0]], [[0, 0], [-1, 0]]])  # (2, 2, T=2)
    out = turn_advantages(turn_rewards, token_turn, eps=0.0)
    assert out.tolist() == [[[1.0, 0.0], [-1.0, -1.0]], [[0.0, 0.0], [0.0, 0.0]]]


def test_turn_advantages_reject_tokens_of_turns_without_a_reward():
    with pytest.raises(ValueError, match="only 1 turns"):
        turn_advantages(torch.tensor([[1.0], [0.0]]), torch.tensor([[0, 1], [0, 0]]))


def test_discounted_reward_to_go_by_hand():
    rewards = torch.tensor([[0.0, 0.5, 1.0], [1.0, 0.0, 0.0]])
    # R_2 = r_2; R_1 = r_1 + 0.9 R_2; R_0 = r_0 + 0.9 R_1
    expected = [[0.0 + 0.9 * (0.5 + 0.9 * 1.0), 0.5 + 0.9 * 1.0, 1.0], [1.0, 0.0, 0.0]]
    assert torch.allclose(reward_to_go(rewards, gamma=0.9), torch.tensor(expected))
    assert torch.equal(reward_to_go(rewards), rewards.flip(-1).cumsum(-1).flip(-1))  # gamma 1: the suffix sum
    with pytest.raises(ValueError, match="gamma"):
        reward_to_go(rewards, gamma=1.5)


def test_turn_advantages_discount_later_rewards():
    turn_rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])  # one group of two, two turns
    token_turn = torch.tensor([[0, 1], [0, 1]])
    got = turn_advantages(turn_rewards, token_turn, scale=False, gamma=0.5)
    # returns R_0: 0.5 and 0.0 (mean 0.25); trajectory 0: turn 0 -> 0.5 - 0.25, turn 1 -> 1.0 - 0.25
    assert torch.allclose(got, torch.tensor([[0.25, 0.75], [-0.25, -0.25]]))


def test_step_groups_compare_only_turns_from_the_same_state_by_hand():
    # three siblings: all start in state 7; two of them reach state 8 at turn 1, the third state 9
    returns = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, -1.0], [2.0, 2.0, -1.0]])
    states = torch.tensor([[7, 8, 10], [7, 8, -1], [7, 9, -1]])
    got = step_group_advantages(returns, states, scale=False)
    # state 7: returns 1, 0, 2 (mean 1) -> 0, -1, 1; state 8: 1, 0 (mean 0.5) -> 0.5, -0.5; 9 and 10 alone -> 0
    assert got.tolist() == [[0.0, 0.5, 0.0], [-1.0, -0.5, 0.0], [1.0, 0.0, 0.0]]
    scaled = step_group_advantages(returns, states, eps=0.0)
    std7 = torch.tensor([1.0, 0.0, 2.0]).std(unbiased=False)
    assert torch.allclose(scaled[:, 0], torch.tensor([0.0, -1.0, 1.0]) / std7)
    assert torch.allclose(scaled[:2, 1], torch.tensor([1.0, -1.0]))  # {1, 0}: population std 0.5


def test_a_step_group_of_equal_returns_gives_exact_zeros():
    returns = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    states = torch.tensor([[3, 4], [3, 4]])
    assert torch.equal(step_group_advantages(returns, states), torch.zeros(2, 2))
    assert torch.equal(step_group_advantages(returns, torch.full((2, 2), -1)), torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"\(G, K\)"):
        step_group_advantages(returns, torch.tensor([3, 4]))
