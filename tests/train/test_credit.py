"""grpo.advantage: per-turn credit from the environment's rewards, and step groups of turns that start
from the same state, against hand-computed advantages (train/credit.py)."""

import pytest
import torch

from rlfactory_nb.rewards.runner import RewardOutcome
from rlfactory_nb.train.credit import assign_credit, state_keys, turn_advantage_means, turn_rewards
from rlfactory_nb.types import Trajectory, Turn


def game(states, env_rewards, prompt=(1, 2)):
    """A two-turn episode whose response is [t0, t0, sep, t1] (mask 1 1 0 1); `states`: the state at
    reset, then after each turn."""
    turns = [Turn(text=f"turn {k}", state=states[k + 1], env_reward=env_rewards[k]) for k in range(2)]
    return Trajectory(
        prompt_ids=list(prompt), response_ids=[5, 6, 9, 7], loss_mask=[1, 1, 0, 1], turns=turns,
        metadata={"env_state": states[0]} if states[0] is not None else {},
    )


def outcomes(scores):
    return [[RewardOutcome(sample_id=f"s{i}", score=score) for i, score in enumerate(scores)]]


def test_the_environment_s_turn_rewards_move_credit_and_the_last_turn_gets_the_rest():
    assert turn_rewards(game([None] * 3, [0.25, 1.0]), 1.0) == [0.25, 0.75]
    assert turn_rewards(game([None] * 3, [None, None]), 0.0) == [0.0, 0.0]


def test_turn_mode_by_hand():
    group = [game([None] * 3, [0.25, None]), game([None] * 3, [None, None])]
    got = assign_credit("turn", [group], torch.tensor([[1.0, 0.0]]), outcomes([1.0, 0.0]), scale=False)
    # turn rewards [0.25, 0.75] and [0, 0]; returns 1 and 0 (mean 0.5); reward-to-go minus 0.5
    assert got == [[0.5, 0.5, 0.0, 0.25], [-0.5, -0.5, 0.0, -0.5]]


def test_step_groups_by_hand():
    start = {"board": 0}
    group = [
        game([start, {"board": 1}, {"board": 3}], [None, None]),
        game([start, {"board": 1}, {"board": 4}], [None, None]),
        game([start, {"board": 2}, {"board": 5}], [None, None]),
    ]
    rewards = torch.tensor([[1.0, 0.0, 0.5]])
    got = assign_credit("step_groups", [group], rewards, outcomes([1.0, 0.0, 0.5]), scale=False, step_weight=0.5)
    # episode advantages: 1 - 0.5, 0 - 0.5, 0.5 - 0.5 = 0.5, -0.5, 0
    # turn 0 (all from board 0): returns 1, 0, 0.5 -> step 0.5, -0.5, 0
    # turn 1: trajectories 0 and 1 start from board 1 (returns 1, 0 -> 0.5, -0.5); 2 alone -> 0
    assert got[0] == [0.5 + 0.25, 0.5 + 0.25, 0.0, 0.5 + 0.25]
    assert got[1] == [-0.5 - 0.25, -0.5 - 0.25, 0.0, -0.5 - 0.25]
    assert got[2] == [0.0, 0.0, 0.0, 0.0]


