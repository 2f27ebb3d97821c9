"""The LLM judge against a real OpenAI-compatible HTTP server (tests/rewards/openai_stub_server.py,
a subprocess on 127.0.0.1), whose behaviour each test scripts through the model name. An endpoint
that is down, slow, failing or answering garbage: tests/faults/test_rewards.py."""

import asyncio
import sys
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from rlfactory_nb._async import run_sync
from rlfactory_nb.rewards.judge import JudgeParseError, LLMJudge
from rlfactory_nb.rewards.samples import make_sample

STUB = Path(__file__).parent / "openai_stub_server.py"
sys.path.insert(0, str(STUB.parent))
from openai_stub_server import COMPLETION_TOKENS, PROMPT_TOKENS


@pytest.fixture(scope="module")
def server(judge_server):
    return judge_server


@pytest.fixture(autouse=True)
def fresh_server(server):
    httpx.post(f"{server}/reset")


def stats(server: str) -> dict:
    return httpx.get(f"{server}/stats").json()


def model(**script) -> str:
    """The stub's instructions for a request, written as its model name."""
    return urlencode(script)


def judge_for(server: str, **options) -> LLMJudge:
    options.setdefault("backoff_s", 0.01)
    return LLMJudge(f"{server}/v1", options.pop("model", model()), **options)


def sample(answer: str = "36", id: str = "s0"):
    return make_sample(f"<think>6*6</think><answer>{answer}</answer>", ground_truth="36", id=id)


async def test_scores_a_sample_with_the_rendered_prompt(server, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    judge = judge_for(server, model=model(score=8), api_key_env="JUDGE_KEY")
    assert await judge(sample("35")) == {"score": 0.8}
    body = stats(server)["last_body"]
    prompt = body["messages"][0]["content"]
    assert "question" in prompt and "<answer>35</answer>" in prompt and "\n35\n" in prompt
    assert "\n36\n" in prompt  # the reference answer
    assert body["temperature"] == 0.0 and body["model"] == model(score=8)
    assert stats(server)["last_auth"] == "Bearer sk-test"
    await judge.aclose()


async def test_sends_no_key_when_none_is_set(server):
    await judge_for(server, api_key_env="RLF_NO_SUCH_VARIABLE")(sample())
    assert stats(server)["last_auth"] is None


async def test_unparseable_reply_names_the_model_and_quotes_it(server):
    judge = judge_for(server, model=model(text="Pretty good overall!"))
    for _ in range(2):
        with pytest.raises(JudgeParseError, match=r"text=Pretty.*no readable score.*Pretty good overall!"):
            await judge(sample())
    assert judge.usage.parse_errors == 2
    assert stats(server)["requests"] == 2  # a reply without a score is not cached


async def test_identical_requests_are_answered_from_the_cache(server):
    judge = judge_for(server)
    await judge(sample(id="a"))
    await judge(sample(id="b"))  # same text, another rollout: the same request
    assert stats(server)["requests"] == 1 and judge.usage.cached_hits == 1
    await judge(sample("35"))
    assert stats(server)["requests"] == 2
    uncached = judge_for(server, cache=False)
    await uncached(sample())
    await uncached(sample())
    assert stats(server)["requests"] == 4


async def test_the_sqlite_cache_outlives_the_judge(server, tmp_path):
    await judge_for(server, cache_path=tmp_path / "judge.sqlite")(sample())
    later = judge_for(server, cache_path=tmp_path / "judge.sqlite")
    assert await later(sample()) == {"score": 0.5}
    assert stats(server)["requests"] == 1 and later.usage.cached_hits == 1


async def test_usage_accumulates_and_prices(server):
    judge = judge_for(server)
    for answer in ("1", "2", "3", "3"):
        await judge(sample(answer))
    usage = judge.usage
    assert (usage.requests, usage.cached_hits) == (3, 1)
    assert (usage.prompt_tokens, usage.completion_tokens) == (3 * PROMPT_TOKENS, 3 * COMPLETION_TOKENS)
    price = (3 * PROMPT_TOKENS * 0.5 + 3 * COMPLETION_TOKENS * 2.0) / 1e6
    assert judge.cost(0.5, 2.0) == pytest.approx(price)
    assert judge.metrics["judge/requests"] == 3 and judge.metrics["judge/seconds_mean"] > 0


async def test_a_reply_cut_at_max_tokens_says_so_and_is_not_cached(server):
    judge = judge_for(server, model=model(text="Let me think about", length=1), max_tokens=4)
    for _ in range(2):
        with pytest.raises(JudgeParseError, match="cut off at max_tokens=4"):
            await judge(sample())
    assert stats(server)["requests"] == 2


async def test_group_mode_scores_all_attempts_in_one_request(server):
    judge = judge_for(server, model=model(scores="3,9,5"))
    group = [sample(answer, id=f"g{i}") for i, answer in enumerate(["30", "36", "6"])]
    assert await judge.score_group(group) == [{"score": 0.3}, {"score": 0.9}, {"score": 0.5}]
    prompt = stats(server)["last_body"]["messages"][0]["content"]
    assert stats(server)["requests"] == 1 and "3 attempts" in prompt
    assert all(
        f"<attempt id={i}>\n<think>6*6</think><answer>{a}</answer>" in prompt
        for i, a in zip((1, 2, 3), ("30", "36", "6"))
    )


async def test_group_mode_needs_one_score_per_attempt(server):
    judge = judge_for(server, model=model(scores="3,9"))
    with pytest.raises(JudgeParseError, match="expected 3 scores, one per attempt, got 2"):
        await judge.score_group([sample(str(i), id=str(i)) for i in range(3)])


async def test_group_mode_rejects_samples_of_different_prompts(server):
    other = sample()
    other.prompt[-1] = {"role": "user", "content": "another question"}
    with pytest.raises(ValueError, match="2 different questions"):
        await judge_for(server).score_group([sample(), other])


async def test_group_reward_hook_scores_each_group(server):
    judge_group = judge_for(server, model=model(scores="10,0")).as_group_reward()
    assert judge_group.__name__ == "judge_group" and judge_group.group_reward is True
    groups = [[sample("1", "a"), sample("2", "b")], [sample("3", "c"), sample("4", "d")]]
    values = await asyncio.gather(*(judge_group(group) for group in groups))
    assert values == [[{"score": 1.0}, {"score": 0.0}]] * 2
    assert stats(server)["requests"] == 2


async def test_concurrent_requests_stay_within_the_limit(server):
    judge = judge_for(server, model=model(delay=0.2), max_concurrency=3)
    scores = await asyncio.gather(*(judge(sample(str(i))) for i in range(9)))
    assert scores == [{"score": 0.5}] * 9
    assert stats(server)["max_concurrent"] == 3


def test_usable_from_plain_code_on_several_loops(server):
    judge = judge_for(server)
    assert run_sync(judge(sample("1"))) == {"score": 0.5}
    assert asyncio.run(judge(sample("2"))) == {"score": 0.5}  # a second loop gets its own client
    assert stats(server)["requests"] == 2


def test_a_template_field_that_does_not_exist_is_named():
    with pytest.raises(ValueError, match=r"\{answer\}.*question, response, final_answer, ground_truth"):
        LLMJudge("http://127.0.0.1:1/v1", "m", prompt_template="Grade {answer}")
