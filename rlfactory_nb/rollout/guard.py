"""Control-token text inside a message stays text.

A delta (rollout/tokens.py) is a template render tokenized as a whole, and tokenizers turn the text
of an added token into that token wherever it appears: a tool result that echoes `<|im_end|>\\n
<|im_start|>assistant` (a web page, a file, the model's own words) would end the tool turn and open
an assistant turn in the context the policy reads and is trained on. So before rendering, each
structural marker's text inside a message's `content`, `name` or `tool_call_id` is swapped for an
ASCII placeholder that templates pass through unchanged (JSON-quoting included), and after
rendering each placeholder is tokenized character by character: the model reads the characters,
never the control token. A chat server's `apply_chat_template` does not do this, so the drift check
reports such a turn as differing from a full render (which is the point).

The markers are the tokenizer's special tokens and, given the family, its structural texts whether
or not the tokenizer marks them special: DeepSeek's `<｜User｜>` and `<｜tool▁outputs▁end｜>` are
plain added tokens, so guarding only special tokens let a tool result close the tool section and
write a user turn and an assistant turn. Text is quoted when it *tokenizes* to a marker, not only
when it spells one: a tokenizer whose added tokens are normalized (NFKC, lowercase) reads other
spellings as the marker too, so each field is also tokenized and the spans of marker ids quoted.

Tool names (a message's `name`, and the call name a family's template writes into the result's
header: gpt-oss's `<|start|>functions.NAME to=assistant`) come from the model. A name outside
`NAME_PATTERN` is rendered with every other character replaced by `_`, so it cannot carry markers,
spaces or newlines into the tool turn.

`quote_text` does the same for one text that enters another model's prompt (a judge's, a model
tool's), with `encode` to tokenize the render.
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
_QUOTED_FIELDS = ("content", "name", "tool_call_id")


def guard(tokenizer: Any, messages: Sequence[Message], chat_format: Any = None) -> tuple[list[Message], list[str]]:
    """`messages` with each marker's text in `content`, `name` and `tool_call_id` replaced by a
    placeholder, and the texts replaced, in placeholder order. `chat_format` adds the family's
    structural markers to the tokenizer's special tokens (rollout/tokens.py passes the agent's)."""
    quoter = _Quoter(tokenizer, chat_format)
    return [quoter.message(message) for message in messages], quoter.found


def guard_call_names(message: Message | None) -> Message | None:
    """An assistant message whose call names fit `NAME_PATTERN` (the template may write them into
    the next tool turn's header); the message itself when they already do."""
    calls = (message or {}).get("tool_calls")
    if not calls or all(_name_ok(call) for call in calls):
        return message
    return {**message, "tool_calls": [_with_safe_name(call) for call in calls]}


def quote_text(tokenizer: Any, text: str, chat_format: Any = None) -> tuple[str, list[str]]:
    """`text` with every marker quoted (placeholders) and the texts replaced; render it into a
    prompt and tokenize the render with `encode(tokenizer, rendered, found)`."""
    quoter = _Quoter(tokenizer, chat_format)
    return quoter.text(text), quoter.found


def safe_name(name: str) -> str:
    """`name` if it fits `NAME_PATTERN`, else its allowed characters with `_` for the others."""
    if NAME_PATTERN.fullmatch(name):
        return name
    return _NOT_IN_A_NAME.sub("_", name)[:128] or "_"


def encode(tokenizer: Any, text: str, found: Sequence[str]) -> list[int]:
    """Ids of a render of guarded messages: the text as the tokenizer reads it, each placeholder as
    its marker's characters."""
    if not found:
        return tokenizer.encode(text, add_special_tokens=False)
    ids: list[int] = []
    for index, piece in enumerate(_PLACEHOLDER.split(text)):
        if index % 2:
            ids += [i for char in found[int(piece)] for i in tokenizer.encode(char, add_special_tokens=False)]
        elif piece:
            ids += tokenizer.encode(piece, add_special_tokens=False)
    return ids


def marker_texts(tokenizer: Any, chat_format: Any = None) -> tuple[str, ...]:
    """The texts guarded: the tokenizer's special tokens and the family's structural markers (its
    `control_markers`, `keep_tokens`, `end_of_turn` and `turn_end`), longest first."""
    texts = _special_texts(tokenizer)
    if chat_format is not None:
        texts |= set(getattr(chat_format, "control_markers", ()))
        texts |= {*chat_format.keep_tokens, *chat_format.end_of_turn, chat_format.turn_end}
    return tuple(sorted((text for text in texts if text), key=lambda text: (-len(text), text)))


class _Quoter:
    """Quotes the markers of one tokenizer (and family) in texts, collecting what it replaced."""

    def __init__(self, tokenizer: Any, chat_format: Any):
        self.tokenizer = tokenizer
        texts = marker_texts(tokenizer, chat_format)
        self.pattern = _pattern(texts)
        self.marker_ids = _marker_ids(tokenizer, texts)
        self.found: list[str] = []

    def message(self, message: Message) -> Message:
        changed = {}
        for field in _QUOTED_FIELDS:
            value = message.get(field)
            if field == "name" and isinstance(value, str):
                value = safe_name(value)
            if isinstance(value, str):
                changed[field] = self.text(value)
            elif field == "content" and isinstance(value, list):
                changed[field] = [self._part(part) for part in value]
        if all(changed[field] is message.get(field) for field in changed):
            return message
        return {**message, **changed}

    def text(self, text: str) -> str:
        spans = _merged([*(match.span() for match in self.pattern.finditer(text)), *self._token_spans(text)])
        if not spans:
            return text
        pieces, at = [], 0
        for start, end in spans:
            self.found.append(text[start:end])
            pieces += [text[at:start], f"RFNBGUARD{len(self.found) - 1:06d}X"]
            at = end
        return "".join([*pieces, text[at:]])

    def _part(self, part: Any) -> Any:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            return {**part, "text": self.text(part["text"])}
        return part

    def _token_spans(self, text: str) -> list[tuple[int, int]]:
        """Spans of `text` that the tokenizer reads as a marker though they do not spell one."""
        if not self.marker_ids or not text:
            return []
        try:
            encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            pairs = zip(encoded["input_ids"], encoded["offset_mapping"])
        except (NotImplementedError, TypeError, KeyError, ValueError):  # a slow tokenizer: no offsets
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            return [(0, len(text))] if self.marker_ids.intersection(ids) else []
        return [(int(start), int(end)) for token, (start, end) in pairs if token in self.marker_ids and end > start]


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _name_ok(call: Any) -> bool:
    name = (call.get("function") or {}).get("name") if isinstance(call, dict) else None
    return not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is not None


def _with_safe_name(call: dict) -> dict:
    function = call.get("function") or {}
    if not isinstance(function.get("name"), str):
        return call
    return {**call, "function": {**function, "name": safe_name(function["name"])}}


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
    """The markers' texts, longest first, and text that looks like a placeholder (a field that
    quotes one is guarded too, so it cannot stand for another marker's text)."""
    return re.compile("|".join([_PLACEHOLDER.pattern, *map(re.escape, texts)]))
