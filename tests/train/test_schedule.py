"""Learning-rate schedules: hand-computed rates, the rate every optimizer step of a training step uses,
the same rates after a resume as in an uninterrupted run, and the bad-input errors."""

import math
from typing import get_args, get_type_hints

import pytest
import torch

from rlfactory_nb.config import ConfigError, RunConfig
from rlfactory_nb.config_grpo import GRPOConfig
from rlfactory_nb.models.checkpoint import load_latest
from rlfactory_nb.train.loop import train
from rlfactory_nb.train.metrics import read_metrics
from rlfactory_nb.train.schedule import DECAYS, LRSchedule
from rlfactory_nb.train.update import UpdateSettings, policy_update

from .conftest import tiny_random_qwen3
from .test_loop import hand_batch


def test_rates_by_hand():
    # warmup 2 of 6 steps, peak 0.1: 0.05, 0.1, then decay over steps 3..6 with p = 0, 1/4, 2/4, 3/4
    expected = {
        "constant": [0.05, 0.1, 0.1, 0.1, 0.1, 0.1],
        "linear": [0.05, 0.1, 0.1, 0.075, 0.05, 0.025],
        "cosine": [0.05, 0.1] + [0.1 * (1 + math.cos(math.pi * k / 4)) / 2 for k in range(4)],
    }
    for name, rates in expected.items():
        schedule = LRSchedule(0.1, name, warmup_steps=2, steps=6)
        assert [schedule.rate(step) for step in range(1, 7)] == pytest.approx(rates), name
    assert LRSchedule(0.1, "linear", warmup_steps=0, steps=4).rate(1) == pytest.approx(0.1)  # no warmup
    assert LRSchedule(0.1, "cosine", warmup_steps=3, steps=3).rate(3) == pytest.approx(0.1)  # all warmup


def test_the_config_names_exactly_the_registered_schedules():
    assert set(get_args(get_type_hints(GRPOConfig, include_extras=True)["lr_schedule"])) == set(DECAYS)


def test_every_optimizer_step_of_a_training_step_uses_its_rate():
    model = tiny_random_qwen3()
    optimizer = torch.optim.AdamW(model.parameters(), lr=123.0)  # the schedule, not this, decides
    schedule = LRSchedule(1e-2, "linear", warmup_steps=1, steps=3)
    settings = UpdateSettings(mini_batch_size=2, micro_batch_size=2, lr_schedule=schedule)
    seen = []
    step_method = optimizer.step

    def recording_step(*args, **kwargs):
        seen.append(optimizer.param_groups[0]["lr"])
        return step_method(*args, **kwargs)

    optimizer.step = recording_step
    for step in (1, 2, 3):
        metrics = policy_update(model, optimizer, hand_batch(), settings, step)
        assert metrics["train/lr"] == pytest.approx(schedule.rate(step))
    assert seen == pytest.approx([1e-2] * 2 + [1e-2] * 2 + [5e-3] * 2)  # two mini-batches a step


def test_without_a_schedule_the_optimizer_keeps_its_rate():
    model = tiny_random_qwen3()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    metrics = policy_update(model, optimizer, hand_batch(), UpdateSettings(), step=5)
    assert metrics["train/lr"] == 3e-3


class Crash(Exception):
    pass


async def test_a_resumed_run_has_the_same_rate_at_every_later_step(make_cfg):
    options = {
        "grpo__steps": 5,
        "grpo__checkpoint_every": 2,
        "grpo__lr_schedule": "cosine",
        "grpo__warmup_steps": 2,
        "grpo__filter_zero_variance": False,  # every step trains, so every row has its rate
    }
    whole = make_cfg(name="whole", **options)
    await train(whole)
    uninterrupted = [row["train/lr"] for row in read_metrics(whole.run_dir)]

    cfg = make_cfg(name="resumed", **options)

    def crash_after_step_3(row):
        if row["step"] == 3:
            raise Crash()

    with pytest.raises(Crash):
        await train(cfg, on_step=crash_after_step_3)
    assert load_latest(cfg.run_dir).step == 2
    await train(cfg, resume=True)
    resumed = [row["train/lr"] for row in read_metrics(cfg.run_dir)]
    schedule = LRSchedule.from_config(cfg.grpo)
    assert uninterrupted == pytest.approx([schedule.rate(step) for step in range(1, 6)])
    assert resumed == pytest.approx(uninterrupted)
    assert uninterrupted == pytest.approx([0.005, 0.01, 0.01, 0.0075, 0.0025])  # warmup, then cosine


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"grpo.warmup_steps": 11, "grpo.steps": 10},
            r"grpo.warmup_steps: 11 is more than grpo.steps \(10\): lower warmup_steps",
        ),
        ({"grpo.lr_schedule": "cosin"}, "grpo.lr_schedule: 'cosin' is not one of .*did you mean 'cosine'"),
        ({"grpo.warmup_steps": -1}, "grpo.warmup_steps: must be >= 0"),
    ],
)
def test_bad_schedules_are_config_errors_naming_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_dict({"name": "x"}, overrides)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
async def test_ray_policy_workers_follow_the_schedule(shared_ray, make_cfg, strategy):
    """Slow: on the module's Ray, two gloo-ranked policy workers."""
    from rlfactory_nb.train.loop import Trainer

    cfg = make_cfg(
        grpo__steps=3,
        grpo__lr_schedule="linear",
        grpo__warmup_steps=1,
        grpo__mini_batch_size=4,
        grpo__micro_batch_size=2,
        cluster__backend="ray",
        cluster__strategy=strategy,
        cluster__num_workers=2,
        cluster__cpus_per_worker=0.5,
        cluster__object_store_memory_gb=0.3,
    )
    schedule = LRSchedule.from_config(cfg.grpo)
    trainer = await Trainer(cfg).start()
    try:
        for step in (1, 2, 3):
            metrics = await trainer.backend.update(hand_batch(), step=step)
            assert metrics["train/lr"] == pytest.approx(schedule.rate(step))  # the mean over both ranks
        state = await trainer.backend.optimizer_state()
        assert state["param_groups"][0]["lr"] == pytest.approx(schedule.rate(3))
    finally:
        await trainer.close()


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_policy_worker_follows_the_schedule_without_ray(make_cfg, strategy):
    """The class Ray runs as each rank, here as a one-rank gloo group in this process."""
    from rlfactory_nb.cluster.workers import PolicyWorker
    from rlfactory_nb.engines.weight_sync import free_port

    cfg = make_cfg(
        grpo__steps=3, grpo__lr_schedule="cosine", grpo__warmup_steps=1, cluster__strategy=strategy
    )
    model = tiny_random_qwen3()
    worker = PolicyWorker(0, 1, cfg)
    worker.setup(("127.0.0.1", free_port("127.0.0.1")), model.config, model.state_dict(), None, None)
    try:
        schedule = LRSchedule.from_config(cfg.grpo)
        for step in (1, 2, 3):
            assert worker.update(hand_batch(), step)["train/lr"] == pytest.approx(schedule.rate(step))
        assert worker.optimizer_state()["param_groups"][0]["lr"] == pytest.approx(schedule.rate(3))
    finally:
        worker.close()
