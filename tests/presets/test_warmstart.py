"""Warm-start pieces: the shared-prefix loss equals the plain loss; masks train only what they should;
batches are fresh and never held-out; the copy gate counts a perfect copier as perfect."""

import random
import re

import torch
from transformers import Qwen3ForCausalLM

from rlfactory_nb.models.presets import calculator, tiny_config
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.models.presets.warmstart import (
    WarmStartConfig,
    copy_accuracy,
    draw_batch,
    encode_conversation,
    prefix_shared_loss,
    shared_prefix_length,
)


def plain_loss(model, examples):
    total, count = 0.0, 0
    for ids, mask in examples:
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
        logprobs = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        trained = torch.tensor(mask[1:], dtype=torch.bool)
        total, count = total - logprobs[trained].sum(), count + int(trained.sum())
    return total / count


def test_shared_prefix_loss_equals_the_plain_loss():
    tokenizer = build_tokenizer()
    examples = draw_batch(
        random.Random(0), tokenizer, WarmStartConfig(batch_size=12), [calculator.CALCULATOR_TOOL], 0.5, set()
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_config()).eval()
    prefix = shared_prefix_length(examples)
    assert prefix > 150  # the whole tool list is shared
    shared = prefix_shared_loss(model, examples, prefix, tokenizer.pad_token_id)
    assert torch.allclose(shared, plain_loss(model, examples), atol=1e-5)


def test_tool_conversations_train_the_copied_digits_and_never_the_tool_response():
    tokenizer = build_tokenizer()
    question = calculator.questions(1, seed=5)[0]
    ids, mask = encode_conversation(tokenizer, calculator.tool_conversation(question), [calculator.CALCULATOR_TOOL])
    trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    masked = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
    assert question.expression in trained and f"<answer>{question.answer}</answer>" in trained
    assert f"<tool_response>\n{question.answer}\n</tool_response>" in masked
    assert "<tool_response>" not in trained


def _asked(tokenizer, batch):
    return [re.search(r"What is (\S+)\?", tokenizer.decode(ids)).group(1) for ids, _ in batch]


def test_batches_are_fresh_questions_and_never_excluded_ones():
    tokenizer = build_tokenizer()
    cfg = WarmStartConfig(batch_size=64)
    rng = random.Random(7)
    first, second = (_asked(tokenizer, draw_batch(rng, tokenizer, cfg, None, 1.0, set())) for _ in range(2))
    assert len(set(first + second)) == 128  # every step new questions
    excluded = set(first[:32])  # what the same stream would draw first
    again = _asked(tokenizer, draw_batch(random.Random(7), tokenizer, cfg, None, 1.0, excluded))
    assert len(again) == 64 and not excluded & set(again)


def _perfect_copier(tokenizer):
    """A stand-in for greedy decoding by a model that copies every digit right, within the budget."""

    def greedy(model, tokenizer_, prompts, max_new_tokens):
        texts = []
        for prompt in prompts:
            decoded = tokenizer.decode(prompt)
            result = re.findall(r"<tool_response>\n(\S+)\n", decoded)
            if result:
                wanted = f"{result[-1]}</answer><|im_end|>"
            else:
                wanted = re.findall(r"What is (\S+)\?", decoded)[-1] + '"}}\n</tool_call><|im_end|>'
            texts.append(tokenizer.decode(tokenizer.encode(wanted, add_special_tokens=False)[:max_new_tokens]))
        return texts

    return greedy


def test_the_copy_gate_counts_six_digit_answers_copied_whole(monkeypatch):
    """The gate once gave every 6-digit product 10 tokens, cut "</answer>" off and read 0.7 for a
    model that copied them all."""
    from rlfactory_nb.models.presets import warmstart

    tokenizer = build_tokenizer()
    questions = [q for q in calculator.questions(200, seed=3) if len(str(q.answer)) == 6][:8]
    questions += calculator.questions(8, seed=4)
    assert len(questions) == 16
    monkeypatch.setattr(warmstart, "greedy", _perfect_copier(tokenizer))
    assert copy_accuracy(None, tokenizer, questions) == (1.0, 1.0)


def test_the_shipped_preset_copies_products_into_its_answer():
    """The demo's ceiling: after GRPO teaches the tool call, held-out reward is the result copy."""
    from transformers import AutoModelForCausalLM

    from rlfactory_nb.models.presets.shipped import shipped_folder

    folder = shipped_folder("tiny-calculator")
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = build_tokenizer()
    products = [q for q in calculator.questions(300, seed=calculator.HELDOUT_SEED) if "*" in q.expression][:32]
    expression, result = copy_accuracy(model, tokenizer, products)
    assert expression >= 0.9 and result >= 0.85, (expression, result)
