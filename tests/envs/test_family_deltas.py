"""What a user or an environment says after an answer without a call enters as a delta, for each
family (see FAMILIES), including those whose answers stop on another token than their calls: the delta is exactly how the family's
reference template continues the conversation after that answer, with the generation prompt."""

from __future__ import annotations

import pytest

from rlfactory_nb.chat import get_chat_format
from rlfactory_nb.rollout.tokens import delta_text
from tests.chat.templates import render, template_text

FAMILIES = {  # family -> its reference template (../shared/reference/templates)
    "qwen3": "qwen3",
    "qwen3_xml": "qwen3_5",
    "qwen2_5": "qwen2_5",
    "kimi_k2": "kimi_k2",
    "llama3": "llama3_1",
    "deepseek_v3": "deepseek_v3",
    "glm4_5": "glm4_5",
    "gpt_oss": "gpt_oss",
    "gemma4": "gemma4",
}
ANSWER_ENDS = {"glm4_5": "<|user|>", "gpt_oss": "<|return|>", "gemma4": "<turn|>"}
"""families whose answers stop on another token than their calls: the token the model samples"""
# Not yet: mistral's reference template renders no `</s>` at all, which no delta (tool results
# included) handles yet.
REPLY = {"role": "user", "content": "No, my order is #12."}


class TemplateTokenizer:
    """What delta_text needs of a tokenizer: its template rendered as transformers renders it."""

    def __init__(self, template: str):
        self.chat_template = template
        self.eos_token = ""

    def apply_chat_template(self, messages, tools=None, tokenize=False, **options):
        return render(self.chat_template, list(messages), tools=tools, **options)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_user_reply_after_an_answer_is_the_templates_own_continuation(family):
    tokenizer = TemplateTokenizer(template_text(FAMILIES[family]))
    chat_format = get_chat_format(family)
    answer = chat_format.assistant_message("Which order do you mean?", [], "")
    ended = ANSWER_ENDS.get(family, chat_format.turn_end)
    delta = delta_text(tokenizer, [REPLY], False, chat_format, answer, ended)
    conversation = [{"role": "user", "content": "Cancel my order."}, answer, REPLY]
    full = render(tokenizer.chat_template, conversation, add_generation_prompt=True, enable_thinking=False)
    assert full.endswith(delta) and REPLY["content"] in delta
    assert "Which order" not in delta and "Cancel my order" not in delta
    before = full[: len(full) - len(delta)]
    assert before.endswith((ended, {"<|return|>": "<|end|>"}.get(ended, ended)))  # the delta starts after the stop token
