"""`LLMJudge(engine=...)`: the judge model's own chat template renders the prompt here, requests go
to the engine concurrently, usage is metered per step; an engine that died is not one bad score.
The same judge on a real engine actor is in tests/cluster/test_judge_engine.py."""

import asyncio

import pytest
from rollout.scripted import ScriptedEngine  # tests/ is on sys.path

from rlfactory_nb.errors import EngineActorDied, JudgeError, JudgeParseError
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rewards import RewardRunner, exact_match
from rlfactory_nb.rewards.judge import LLMJudge
from rlfactory_nb.rewards.samples import make_sample


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


class CountingEngine(ScriptedEngine):
    """A ScriptedEngine that records the most requests it had in flight at once."""

    def __init__(self, tokenizer, replies, delay_s=0.05, fail: BaseException | None = None):
        super().__init__(tokenizer, replies, delay_s=delay_s)
        self.in_flight, self.max_in_flight, self.fail = 0, 0, fail

    async def generate(self, prompt_ids, sampling):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.fail is not None:
                raise self.fail
            return await super().generate(prompt_ids, sampling)
        finally:
            self.in_flight -= 1


def sample(answer: str, id: str = "s0"):
    return make_sample(f"<answer>{answer}</answer>", ground_truth="36", id=id)


async def test_an_engine_judge_renders_its_template_batches_and_meters(tokenizer):
    engine = CountingEngine(tokenizer, {"Rate the final answer": ["Looks right. <score>7</score>"]})
    judge = LLMJudge(engine=engine, max_concurrency=4)
    scores = await asyncio.gather(*(judge(sample(str(n), id=str(n))) for n in range(8)))
    assert scores == [{"score": 0.7}] * 8
    assert engine.max_in_flight == 4  # concurrent requests, for the engine to batch
    assert engine.prompts[0].startswith("<|im_start|>user\nYou are grading") and engine.prompts[0].endswith("<|im_start|>assistant\n")
    metrics = judge.metrics
    assert metrics["judge/requests"] == 8 and metrics["judge/seconds_mean"] > 0
    assert metrics["judge/tokens"] == metrics["judge/prompt_tokens"] + metrics["judge/completion_tokens"] > 8
    await judge(sample("0", id="0"))
    assert judge.usage.cached_hits == 1 and len(engine.prompts) == 8
    runner = RewardRunner({"judge": judge, "em": exact_match})
    await runner.score([sample("36")])
    assert runner.usage_metrics()["reward/judge/requests"] == 9
    assert runner.usage_metrics()["reward/judge/requests"] == 0  # per step: read once, then restarted


async def test_a_cut_off_reply_and_a_failing_engine_are_judge_errors(tokenizer):
    cut = LLMJudge(engine=CountingEngine(tokenizer, {"grading": ["I think " * 50]}), max_tokens=8)
    with pytest.raises(JudgeParseError, match="cut off at max_tokens=8"):
        await cut(sample("36"))
    broken = LLMJudge(engine=CountingEngine(tokenizer, {}, fail=RuntimeError("CUDA error: out of memory")))
    with pytest.raises(JudgeError, match="judge engine CountingEngine failed: RuntimeError: CUDA error"):
        await broken(sample("36"))
    slow = LLMJudge(engine=CountingEngine(tokenizer, {"grading": ["<score>1</score>"]}, delay_s=5), timeout_s=0.2)
    with pytest.raises(JudgeError, match="no reply within 0.2 s"):
        await slow(sample("36"))
    assert broken.usage.failures == slow.usage.failures == 1


async def test_a_dead_judge_engine_is_raised_whatever_on_error_says(tokenizer):
    dead = LLMJudge(engine=CountingEngine(tokenizer, {}, fail=EngineActorDied("engine actor judge-1 died")))
    runner = RewardRunner({"em": exact_match, "judge": dead}, on_error="zero")
    with pytest.raises(EngineActorDied, match="judge-1 died"):
        await runner.score([sample("36"), sample("1", id="s1")])
    with pytest.raises(EngineActorDied):
        await RewardRunner({"judge": dead.as_group_reward()}).score_groups([[sample("36")]])
