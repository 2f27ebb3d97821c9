"""Warm-start pieces: the shared-prefix loss equals the plain loss; masks train only what they should."""


import torch
from transformers import Qwen3ForCausalLM

from rlfactory_nb.models.presets import calculator, tiny_config
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.models.presets.warmstart import (
    WarmStartConfig,
    encode_conversation,
    make_examples,
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
    examples = make_examples(tokenizer, WarmStartConfig(examples=12), [calculator.CALCULATOR_TOOL], tool_share=0.5)
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
