"""A model folder's chat template cannot make a huge value while it renders (issue 32, item 10):
`{{'x'*1500000000}}` ran 38 s to a MemoryError before the bounded sandbox (rollout/template_bounds.py)."""

import copy
import time

import pytest

from rlfactory_nb.rollout.template_bounds import TemplateBoundError
from rlfactory_nb.rollout.tokens import prompt_ids, render

HOSTILE = {
    "repeat": "{{ 'x' * 1500000000 }}",
    "repeat, int first": "{{ 1500000000 * 'x' }}",
    "list": "{{ ([0] * 1500000000) | length }}",
    "width": "{{ '%1500000000s' % 'x' }}",
    "star width": "{{ '%*s' % (1500000000, 'x') }}",
    "power": "{{ 10 ** 100000000 }}",
}


@pytest.fixture
def tokenizer(tiny_policy):
    return copy.deepcopy(tiny_policy.tokenizer)


@pytest.mark.parametrize("template", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_template_is_refused_before_it_allocates(tokenizer, template):
    tokenizer.chat_template = template
    started = time.perf_counter()
    with pytest.raises(TemplateBoundError, match="chat template asked for"):
        render(tokenizer, [{"role": "user", "content": "hi"}])
    assert time.perf_counter() - started < 5


def test_the_real_template_renders_as_before(tiny_policy):
    messages = [{"role": "user", "content": "What is 2*3?"}]
    bounded = render(tiny_policy.tokenizer, messages, add_generation_prompt=True)
    assert bounded == tiny_policy.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt_ids(tiny_policy.tokenizer, messages)  # the rollout path renders through it too
    assert render(tiny_policy.tokenizer, messages).count("<|im_start|>") == 1

