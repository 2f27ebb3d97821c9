import tiktoken

from rlfactory_nb.models.presets.tokenizer import QWEN_PATTERN, VOCAB_SIZE, build_tokenizer, qwen_bpe_ranks

TEXTS = [
    "What is 123*456?",
    '{"name": "calculator", "arguments": {"expression": "12*(3+4)"}}\n',
    "Ünïcödé ✓ naïve café — 東京",
    "   several   spaces\n\n\nnewlines\t tabs 2026-11-29",
]


def test_ids_equal_qwen_bpe_prefix():
    """Ordinary tokens get exactly Qwen's ids: the tiny vocabulary is Qwen's first 4,096 ranks."""
    tokenizer = build_tokenizer()
    reference = tiktoken.Encoding("qwen4096", pat_str=QWEN_PATTERN, mergeable_ranks=qwen_bpe_ranks(), special_tokens={})
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert ids == reference.encode(text)
        assert tokenizer.decode(ids) == text


def test_digits_are_single_tokens_and_special_tokens_follow_qwen3_order():
    tokenizer = build_tokenizer()
    assert len(tokenizer) == VOCAB_SIZE
    assert [tokenizer.decode([i]) for i in tokenizer.encode("90817", add_special_tokens=False)] == list("90817")
    ids = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</think>"])
    assert ids == [4096, 4097, 4098, 4096 + 14, 4096 + 25]  # Qwen3: 151643, 151644, 151645, 151657, 151668
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    # tool and think tags survive skip_special_tokens, as in Qwen3
    text = "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>x</tool_call><|im_end|>"
    assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=True) == "assistant\n<think>\n\n</think>\n\n<tool_call>x</tool_call>"
