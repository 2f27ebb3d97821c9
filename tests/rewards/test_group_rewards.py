"""Group rewards (`@rf.rewards.group_reward`, `LLMJudge.as_group_reward`) in the runner: one call per group,
the runner's timeout and failure counting, and the RewardLab's table."""

import asyncio
import time

import pytest

from rlfactory_nb.rewards import RewardError, RewardRunner, exact_match, group_reward, make_sample


def group_of(*answers, prompt="p"):
    return [make_sample(f"<answer>{a}</answer>", ground_truth="4", id=f"{prompt}{i}") for i, a in enumerate(answers)]


async def test_a_group_reward_is_called_once_per_group_and_scores_each_sample():
    calls = []

    @group_reward
    def shortest_wins(samples):
        calls.append(len(samples))
        lengths = [len(s.final_answer) for s in samples]
        return [{"score": float(n == min(lengths)), "length": n} for n in lengths]

    runner = RewardRunner({"short": shortest_wins, "em": exact_match})
    outcomes = await runner.score_groups([group_of("4", "44", "444"), group_of("12", "4", prompt="q")])
    assert sorted(calls) == [2, 3]
    assert [[o.score for o in group] for group in outcomes] == [[1.0, 0.0, 0.0], [0.0, 1.0]]
    assert outcomes[0][0].components == {"short": 1.0, "short/length": 1.0, "em": 1.0}
    assert runner.metrics["reward/short/calls"] == 5 and runner.metrics["reward/failures"] == 0


async def test_a_wrong_number_of_scores_fails_every_sample_of_the_group_naming_the_fix():
    @group_reward
    def one_short(samples):
        return [1.0] * (len(samples) - 1)

    runner = RewardRunner(one_short)
    outcomes = await runner.score_groups([group_of("1", "2", "3")])
    assert [o.score for o in outcomes[0]] == [0.0, 0.0, 0.0]
    failure = outcomes[0][0].errors[0]
    assert failure.kind == "invalid" and failure.function == "one_short"
    assert "returned 2 values for a group of 3 samples" in failure.message and "one score" in failure.message
    assert runner.metrics["reward/failures/invalid"] == 3
    with pytest.raises(RewardError, match="one_short"):
        await RewardRunner(one_short, on_error="fail").score_groups([group_of("1", "2")])


async def test_a_hung_group_reward_times_out_like_a_per_sample_one():
    @group_reward
    async def hangs(samples):
        await asyncio.sleep(30)

    runner = RewardRunner({"em": exact_match, "hangs": hangs}, timeout_s=0.3)
    started = time.monotonic()
    outcomes = await runner.score_groups([group_of("4", "5")])
    assert time.monotonic() - started < 5
    assert [o.score for o in outcomes[0]] == [1.0, 0.0]  # em is the training reward and still scores
    assert all(o.errors[0].kind == "timeout" for o in outcomes[0])
    assert runner.metrics["reward/failures/timeout"] == 2


async def test_the_judge_as_a_group_reward_is_recognized(monkeypatch):
    from rlfactory_nb.rewards import LLMJudge

    judge = LLMJudge(base_url="http://127.0.0.1:9/v1", model="stub")

    async def ranked(samples):
        return [{"score": float(i)} for i in range(len(samples))]

    monkeypatch.setattr(judge, "score_group", ranked)
    outcomes = await RewardRunner(judge.as_group_reward()).score_groups([group_of("a", "b", "c")])
    assert [o.score for o in outcomes[0]] == [0.0, 1.0, 2.0]
