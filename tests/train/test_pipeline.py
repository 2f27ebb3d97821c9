"""Asynchronous GRPO: when each step's rollouts may start (the staleness bound), the version labels on
samples, and the loop on the local backend with max_staleness 1: staleness, resume, stop, errors.
The step source that runs the schedule is tested in test_steps.py."""

import asyncio
import threading

import pytest

from rlfactory_nb.config_schema import ConfigError
from rlfactory_nb.engines import Generation, SamplingParams
from rlfactory_nb.train.loop import StepFailed, Trainer, train
from rlfactory_nb.train.metrics import read_metrics
from rlfactory_nb.train.pipeline import (
    RolloutSchedule,
    check_versions,
    effective_staleness,
    sample_staleness,
)
from rlfactory_nb.train.versioned_engine import StaleSamples, VersionedEngine
from rlfactory_nb.types import Trajectory, Turn, load_jsonl

# ---------------------------------------------------------------------- the schedule


def run_steps(schedule: RolloutSchedule, first: int, last: int) -> dict[int, int]:
    """From the engines holding the weights of step first-1, take steps first..last as the trainer
    does; the engines' version when each step started."""
    started: dict[int, int] = {}

    def start(steps):
        assert not set(steps) & set(started), steps  # each step starts once
        started.update(dict.fromkeys(steps, schedule.version))

    start(schedule.publish(first - 1))  # asynchronous: the first steps start now
    for step in range(first, last + 1):
        start(schedule.request(step))
        assert step in started  # a step asked for has started
        start(schedule.publish(step))  # after its update and weight sync
    return started


def test_synchronous_steps_start_only_when_taken_with_the_previous_weights():
    schedule = RolloutSchedule(0, version=0, last_step=10)
    assert schedule.publish(0) == []  # nothing is generated ahead
    assert run_steps(schedule, 1, 4) == {1: 0, 2: 1, 3: 2, 4: 3}  # step s sampled by version s-1: staleness 0


@pytest.mark.parametrize("k", [1, 2])
def test_steps_run_ahead_at_most_k_versions_and_never_past_the_last_step(k):
    started = run_steps(RolloutSchedule(k, version=0, last_step=6), 1, 6)
    assert set(started) == set(range(1, 7))
    for step, version in started.items():
        assert step - 1 - k <= version <= step - 1, (step, version)
    assert any(version < step - 1 for step, version in started.items())  # it did run ahead


def test_a_resumed_schedule_starts_at_the_step_after_the_checkpoint():
    assert run_steps(RolloutSchedule(1, version=3, last_step=5), 4, 5) == {4: 3, 5: 3}


def test_the_weights_version_never_goes_back():
    schedule = RolloutSchedule(0, version=4, last_step=10)
    with pytest.raises(StaleSamples, match="from 4 to 3"):
        schedule.publish(3)


# ---------------------------------------------------------------------- version labels


def traj(*versions) -> Trajectory:
    return Trajectory([1], turns=[Turn("t", policy_version=v) for v in versions], id="t1")


def test_staleness_is_counted_from_the_oldest_turn():
    assert sample_staleness([traj(3, 4), traj(4), traj(None)], trained_version=4) == [1, 0, 0]


@pytest.mark.parametrize(
    ("versions", "match"),
    [((4, 3), "go backwards"), ((5,), "mislabelled"), ((1, 4), "at most 1")],
)
def test_samples_outside_the_bound_or_going_backwards_fail_the_step(versions, match):
    with pytest.raises(StaleSamples, match=match):
        check_versions([traj(*versions)], trained_version=4, bound=1, step=5)


def test_samples_inside_the_bound_pass():
    check_versions([traj(3, 3, 4), traj(4), traj()], trained_version=4, bound=1, step=5)


class ScriptedEngine:
    """Answers after `delay`; reports `reported` as the weights version it sampled with."""

    stop_token_ids = (0,)

    def __init__(self, reported=None, delay=0.05):
        self.reported, self.delay = reported, delay

    async def generate(self, prompt_ids, sampling):
        await asyncio.sleep(self.delay)
        return Generation([5], [-0.1], "stop", policy_version=self.reported)


