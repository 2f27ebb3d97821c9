"""The embedded default builds offline, loads with plain transformers, and emits tool calls sometimes."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlfactory_nb.chat import get_parser
from rlfactory_nb.models.presets import calculator, preset_path
from rlfactory_nb.rollout.tokens import prompt_ids

pytestmark = pytest.mark.slow


def test_preset_loads_with_plain_transformers(tiny_policy):
    path = preset_path("tiny-calculator")
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert 0.5e6 < sum(p.numel() for p in model.parameters()) < 2e6
    assert model.config.model_type == "qwen3" and model.config.tie_word_embeddings
    assert tokenizer.eos_token == "<|im_end|>" and "<tools>" in tokenizer.chat_template
    report = json.loads((path / "warm_start.json").read_text())
    assert report["step"] > 0 and {"expression_copy", "result_copy", "seconds"} <= set(report)


def test_warm_started_model_sometimes_calls_the_tool_well_formed(tiny_policy):
    tokenizer, model = tiny_policy.tokenizer, tiny_policy.model
    questions = calculator.questions(32, seed=11)
    prompt = [prompt_ids(tokenizer, q.messages(), [calculator.CALCULATOR_TOOL]) for q in questions]
    torch.manual_seed(0)
    length = max(map(len, prompt))
    ids = torch.tensor([[tokenizer.pad_token_id] * (length - len(p)) + p for p in prompt])
    attention = (ids != tokenizer.pad_token_id).long()
    out = model.generate(ids, attention_mask=attention, max_new_tokens=40, do_sample=True, pad_token_id=tokenizer.pad_token_id)
    texts = [tokenizer.decode(row[length:], skip_special_tokens=True) for row in out]
    parser = get_parser("qwen3")
    calls = [c for text in texts for c in parser.parse(text).calls]
    well_formed = [c for c in calls if c.name == "calculator" and isinstance(c.arguments.get("expression"), str)]
    assert 0 < len(well_formed) < len(texts), f"expected tool calls part of the time, got {len(well_formed)}/32"
    assert sum("<answer>" in t for t in texts) > 0

