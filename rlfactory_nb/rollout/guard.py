"""Control-token text inside a message stays text.

A delta (rollout/tokens.py) is a template render tokenized as a whole, and tokenizers turn the text
of a special token into that token wherever it appears: a tool result that echoes `<|im_end|>\\n
<|im_start|>assistant` (a web page, a file, the model's own words) would end the tool turn and open
an assistant turn in the context the policy reads and is trained on. So before rendering, each
special token's text inside a message's content is swapped for an ASCII placeholder that templates
pass through unchanged (JSON-quoting included), and after rendering each placeholder is tokenized
character by character: the model reads the characters, never the control token. A chat server's
`apply_chat_template` does not do this, so the drift check reports such a turn as differing from a
full render (which is the point).

Only tokens marked special are guarded (turn and role markers); added tokens that are not special
(Qwen's `<tool_call>`, `<tool_response>`) are data a tool may legitimately quote back to the model.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from rlfactory_nb.types import Message

_PLACEHOLDER = re.compile(r"RFNBGUARD(\d{6})X")


def guard(tokenizer: Any, messages: Sequence[Message]) -> tuple[list[Message], list[str]]:
    """`messages` with each special token's text in a string content replaced by a placeholder, and
    the texts replaced, in placeholder order (no texts: the messages as given)."""
    pattern = _special_pattern(tuple(sorted(_special_texts(tokenizer), key=len, reverse=True)))
    found: list[str] = []
    if pattern is None:
        return list(messages), found

    def swap(match: re.Match[str]) -> str:
        found.append(match.group(0))
        return f"RFNBGUARD{len(found) - 1:06d}X"

    guarded = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) and pattern.search(content):
            message = {**message, "content": pattern.sub(swap, content)}
        guarded.append(message)
    return guarded, found


def encode(tokenizer: Any, text: str, found: Sequence[str]) -> list[int]:
    """Ids of a render of guarded messages: the text as the tokenizer reads it, each placeholder as
    its special token's characters."""
    if not found:
        return tokenizer.encode(text, add_special_tokens=False)
    ids: list[int] = []
    for index, piece in enumerate(_PLACEHOLDER.split(text)):
        if index % 2:
            ids += [i for char in found[int(piece)] for i in tokenizer.encode(char, add_special_tokens=False)]
        elif piece:
            ids += tokenizer.encode(piece, add_special_tokens=False)
    return ids


def _special_texts(tokenizer: Any) -> set[str]:
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    texts = {token.content for token in added.values() if getattr(token, "special", False)}
    return {text for text in texts | set(getattr(tokenizer, "all_special_tokens", ()) or ()) if text}


@functools.lru_cache(maxsize=32)
def _special_pattern(texts: tuple[str, ...]) -> re.Pattern[str] | None:
    """The special tokens' texts, longest first, and text that looks like a placeholder (a content
    that quotes one is guarded too, so it cannot stand for another token's text)."""
    return re.compile("|".join([_PLACEHOLDER.pattern, *map(re.escape, texts)])) if texts else None
