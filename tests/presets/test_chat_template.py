"""Our Qwen3-format template renders exactly what Qwen3's official template renders."""

from pathlib import Path

import pytest

from rlfactory_nb.models.presets.tokenizer import build_tokenizer

from .conversations import CASES

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "qwen3" / "qwen3_chat_template.jinja"


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.mark.skipif(not REFERENCE.exists(), reason=f"Qwen3 reference template not found at {REFERENCE}")
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("generation_prompt", [False, True])
@pytest.mark.parametrize("thinking", [None, False])
def test_renders_like_qwen3(tokenizer, case, generation_prompt, thinking):
    messages, tools = CASES[case]
    options = {} if thinking is None else {"enable_thinking": thinking}
    render = lambda template: tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt, chat_template=template, **options
    )
    assert render(None) == render(REFERENCE.read_text())