def test_step_groups_across_the_batch_by_hand():
    """Two groups (one task each) reach the same states: "batch" compares their turns together,
    "group" within each group only."""
    start, higher = {"range": [1, 7]}, {"range": [1, 7], "hints": ["higher"]}
    first = [game([start, higher, {"end": 1}], [None, None]), game([start, {"end": 2}, {"end": 3}], [None, None])]
    second = [game([start, higher, {"end": 4}], [None, None]), game([start, higher, {"end": 5}], [None, None])]
    rewards = torch.tensor([[1.0, 0.0], [0.5, 0.0]])
    scores = [[RewardOutcome(sample_id=f"g{g}s{i}", score=float(r)) for i, r in enumerate(row)] for g, row in enumerate(rewards)]
    got = assign_credit("step_groups", [first, second], rewards, scores, scale=False, step_group_scope="batch")
    # episode advantages (per group): 0.5, -0.5 | 0.25, -0.25
    # turn 0, one state over the batch: returns 1, 0, 0.5, 0 (mean 0.375) -> 0.625, -0.375, 0.125, -0.375
    # turn 1 from `higher`: trajectories 0, 2, 3 (returns 1, 0.5, 0; mean 0.5) -> 0.5, 0, -0.5; trajectory 1 alone -> 0
    assert got[0] == pytest.approx([0.5 + 0.625, 0.5 + 0.625, 0.0, 0.5 + 0.5])
    assert got[1] == pytest.approx([-0.5 - 0.375, -0.5 - 0.375, 0.0, -0.5])
    assert got[2] == pytest.approx([0.25 + 0.125, 0.25 + 0.125, 0.0, 0.25])
    assert got[3] == pytest.approx([-0.25 - 0.375, -0.25 - 0.375, 0.0, -0.25 - 0.5])
    # within each group: turn 0 doubles the episode advantage; turn 1 only the second group shares a state
    alone = assign_credit("step_groups", [first, second], rewards, scores, scale=False)
    assert alone[0] == pytest.approx([1.0, 1.0, 0.0, 0.5]) and alone[2] == pytest.approx([0.5, 0.5, 0.0, 0.5])
    with pytest.raises(ValueError, match="step_group_scope"):
        assign_credit("step_groups", [first], rewards[:1], scores[:1], scale=False, step_group_scope="world")


def test_without_a_state_turns_are_keyed_by_their_whole_context():
    a, b = game([None] * 3, [None, None]), game([None] * 3, [None, None])
    b.response_ids = [5, 8, 9, 7]  # the same first turn's context, a different second one
    keys_a, keys_b = state_keys(a), state_keys(b)
    assert keys_a[0] == keys_b[0] == "context:1,2"
    assert keys_a[1] != keys_b[1]


def test_episode_mode_is_one_advantage_per_trajectory_and_the_views_get_turn_means():
    group = [game([None] * 3, [None, None]), game([None] * 3, [None, None])]
    got = assign_credit("episode", [group], torch.tensor([[1.0, 0.0]]), outcomes([1.0, 0.0]), scale=True)
    assert torch.allclose(got, torch.tensor([1.0, -1.0]), atol=1e-5)
    assert turn_advantage_means(group[0], [0.5, 0.25, 0.0, 1.0]) == [0.375, 1.0]
    with pytest.raises(ValueError, match="grpo.advantage"):
        assign_credit("gigpo", [group], torch.tensor([[1.0, 0.0]]), outcomes([1.0, 0.0]), scale=True)


def test_the_trajectory_view_shows_each_turn_s_reward_and_advantage():
    from rlfactory_nb.train.credit import record_turn_advantages
    from rlfactory_nb.widgets.trajectory import view_html

    group = [game([None] * 3, [0.25, None]), game([None] * 3, [None, None])]
    record_turn_advantages(group, assign_credit("turn", [group], torch.tensor([[1.0, 0.0]]), outcomes([1.0, 0.0]), scale=False))
    assert group[0].metadata["turn_advantages"] == [0.5, 0.25]
    page = view_html(group[0])
    assert "assistant turn 1</b> <span class='rf-credit'>[environment reward 0.25 · advantage +0.500]" in page
    assert "assistant turn 2</b> <span class='rf-credit'>[advantage +0.250]" in page


@pytest.mark.slow
def test_a_step_groups_run_of_the_guessing_game_trains_and_records_each_turn_s_advantage(tmp_path):
    """Slow: two GRPO steps of examples/guess on the tiny-guess preset (about 10 s)."""
    import json
    import math

    import rlfactory_nb as rf

    cfg = rf.example("guess").config({
        "name": "step-groups", "output_dir": str(tmp_path), "grpo.steps": 2, "grpo.prompts_per_step": 4,
        "grpo.group_size": 4, "grpo.eval_every": 0, "grpo.advantage": "step_groups", "grpo.gamma": 0.9,
        "grpo.trajectories_per_step": -1, "grpo.checkpoint_every": 0,
    })
    result = rf.train_sync(cfg)
    assert result.step == 2 and math.isfinite(result.metrics["train/loss"])
    saved = [json.loads(line) for file in sorted(tmp_path.rglob("trajectories/*.jsonl")) for line in file.read_text().splitlines()]
    credited = [t for t in saved if "turn_advantages" in t["metadata"]]
    assert credited, "no trained group recorded per-turn advantages"
    for traj in credited:
        assert len(traj["metadata"]["turn_advantages"]) == len(traj["turns"])