async def test_a_request_is_stamped_with_the_version_it_was_sent_under():
    engine = VersionedEngine(ScriptedEngine(), version=2)
    in_flight = asyncio.ensure_future(engine.generate([1], SamplingParams()))
    await asyncio.sleep(0.01)
    engine.version = 3  # a sync lands while the request runs
    assert (await in_flight).policy_version == 2  # a lower bound: never younger than it says
    assert (await engine.generate([1], SamplingParams())).policy_version == 3
    assert 0.09 <= engine.busy_seconds() < 1.0


async def test_an_engine_serving_older_weights_than_it_was_sent_fails_the_request():
    engine = VersionedEngine(ScriptedEngine(reported=0), version=3)
    engine.sent_version = 3
    with pytest.raises(StaleSamples, match="restarted with older weights"):
        await engine.generate([1], SamplingParams())


# ---------------------------------------------------------------------- configs


def test_max_staleness_below_zero_and_without_a_ratio_cap_are_config_errors(make_cfg):
    with pytest.raises(ConfigError, match="max_staleness"):
        make_cfg(grpo__max_staleness=-1)
    with pytest.raises(ConfigError, match="grpo.truncate_ratio"):
        make_cfg(grpo__max_staleness=1)
    with pytest.raises(ConfigError, match="'token'"):
        make_cfg(grpo__importance_level="tokens")


def test_colocated_runs_stay_synchronous_and_say_why(make_cfg):
    cfg = make_cfg(grpo__max_staleness=1, grpo__truncate_ratio=2.0)
    assert effective_staleness(cfg, "cpu", uses_ray=False)[0] == 1
    bound, why = effective_staleness(cfg, "cuda", uses_ray=False)
    assert bound == 0 and "colocated" in why


async def test_an_unknown_engine_kind_fails_before_anything_starts(make_cfg):
    with pytest.raises(ConfigError, match="model.engine: unknown engine kind 'vlm' \\(did you mean 'vllm'"):
        await Trainer(make_cfg(model__engine="vlm")).start()


# ---------------------------------------------------------------------- the loop, local backend


def async_cfg(make_cfg, **overrides):
    return make_cfg(grpo__max_staleness=1, grpo__truncate_ratio=2.0, **overrides)


async def test_an_asynchronous_run_trains_on_samples_at_most_one_version_old(make_cfg):
    cfg = async_cfg(make_cfg, grpo__steps=4, grpo__trajectories_per_step=-1)
    result = await train(cfg)
    rows = read_metrics(cfg.run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3, 4] and result.step == 4
    assert all(row["async/max_staleness"] == 1 for row in rows)
    assert max(row["async/staleness_max"] for row in rows) == 1  # it did overlap
    assert rows[0]["async/staleness_max"] == 0  # step 1 can only be sampled by the first weights
    for row in rows:
        assert 0 <= row["async/engine_busy_share"] <= 1 and 0 <= row["async/trainer_busy_share"] <= 1
    for step in range(1, 5):
        for saved in load_jsonl(cfg.run_dir / "trajectories" / f"step_{step:06d}.jsonl"):
            versions = [turn.policy_version for turn in saved.turns]
            assert all(step - 2 <= v <= step - 1 for v in versions), (step, versions)


async def test_a_stopped_asynchronous_run_resumes_without_losing_or_repeating_a_step(make_cfg):
    cfg = async_cfg(make_cfg, grpo__steps=4, grpo__checkpoint_every=1)
    stop = threading.Event()
    first = await train(cfg, on_step=lambda row: row["step"] == 2 and stop.set(), stop_event=stop)
    assert first.step == 2  # the rollouts generated ahead for step 3 were discarded
    resumed = await train(cfg, resume=True)
    assert resumed.step == 4
    assert [row["step"] for row in read_metrics(cfg.run_dir)] == [1, 2, 3, 4]


async def test_an_engine_that_lost_its_weights_stops_the_run(make_cfg, monkeypatch):
    trainer = await Trainer(async_cfg(make_cfg, grpo__steps=3)).start()
    inner = trainer.engine.engine
    original = inner.generate

    async def as_if_restarted(prompt_ids, sampling):  # an actor back with its first weights
        generation = await original(prompt_ids, sampling)
        return Generation(
            generation.token_ids, generation.logprobs, generation.finish_reason, policy_version=0
        )

    monkeypatch.setattr(inner, "generate", as_if_restarted)
    try:
        await trainer.step_once()  # step 1: every engine was sent version 0
        with pytest.raises((StaleSamples, StepFailed), match="older weights"):
            for _ in range(2):
                await trainer.step_once()
    finally:
        await trainer.close()
