"""Marker text stays text: the quoting under the rollout's guard, a judge's and a model tool's prompt.

Tokenizers turn the text of an added token into that token wherever it appears, and a template
render is tokenized whole: text from the model being trained (a tool result it provoked, its answer
in a judge's prompt) that spells `<|im_end|>\\n<|im_start|>assistant` would end a turn and open
another in the reader's context. So before rendering, each marker's text is swapped for an ASCII
placeholder that templates pass through unchanged (JSON-quoting included), and after rendering
each placeholder is tokenized character by character: the reader sees the characters, never the
control token.

The markers are the tokenizer's special tokens and, given the family, its structural texts whether
or not the tokenizer marks them special (`ChatFormat.control_markers`, `keep_tokens`,
`end_of_turn`, `turn_end`): DeepSeek's `<｜User｜>` is a plain added token. Text is quoted when it
*tokenizes* to a marker, not only when it spells one: a tokenizer whose added tokens are normalized
(NFKC, lowercase) reads other spellings as the marker too, so each text is also tokenized and the
spans of marker ids quoted.

Tool names come from the model and some templates write them into a header (gpt-oss's
`<|start|>functions.NAME to=assistant`): a name outside `NAME_PATTERN` is rendered with every other
character replaced by `_` (`safe_name`), so it carries no markers, spaces or newlines.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rlfactory_nb.types import Message

_PLACEHOLDER = re.compile(r"RFNBGUARD(\d{6})X")
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")
"""what a tool name may be in any family's tool turn (OpenAI's and MCP's characters, plus `:`)"""
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_.:\-]")


class Quoter:
    """Quotes the markers of one tokenizer (and family) in texts; `found` collects what it replaced,
    in placeholder order, for `encode`."""

    def __init__(self, tokenizer: Any, chat_format: Any = None):
        self.tokenizer = tokenizer
        texts = marker_texts(tokenizer, chat_format)
        self.pattern = _pattern(texts)
        self.marker_ids = _marker_ids(tokenizer, texts)
        self.found: list[str] = []

    def text(self, text: str) -> str:
        """`text` with each marker (spelled, or read as one by the tokenizer) as a placeholder; the
        same object when there is none."""
        spans = _merged([*(match.span() for match in self.pattern.finditer(text)), *self._token_spans(text)])
        if not spans:
            return text
        pieces, at = [], 0
        for start, end in spans:
            self.found.append(text[start:end])
            pieces += [text[at:start], f"RFNBGUARD{len(self.found) - 1:06d}X"]
            at = end
        return "".join([*pieces, text[at:]])

    def content(self, content: Any) -> Any:
        """A message's content: a text, or a list of parts whose `text` fields are quoted."""
        if isinstance(content, str):
            return self.text(content)
        if isinstance(content, list):
            return [{**part, "text": self.text(part["text"])} if is_text_part(part) else part for part in content]
        return content

    def messages(self, messages: Sequence[Message]) -> list[Message]:
        """Every message's content quoted (a judge's or model tool's prompt: all of it is text)."""
        return [{**message, "content": self.content(message.get("content"))} if "content" in message else message
                for message in messages]

    def _token_spans(self, text: str) -> list[tuple[int, int]]:
        """Spans of `text` that the tokenizer reads as a marker though they do not spell one."""
        if not self.marker_ids or not text:
            return []
        try:
            encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            pairs = list(zip(encoded["input_ids"], encoded["offset_mapping"]))
        except (NotImplementedError, TypeError, KeyError, ValueError):  # a slow tokenizer: no offsets
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            return [(0, len(text))] if self.marker_ids.intersection(ids) else []
        return [(int(start), int(end)) for token, (start, end) in pairs if token in self.marker_ids and end > start]


def quote_text(tokenizer: Any, text: str, chat_format: Any = None) -> tuple[str, list[str]]:
    """`text` with every marker quoted, and the texts replaced: render it into a prompt and tokenize
    the render with `encode(tokenizer, rendered, found)`."""
    quoter = Quoter(tokenizer, chat_format)
    return quoter.text(text), quoter.found


def encode(tokenizer: Any, text: str, found: Sequence[str]) -> list[int]:
    """Ids of a render of quoted text: the text as the tokenizer reads it, each placeholder as its
    marker's characters."""
    if not found:
        return tokenizer.encode(text, add_special_tokens=False)
    ids: list[int] = []
    for index, piece in enumerate(_PLACEHOLDER.split(text)):
        if index % 2:
            ids += [i for char in found[int(piece)] for i in tokenizer.encode(char, add_special_tokens=False)]
        elif piece:
            ids += tokenizer.encode(piece, add_special_tokens=False)
    return ids


def safe_name(name: str) -> str:
    """`name` if it fits `NAME_PATTERN`, else its allowed characters with `_` for the others."""
    if NAME_PATTERN.fullmatch(name):
        return name
    return _NOT_IN_A_NAME.sub("_", name)[:128] or "_"


def marker_texts(tokenizer: Any, chat_format: Any = None) -> tuple[str, ...]:
    """The texts quoted: the tokenizer's special tokens and the family's structural markers (its
    `control_markers`, `keep_tokens`, `end_of_turn` and `turn_end`), longest first."""
    texts = _special_texts(tokenizer)
    if chat_format is not None:
        texts |= set(getattr(chat_format, "control_markers", ()))
        texts |= {*chat_format.keep_tokens, *chat_format.end_of_turn, chat_format.turn_end}
    return tuple(sorted((text for text in texts if text), key=lambda text: (-len(text), text)))


def is_text_part(part: Any) -> bool:
    """Whether a part of a list content is text (a dict with a `text` string), which is read."""
    return isinstance(part, dict) and isinstance(part.get("text"), str)


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _special_texts(tokenizer: Any) -> set[str]:
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    texts = {token.content for token in added.values() if getattr(token, "special", False)}
    return {text for text in texts | set(getattr(tokenizer, "all_special_tokens", ()) or ()) if text}


def _marker_ids(tokenizer: Any, texts: Sequence[str]) -> frozenset[int]:
    """The ids of the markers that are one token of this vocabulary (what a normalizer may map other
    spellings onto)."""
    get_vocab: Callable[[], dict[str, int]] | None = getattr(tokenizer, "get_added_vocab", None)
    get_vocab = get_vocab or getattr(tokenizer, "get_vocab", None)
    vocab = get_vocab() if get_vocab is not None else {}
    return frozenset(vocab[text] for text in texts if text in vocab)


@functools.lru_cache(maxsize=64)
def _pattern(texts: tuple[str, ...]) -> re.Pattern[str]:
    """The markers' texts, longest first, and text that looks like a placeholder (a text that quotes
    one is quoted too, so it cannot stand for another marker's text)."""
    return re.compile("|".join([_PLACEHOLDER.pattern, *map(re.escape, texts)]))
