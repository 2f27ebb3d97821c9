"""`engine.score(ids)`: the log-prob of every given token after the first, from one forward pass.

The hf engine scores through the trainer's chunked head (`rlfactory_nb.engines.logprobs`), so its
numbers must equal a plain teacher-forced forward pass; bad requests fail alone, before any batch.
"""

import asyncio

import pytest
import torch

from rlfactory_nb.engines import HFEngine, SamplingParams, StampedEngine
from rlfactory_nb.engines.logprobs import sequence_logprobs


async def test_hf_score_equals_a_forward_pass(tiny_model, tokenizer, prompts, forward_logprobs):
    engine = HFEngine(tiny_model, tokenizer, num_threads=1)
    scored = await asyncio.gather(*(engine.score(ids) for ids in prompts))
    for ids, logprobs in zip(prompts, scored):
        assert len(logprobs) == len(ids) - 1
        reference = forward_logprobs(tiny_model, ids[:1], ids[1:])
        assert max(abs(a - b) for a, b in zip(logprobs, reference)) < 1e-5
    # between generation batches too, under the same lock
    generation, again = await asyncio.gather(
        engine.generate(prompts[0], SamplingParams(max_new_tokens=4)), engine.score(prompts[0])
    )
    assert again == scored[0] and len(generation.token_ids) >= 1
    await engine.close()


async def test_score_of_a_generation_matches_its_logprobs(tiny_model, tokenizer, prompts):
    engine = HFEngine(tiny_model, tokenizer, num_threads=1)
    generation = await engine.generate(prompts[2], SamplingParams(temperature=1.0, max_new_tokens=12, seed=3))
    scored = await engine.score(prompts[2] + generation.token_ids)
    tail = scored[len(prompts[2]) - 1 :]
    assert max(abs(a - b) for a, b in zip(tail, generation.logprobs)) < 1e-4
    await engine.close()


def test_chunks_do_not_change_the_numbers(tiny_model, prompts):
    ids = torch.tensor([prompts[2]])
    whole = sequence_logprobs(tiny_model, ids, chunk=1024, dtype=torch.float32)
    pieces = sequence_logprobs(tiny_model, ids, chunk=3, dtype=torch.float32)
    assert whole.shape == (1, len(prompts[2]) - 1)
    torch.testing.assert_close(whole, pieces)


async def test_bad_score_requests_fail_alone(tiny_model, tokenizer):
    engine = HFEngine(tiny_model, tokenizer, num_threads=1)
    with pytest.raises(ValueError, match="at least two tokens"):
        await engine.score([5])
    with pytest.raises(ValueError, match=r"token_ids\[1\] = 99999999 is not a token id"):
        await engine.score([5, 99999999])
    with pytest.raises(ValueError, match="513 tokens exceed the model's context of 512"):
        await engine.score([5] * 513)
    assert len(await engine.score([5, 6, 7])) == 2
    await engine.close()


async def test_a_stamped_engine_forwards_score(tiny_model, tokenizer, prompts):
    inner = HFEngine(tiny_model, tokenizer, num_threads=1)
    assert await StampedEngine(inner, version=3).score(prompts[1]) == await inner.score(prompts[1])
    await inner.close()
