"""Which renderer a tokenizer's prompts go through: its chat template, or a family's own.

DeepSeek V3.2/V4 and Kimi K3 ship a Python encoder instead of a chat template, so their records
render prompts themselves (`ChatFormat.render`). Token assembly, the drift check and the generation
prompt (rollout/tokens.py) all render through `render_prompt`, which picks the family's renderer
when one is bound to the tokenizer (`resolve_chat_format` binds the family an agent uses) or, for a
tokenizer with no chat template, when `auto` detects a family that renders its own prompts.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from rlfactory_nb.chat.format import ChatFormat, registered_chat_formats
from rlfactory_nb.types import Message

_BOUND: weakref.WeakKeyDictionary[Any, ChatFormat | None] = weakref.WeakKeyDictionary()


def bind(tokenizer: Any, chat_format: ChatFormat) -> None:
    """Render `tokenizer`'s prompts with `chat_format`'s own renderer from now on, or, for a family
    without one, with the tokenizer's chat template (the family chosen last wins)."""
    _remember(tokenizer, chat_format if chat_format.render is not None else None)


def own_renderer(tokenizer: Any) -> ChatFormat | None:
    """The family that renders `tokenizer`'s prompts itself, or None (its chat template renders)."""
    try:
        if tokenizer in _BOUND:
            return _BOUND[tokenizer]
    except TypeError:  # not weak-referenceable: detect each time
        return _detect(tokenizer)
    found = _detect(tokenizer)
    _remember(tokenizer, found)
    return found


def render_prompt(
    chat_format: ChatFormat, tokenizer: Any, messages: Sequence[Message], tools: list[dict] | None = None,
    **options: Any,
) -> str:
    """`messages` rendered by the family's renderer, with transformers' options (`add_generation_prompt`,
    `enable_thinking`); an option it does not take is ignored as a chat template ignores it."""
    assert chat_format.render is not None
    return chat_format.render(
        tokenizer, list(messages), tools or None,
        add_generation_prompt=bool(options.get("add_generation_prompt", False)),
        enable_thinking=bool(options.get("enable_thinking", False)),
    )


def _detect(tokenizer: Any) -> ChatFormat | None:
    """A tokenizer with no chat template whose vocabulary one self-rendering family claims."""
    if getattr(tokenizer, "chat_template", None) or not hasattr(tokenizer, "get_vocab"):
        return None
    vocab = frozenset(tokenizer.get_vocab())
    found = [fmt for fmt in registered_chat_formats() if fmt.render is not None and fmt.matches("", vocab)]
    return found[0] if len(found) == 1 else None


def _remember(tokenizer: Any, chat_format: ChatFormat | None) -> None:
    try:
        _BOUND[tokenizer] = chat_format
    except TypeError:
        pass
