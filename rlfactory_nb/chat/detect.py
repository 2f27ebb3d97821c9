"""`rollout.chat_format: auto`: the family of a tokenizer, read off its chat template and vocabulary.

Each family's record says what its template looks like (`ChatFormat.matches`); auto takes the one
family that matches. None matching is an error that lists the known families and how to choose one:
guessing Qwen's conventions for, say, a Llama template would train on the wrong stop tokens and
score reasoning as the answer, silently. Two matching is a bug in the records, and says so.
"""

from __future__ import annotations

from typing import Any

from rlfactory_nb.chat import render
from rlfactory_nb.chat.format import ChatFormat, chat_format_names, get_chat_format, registered_chat_formats
from rlfactory_nb.errors import ChatFormatError


def detect_chat_format(tokenizer: Any) -> ChatFormat:
    """The registered family whose template rules match `tokenizer`'s chat template."""
    template = _template_text(tokenizer)
    vocab = frozenset(tokenizer.get_vocab())
    found = [fmt for fmt in registered_chat_formats() if fmt.matches(template, vocab)]
    if len(found) == 1:
        return found[0]
    choose = (
        f"set rollout.chat_format to one of: {', '.join(chat_format_names())} "
        "(or pass chat_format= to rf.Agent) if the model writes that family's format"
    )
    if not found:
        what = "has no chat template" if not template else "matches no known model family"
        raise ChatFormatError(f"chat_format 'auto': the tokenizer {what}; {choose}")
    names = ", ".join(fmt.name for fmt in found)
    raise ChatFormatError(f"chat_format 'auto': the chat template matches several families ({names}); {choose}")


def resolve_chat_format(chat_format: str | ChatFormat, tokenizer: Any) -> ChatFormat:
    """A record as given, a registered name, or `"auto"`: detected from `tokenizer`. A family that
    renders its own prompts is bound to the tokenizer, so its prompts render that way (chat/render.py)."""
    if isinstance(chat_format, ChatFormat):
        found = chat_format
    elif chat_format == "auto":
        found = detect_chat_format(tokenizer)
    else:
        found = get_chat_format(chat_format)
    render.bind(tokenizer, found)
    return found


def _template_text(tokenizer: Any) -> str:
    """The chat template as one text; a tokenizer with named templates contributes them all."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        return "\n".join(str(text) for text in template.values())
    return template if isinstance(template, str) else ""
