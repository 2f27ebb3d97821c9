"""What a step trains on: truncated trajectories out of the loss (but in the reward metrics), dynamic
sampling's refill rounds (reported per step, the same prompts after a resume), and the config errors."""

import pytest
import torch

from rlfactory_nb.algo.advantages import group_advantages
from rlfactory_nb.config import ConfigError, RunConfig
from rlfactory_nb.data.rows import PromptOrder
from rlfactory_nb.train.batch import build_batch
from rlfactory_nb.train.loop import Trainer, train
from rlfactory_nb.train.metrics import read_metrics
from rlfactory_nb.train.selection import without_truncated
from rlfactory_nb.train.update import UpdateSettings, make_optimizer, policy_update
from rlfactory_nb.types import Trajectory, load_jsonl

from .conftest import tiny_random_qwen3


def test_without_truncated_keeps_per_token_advantages_in_step():
    trajectories = [Trajectory([1]), Trajectory([2], finish_reason="max_turns"), Trajectory([3])]
    kept, advantages = without_truncated(trajectories, [[0.1, 0.2], [0.3], [0.4]])
    assert [t.prompt_ids for t in kept] == [[1], [3]] and advantages == [[0.1, 0.2], [0.4]]
    assert (
        Trajectory([1], finish_reason="length").truncated
        and not Trajectory([1], finish_reason="error").truncated
    )


def test_refill_rounds_are_a_function_of_seed_step_and_round():
    order = PromptOrder(num_rows=100, per_step=4, seed=7)
    first, second = order.refill(5, 1), order.refill(5, 2)
    assert first == PromptOrder(num_rows=100, per_step=4, seed=7).refill(5, 1)  # a fresh object agrees
    assert len(first) == len(second) == 4
    assert not set(first) & set(order.indices(5)) and not set(second) & set(first + order.indices(5))
    assert first != order.refill(6, 1) and first != PromptOrder(100, 4, seed=8).refill(5, 1)


async def one_step(cfg, finish_every_other: bool = False):
    """One step of `cfg`; with `finish_every_other`, odd-numbered samples of each group end with "stop"
    (the random tiny model otherwise always reaches max_new_tokens)."""
    trainer = await Trainer(cfg).start()
    rollout = trainer.agent.rollout

    async def marked(row, metadata=None, sample_id=None, **options):
        traj = await rollout(row, metadata, sample_id, **options)
        if finish_every_other and traj.metadata["sample_index"] % 2:
            traj.finish_reason = "stop"
        return traj

    trainer.agent.rollout = marked
    try:
        return trainer, await trainer.step_once()
    finally:
        await trainer.close()


async def test_truncated_trajectories_get_no_gradient_but_count_in_the_reward(make_cfg):
    cfg = make_cfg(
        grpo__mask_truncated=True, grpo__trajectories_per_step=-1, grpo__filter_zero_variance=False
    )
    trainer, row = await one_step(cfg, finish_every_other=True)
    saved = load_jsonl(cfg.run_dir / "trajectories" / "step_000001.jsonl")
    assert row["rollout/truncated"] == 6 and row["rollout/masked_truncated"] == 6
    assert row["reward/mean"] == pytest.approx(sum(t.metadata["reward"] for t in saved) / 12)  # all 12

    # The same update by hand from the 6 finished trajectories alone, their advantages taken in the
    # whole group: the trainer's weights must match it, so the truncated ones added nothing.
    groups = [[t for t in saved if t.metadata["prompt_index"] == p] for p in range(3)]
    rewards = torch.tensor([[t.metadata["reward"] for t in group] for group in groups])
    advantages = group_advantages(rewards).flatten()
    flat = [t for group in groups for t in group]
    kept, kept_advantages = without_truncated(flat, advantages)
    assert len(kept) == 6
    trained = trainer.policy.model.state_dict()
    assert distance(updated(cfg, kept, kept_advantages), trained) < 5e-5  # AdamW's first step: float noise
    assert distance(updated(cfg, flat, advantages), trained) > 1e-3  # what training on all 12 would do


def updated(cfg, trajectories, advantages) -> dict[str, torch.Tensor]:
    """The tiny model's weights after one update on `trajectories`, done by hand."""
    model = tiny_random_qwen3()
    batch = build_batch(trajectories, advantages, pad_id=0)
    policy_update(model, make_optimizer(model, cfg), batch, UpdateSettings.from_config(cfg), step=1)
    return model.state_dict()


