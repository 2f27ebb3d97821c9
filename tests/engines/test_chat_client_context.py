"""A judge (or model tool) whose max_tokens does not fit its engine's context: replies get the room
left, said once; an engine's error names the knob the user set (max_tokens, not max_new_tokens)."""

import logging

import pytest

from rlfactory_nb.engines.base import SamplingParams, context_length
from rlfactory_nb.errors import JudgeError, JudgeParseError
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.rewards.judge import LLMJudge
from rlfactory_nb.rewards.samples import make_sample


class Recording:
    """The real engine, recording the sampling settings of each request."""

    def __init__(self, engine):
        self.engine, self.tokenizer, self.asked = engine, engine.tokenizer, []

    @property
    def stop_token_ids(self):
        return self.engine.stop_token_ids

    async def generate(self, prompt_ids, sampling: SamplingParams):
        self.asked.append((len(prompt_ids), sampling.max_new_tokens))
        return await self.engine.generate(prompt_ids, sampling)


@pytest.mark.timeout(300)
async def test_a_judge_with_default_max_tokens_on_a_small_model_uses_the_room_left(caplog):
    engine = Policy.load("tiny-calculator", log=lambda _: None).engine("hf")
    recording = Recording(engine)
    assert context_length(recording) == 1024  # the preset's max_position_embeddings
    judge = LLMJudge(engine=recording, tokenizer=engine.tokenizer, cache=False, max_retries=0, timeout_s=120)
    with caplog.at_level(logging.WARNING, logger="rlfactory_nb.engines.chat_client"):
        for n in range(2):
            try:
                await judge(make_sample(f"<answer>{n}</answer>", ground_truth="36", id=str(n)))
            except (JudgeError, JudgeParseError) as error:  # the tiny model writes no <score>: a parse failure, not the context
                assert "exceeds" not in str(error) and "max_new_tokens" not in str(error)
    assert recording.asked and all(prompt + room == 1024 for prompt, room in recording.asked)
    said = [r.getMessage() for r in caplog.records if "does not fit" in r.getMessage()]
    assert len(said) == 1 and "max_tokens=1024" in said[0]
    await engine.close()


class Refusing:
    tokenizer = None
    stop_token_ids = ()

    async def generate(self, prompt_ids, sampling):
        raise ValueError("prompt of 148 tokens + max_new_tokens 1024 exceeds the model's context: lower max_new_tokens")


async def test_an_engine_error_names_the_judges_knob():
    from rlfactory_nb.models.presets.tokenizer import build_tokenizer

    judge = LLMJudge(engine=Refusing(), tokenizer=build_tokenizer(), cache=False, max_retries=0)
    with pytest.raises(JudgeError) as caught:
        await judge(make_sample("<answer>1</answer>", ground_truth="1"))
    assert "lower max_tokens" in str(caught.value) and "max_new_tokens" not in str(caught.value)
