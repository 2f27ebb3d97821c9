"""One bad engine request fails alone (issue 32, item 8).

A token id of -1 or past the vocabulary, a seed of 2**70 or a NaN temperature used to reach the
batch: the first two failed every request batched with it (on CUDA an index error is a device-side
assert that ends the engine), NaN sampled garbage. Now `check_request` refuses the request before it
joins a batch, naming the field, and the requests sent with it are served. The engine is the real hf
engine over the tiny-calculator preset.
"""

import asyncio
import math
import re

import pytest

import rlfactory_nb as rf
from rlfactory_nb.engines import Generation, SamplingParams

GOOD = SamplingParams(temperature=0.7, max_new_tokens=4, seed=1)


def unchecked(**fields) -> SamplingParams:
    """Settings that skipped __post_init__, as a copy unpickled in another process does."""
    sampling = SamplingParams(max_new_tokens=4)
    for name, value in fields.items():
        object.__setattr__(sampling, name, value)
    return sampling


@pytest.fixture(scope="module")
def policy():
    return rf.Policy.load("tiny-calculator")


@pytest.fixture
async def engine(policy):
    engine = policy.engine("hf", num_threads=1, batch_wait_s=0.05)
    yield engine
    await engine.close()


@pytest.fixture(scope="module")
def prompt(policy) -> list[int]:
    return policy.tokenizer.encode("What is 12 * 7?")


BAD_REQUESTS = {  # name -> (prompt, vocabulary size) -> (ids, sampling, the error it must raise)
    "negative-id": lambda prompt, vocab: ([*prompt, -1], GOOD, r"prompt_ids\[\d+\] = -1 is not a token id"),
    "id-past-vocab": lambda prompt, vocab: ([vocab, *prompt], GOOD, rf"prompt_ids\[0\] = {vocab} is not a token id"),
    "huge-seed": lambda prompt, vocab: (prompt, unchecked(seed=2**70), r"SamplingParams\.seed must be .*2\*\*63 - 1"),
    "negative-seed": lambda prompt, vocab: (prompt, unchecked(seed=-1), r"SamplingParams\.seed"),
    "nan-temperature": lambda prompt, vocab: (prompt, unchecked(temperature=math.nan), r"SamplingParams\.temperature"),
    "inf-temperature": lambda prompt, vocab: (prompt, unchecked(temperature=math.inf), r"SamplingParams\.temperature"),
    "nan-top-p": lambda prompt, vocab: (prompt, unchecked(top_p=math.nan), r"SamplingParams\.top_p"),
    "float-top-k": lambda prompt, vocab: (prompt, unchecked(top_k=2.5), r"SamplingParams\.top_k"),
}


@pytest.mark.parametrize("make", BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys())
async def test_a_bad_request_fails_alone_naming_the_field(engine, prompt, make):
    vocab = engine.model.get_input_embeddings().num_embeddings
    bad_ids, bad_sampling, error = make(prompt, vocab)
    requests = [(prompt, GOOD), (bad_ids, bad_sampling), (prompt, GOOD)]
    first, bad, last = await asyncio.gather(*(engine.generate(ids, s) for ids, s in requests), return_exceptions=True)
    assert isinstance(bad, ValueError) and re.search(error, str(bad)), f"not refused by name: {bad!r}"
    for result in (first, last):  # before: the bad request's error, or garbage beside a NaN temperature
        assert isinstance(result, Generation), f"a good request failed with the bad one: {result!r}"
    assert first.token_ids == last.token_ids  # same prompt, same seed


def test_bad_sampling_settings_are_refused_when_made():
    for fields in ({"temperature": math.nan}, {"seed": 2**63}, {"seed": -1}, {"top_p": math.inf}):
        with pytest.raises(ValueError, match=next(iter(fields))):
            SamplingParams(**fields)
    assert SamplingParams(seed=2**63 - 1).seed == 2**63 - 1