def distance(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> float:
    return max(float((tensor - second[name]).abs().max()) for name, tensor in first.items())


async def test_all_truncated_trains_nothing_and_is_reported(make_cfg):
    start = {k: v.clone() for k, v in tiny_random_qwen3().state_dict().items()}
    trainer, row = await one_step(make_cfg(grpo__mask_truncated=True))
    assert row["rollout/truncated"] == 12 and row["groups/trained"] == 0 and "train/loss" not in row
    assert "reward/mean" in row
    for name, tensor in trainer.policy.model.state_dict().items():
        assert torch.equal(tensor, start[name]), name
    _, unmasked = await one_step(make_cfg(name="unmasked"))
    assert unmasked["rollout/truncated"] == 12 and unmasked["rollout/masked_truncated"] == 0
    assert unmasked["train/optimizer_steps"] == 1


async def test_dynamic_sampling_refills_to_prompts_per_step_useful_groups(make_cfg):
    # the first prompt of every round gives a flat group, the others always have signal
    cfg = make_cfg("flat_for_first_prompt", grpo__dynamic_sampling={"max_rounds": 3})
    _, row = await one_step(cfg)
    assert row["sampling/rounds"] == 2 and row["sampling/prompts_drawn"] == 6 and row["groups/total"] == 6
    assert row["groups/zero_variance"] == 2 and row["groups/trained"] == 3  # 4 with signal, 3 trained
    assert row["train/optimizer_steps"] == 1

    _, without = await one_step(make_cfg("flat_for_first_prompt", name="no-refill"))
    assert without["sampling/rounds"] == 1 and without["groups/trained"] == 2


async def test_dynamic_sampling_stops_after_max_rounds(make_cfg):
    _, row = await one_step(make_cfg("constant", grpo__dynamic_sampling={"max_rounds": 2}))
    assert row["sampling/rounds"] == 3 and row["sampling/prompts_drawn"] == 9
    assert row["groups/zero_variance"] == 9 and row["groups/trained"] == 0


class Crash(Exception):
    pass


def prompts_by_step(run_dir) -> dict[int, list[str]]:
    drawn = {}
    for path in sorted((run_dir / "trajectories").glob("step_*.jsonl")):
        trajectories = load_jsonl(path)
        drawn[trajectories[0].metadata["step"]] = [
            t.messages[0]["content"] for t in trajectories if t.metadata["sample_index"] == 0
        ]
    return drawn


async def test_a_resumed_run_draws_the_same_prompts_in_every_round(make_cfg):
    options = {
        "grpo__steps": 4,
        "grpo__checkpoint_every": 2,
        "grpo__trajectories_per_step": -1,
        "grpo__dynamic_sampling": {"max_rounds": 4},
    }
    whole = make_cfg("flat_for_even_answers", name="whole", **options)
    await train(whole)
    cfg = make_cfg("flat_for_even_answers", name="resumed", **options)

    def crash_after_step_3(row):
        if row["step"] == 3:
            raise Crash()

    with pytest.raises(Crash):
        await train(cfg, on_step=crash_after_step_3)
    await train(cfg, resume=True)
    assert prompts_by_step(cfg.run_dir) == prompts_by_step(whole.run_dir)
    rounds = [row["sampling/rounds"] for row in read_metrics(cfg.run_dir)]
    assert rounds == [row["sampling/rounds"] for row in read_metrics(whole.run_dir)] and max(rounds) > 1


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"grpo.dynamic_sampling": {"max_rounds": -1}}, r"grpo.dynamic_sampling.max_rounds: must be >= 0"),
        (
            {"grpo.dynamic_sampling": {"max_rounds": 2}, "grpo.filter_zero_variance": False},
            r"grpo.dynamic_sampling: .*set grpo.filter_zero_variance: true",
        ),
        (
            {"grpo.dynamic_sampling": {"rounds": 2}},
            r"grpo.dynamic_sampling.rounds: unknown key; did you mean",
        ),
    ],
)
def test_bad_dynamic_sampling_is_a_config_error_naming_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_dict({"name": "x"}, overrides)
