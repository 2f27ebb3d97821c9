import asyncio
import time

import pytest
import torch

from rlfactory_nb.engines import Generation, HFEngine, SamplingParams


def make_engine(model, tokenizer, **options) -> HFEngine:
    """One intra-op thread: many times faster for a tiny model on a busy 2-core machine."""
    return HFEngine(model, tokenizer, num_threads=1, **options)


SAMPLED = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=24)
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=24)


def _assert_matches_forward(model, prompts, generations, forward_logprobs, tolerance=1e-4):
    for prompt, generation in zip(prompts, generations):
        reference = forward_logprobs(model, prompt, generation.token_ids)
        worst = max(abs(a - b) for a, b in zip(generation.logprobs, reference))
        assert worst < tolerance, f"engine logprobs differ from a forward pass by {worst:.2e}"


async def test_logprobs_match_a_teacher_forced_forward_pass(tiny_model, tokenizer, prompts, forward_logprobs):
    engine = make_engine(tiny_model, tokenizer)
    # Different prompt lengths in one batch: left padding must not change the numbers.
    generations = await asyncio.gather(*(engine.generate(p, SAMPLED) for p in prompts))
    assert engine.batches_run == 1
    assert all(len(g.token_ids) > 0 for g in generations)
    _assert_matches_forward(tiny_model, prompts, generations, forward_logprobs)
    await engine.close()


async def test_concurrent_requests_share_batches_and_keep_the_loop_free(tiny_model, tokenizer, prompts):
    engine = make_engine(tiny_model, tokenizer, max_batch_size=64)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    started = time.perf_counter()
    sampling = SamplingParams(max_new_tokens=64)
    generations = await asyncio.gather(*(engine.generate(prompts[i % 4], sampling) for i in range(32)))
    elapsed = time.perf_counter() - started
    ticking.cancel()
    assert len(generations) == 32 and all(isinstance(g, Generation) for g in generations)
    assert engine.requests_served == 32
    assert engine.batches_run < 32, "concurrent requests were not batched"
    # The model ran in a worker thread: the event loop kept ticking meanwhile.
    assert ticks >= 0.3 * elapsed / 0.005, f"{ticks} ticks in {elapsed:.2f} s: the event loop was blocked"
    await engine.close()


async def test_requests_arriving_during_a_batch_join_the_next_one(tiny_model, tokenizer, prompts):
    engine = make_engine(tiny_model, tokenizer)
    first = asyncio.create_task(engine.generate(prompts[0], SamplingParams(max_new_tokens=400)))
    await asyncio.sleep(0.05)
    assert engine.batches_run == 0 and not first.done()  # the first batch is running now
    later = await asyncio.gather(*(engine.generate(p, SamplingParams(max_new_tokens=8)) for p in prompts))
    await first
    assert engine.batches_run == 2 and engine.requests_served == 5
    assert all(len(g.token_ids) <= 8 for g in later)
    await engine.close()


async def test_stop_token_ends_a_row_and_the_budget_ends_with_length(tiny_model, tokenizer, prompts):
    seeded = SamplingParams(max_new_tokens=24, seed=3)
    free = await make_engine(tiny_model, tokenizer).generate(prompts[0], seeded)
    assert free.finish_reason == "length" and len(free.token_ids) == seeded.max_new_tokens
    # Make a token this seeded run samples at position >= 2 (and not before) a stop token.
    stop = next(t for i, t in enumerate(free.token_ids) if i >= 2 and t not in free.token_ids[:i])
    cut = free.token_ids.index(stop) + 1
    engine = make_engine(tiny_model, tokenizer, stop_token_ids=(stop,))
    stopped, short = await asyncio.gather(
        engine.generate(prompts[0], seeded),
        engine.generate(prompts[0], SamplingParams(max_new_tokens=1, seed=3)),
    )
    assert stopped == Generation(free.token_ids[:cut], stopped.logprobs, "stop")
    assert stopped.logprobs == pytest.approx(free.logprobs[:cut], abs=1e-5)
    assert short.token_ids == free.token_ids[:1] and short.finish_reason == "length"
    assert engine.batches_run == 1  # both rows in one batch, each with its own end
    await engine.close()


async def test_seeded_requests_reproduce(tiny_model, tokenizer, prompts):
    engine = make_engine(tiny_model, tokenizer)
    seeded = SamplingParams(max_new_tokens=16, seed=7)
    first, second, other = await asyncio.gather(
        engine.generate(prompts[1], seeded),
        engine.generate(prompts[1], seeded),
        engine.generate(prompts[1], SamplingParams(max_new_tokens=16, seed=8)),
    )
    assert first.token_ids == second.token_ids
    assert first.token_ids != other.token_ids
    await engine.close()


async def test_update_weights_changes_outputs_and_matches_the_new_model(
    tiny_model, tokenizer, prompts, forward_logprobs, random_qwen3
):
    engine = make_engine(tiny_model, tokenizer)
    seeded = SamplingParams(max_new_tokens=24, seed=5)
    before = await engine.generate(prompts[0], seeded)
    new_model = random_qwen3(1)
    await engine.update_weights(new_model.state_dict())
    after = await asyncio.gather(*(engine.generate(p, SAMPLED) for p in prompts))
    assert (await engine.generate(prompts[0], seeded)).token_ids != before.token_ids
    _assert_matches_forward(new_model, prompts, after, forward_logprobs)
    with pytest.raises(KeyError, match="not_a_weight"):
        await engine.update_weights({"not_a_weight": torch.zeros(1)})
    await engine.close()


async def test_bad_requests_fail_loudly_and_close_stops_the_engine(tiny_model, tokenizer, prompts):
    engine = make_engine(tiny_model, tokenizer)
    with pytest.raises(ValueError, match="max_position_embeddings 512"):
        await engine.generate(prompts[0], SamplingParams(max_new_tokens=600))
    with pytest.raises(ValueError, match="at least one prompt token"):
        await engine.generate([], GREEDY)
    await engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        await engine.generate(prompts[0], GREEDY)


async def test_num_threads_applies_to_the_engine_thread_only(tiny_model, tokenizer):
    engine = HFEngine(tiny_model, tokenizer, num_threads=1)
    before = torch.get_num_threads()
    assert await engine._in_worker(lambda _: torch.get_num_threads(), None) == 1
    assert torch.get_num_threads() == before
    await engine.close()
