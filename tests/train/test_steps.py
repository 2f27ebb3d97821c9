"""The step source (train/steps.py) on the local backend: a step's groups come scored, the rewards
having read each episode's open environment, with every episode closed by the time the trainer has
them; a failed rollout fails the take with its own error; closing discards the rollouts in flight."""

import asyncio

import pytest

import rlfactory_nb as rf
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.train.loop import Trainer

ROWS = [{"prompt": f"Flip {i}", "ground_truth": ""} for i in range(6)]
LIVE: list[int] = []
"""one entry per instance made and not closed"""


class Coin(rf.Environment):
    """Flips a coin at reset (from the seed); the reward is the side."""

    def __init__(self):
        LIVE.append(1)

    def reset(self, row, *, seed):
        self.side = seed % 2

    def reward(self):
        return float(self.side)

    def close(self):
        LIVE.pop()


def side_seen(sample: rf.Sample) -> float:
    """Reads the still-open environment; -5 when it is gone."""
    return float(sample.env.side) if sample.env is not None else -5.0


async def test_a_step_comes_scored_from_open_environments_with_every_episode_closed(make_cfg):
    objects = RunObjects.of({"side_seen": side_seen}, None, ROWS, None, env=Coin)
    trainer = await Trainer(make_cfg(), objects=objects).start()
    try:
        scored = await trainer.steps.take(1)
        assert not LIVE and not trainer.agent.episodes.kept  # closed before the trainer has them
    finally:
        await trainer.close()
    drawn = scored.drawn
    assert len(drawn.groups) == 3 and drawn.rounds == 1 and not drawn.failed
    sides = [[traj.metadata["env_reward"] for traj in group] for group in drawn.groups]
    assert drawn.rewards.tolist() == sides  # every reward read its episode's open environment
    assert {"time/rollout_s", "time/reward_s"} <= set(scored.seconds)


async def test_a_failed_rollout_fails_the_take_with_its_own_error(make_cfg):
    trainer = await Trainer(make_cfg()).start()

    async def gone(row, metadata=None, sample_id=None, **options):
        raise OSError(f"tool server for step {sample_id.step} is gone")

    trainer.agent.rollout = gone
    try:
        with pytest.raises(OSError, match="step 1 is gone"):
            await trainer.steps.take(1)
    finally:
        await trainer.close()


async def test_close_discards_the_rollouts_in_flight_in_bounded_time(make_cfg):
    trainer = await Trainer(make_cfg(grpo__max_staleness=2, grpo__truncate_ratio=2.0, grpo__steps=4)).start()
    never = asyncio.Event()

    async def hung(row, metadata=None, sample_id=None, **options):
        await never.wait()

    trainer.agent.rollout = hung
    try:
        trainer.steps.publish(0)  # asynchronous: steps 1 and 2 start ahead
        await asyncio.sleep(0)
        assert trainer.steps.in_flight() == [1, 2]
        await asyncio.wait_for(trainer.steps.close(timeout_s=5), 5)
        assert trainer.steps.in_flight() == []
    finally:
        await trainer.close()
