"""A model family's chat format: one frozen record, registered by name.

Everything the rollout needs to know about one family lives here instead of in five files: which
parser reads its tool calls, where its reasoning is and whether the generation prompt opens it, the
tokens that end an assistant turn (the engine's stop set), the token after which the text between two
assistant turns is cut (rollout/tokens.py), the special tokens decoding must keep, and the history
rewriting its template does on purpose (so the drift check can tell design from bug).

A family is one module in `chat/` that builds a ChatFormat and calls `register_chat_format`;
`rollout.chat_format: auto` picks one from the tokenizer (chat/detect.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlfactory_nb.chat import messages, reasoning
from rlfactory_nb.chat.messages import AssistantMessage, ToolMessage
from rlfactory_nb.chat.parsers import ToolCallParser
from rlfactory_nb.errors import ChatFormatError, ConfigError
from rlfactory_nb.types import Message

Renderer = Callable[..., str]
"""(tokenizer, messages, tools, add_generation_prompt=, enable_thinking=) -> the prompt text"""
TemplateMatcher = Callable[[str, frozenset[str]], bool]
"""(chat template text, the vocabulary's token strings) -> whether the template is this family's"""


@dataclass(frozen=True)
class ChatFormat:
    """One model family's chat conventions (see the module docstring)."""

    name: str
    """registry name, the value of `rollout.chat_format`"""
    description: str
    """the models it covers and how their calls look, one line"""
    parser: Callable[..., ToolCallParser]
    """the tool-call parser class; called with `starts_in_reasoning` and its options (`max_calls=4`)"""
    reasoning: reasoning.ReasoningMarkers | None
    """the markers around reasoning; None for a family without reasoning blocks"""
    prefills_reasoning: bool
    """the family's generation prompt with thinking on ends with the opener, so sampled text starts
    inside it (the agent reads the actual prompt, since one family's variants differ: Qwen3-2507's
    thinking template pre-fills, Qwen3's does not; tests hold this field to the reference templates)"""
    leading_reasoning_only: bool
    """reasoning is only ever a block at the start of a turn; a later opener is data"""
    end_of_turn: tuple[str, ...]
    """token strings that end an assistant turn, besides the tokenizer's eos (the engine's stop set)"""
    turn_end: str
    """the token after which the text between two assistant turns is cut (the delta's start)"""
    keep_tokens: tuple[str, ...]
    """special tokens that carry calls or reasoning: decoding a turn must keep them"""
    drops_past_reasoning: bool
    """the template drops earlier turns' reasoning, so a full render differs from a rollout there"""
    history_rewriting: str
    """what the template rewrites in history on purpose, in words (the docs table and drift reports)"""
    matches: TemplateMatcher
    """whether a chat template (and its vocabulary) belongs to this family; used by `auto`"""
    assistant_message: AssistantMessage = field(default=messages.assistant_message)
    """how a sampled turn enters the history (`messages`), in the fields this family's template reads:
    the drift check renders it, so a family whose template wants, e.g., arguments as a JSON string or
    reasoning in its own field says so here"""
    tool_message: ToolMessage = field(default=messages.tool_message)
    """the message that answers one call (or one broken call block, with `call` None)"""
    delta_base: tuple[Message, ...] = messages.DELTA_BASE
    """the fixed conversation that non-assistant deltas are rendered after (rollout/tokens.py); it
    ends with an assistant turn that this family's template renders the same wherever it stands"""
    rendered_as: tuple[tuple[str, str], ...] = ()
    """(sampled token, token the template renders in its place in history) pairs: Llama 3.1
    samples `<|eom_id|>` after a call and renders `<|eot_id|>`; the drift check counts such a
    difference as expected"""
    control_markers: tuple[str, ...] = ()
    """text that is structure to this family's template though the tokenizer may not mark it special
    (DeepSeek's `<｜User｜>`): tool results, names and ids quoting it are guarded (rollout/guard.py)"""
    turn_end_opens_next: bool = False
    """an assistant turn has no end token of its own: generation stops on the first token of the next
    block (GLM's `<|observation|>` before tool results), which the sampled ids already hold. So
    `turn_end` is looked for after the base render, the delta starts after it, and a final stop token
    that the full render has not written (nothing follows it yet) is no drift"""
    split: Callable[[str, bool], tuple[str, str]] | None = None
    """(text, starts_in_reasoning) -> (reasoning, the text outside it), for a family whose reasoning
    is not a block between two markers (Harmony's analysis channel); None: split at `reasoning`"""
    delta_base_after: Callable[[Message], tuple[Message, ...]] | None = None
    """the delta's base given the assistant message the delta follows, for a template whose tool
    results depend on that turn (gpt-oss names a result after the call before it); None: `delta_base`"""
    past_reasoning: tuple[str, str] | None = None
    """(opening, closing) text of a span with content that a full render drops from an earlier turn
    (gpt-oss: `<|channel|>analysis<|message|>...<|end|><|start|>assistant`); the drift check counts
    such a difference as expected"""

    render: Renderer | None = None
    """the family's own prompt renderer, for a model that ships a Python encoder instead of a chat
    template (DeepSeek V3.2/V4, Kimi K3): it gives exactly the official encoder's text, and token
    assembly, the drift check and `auto` use it in place of `apply_chat_template` (chat/render.py);
    None: the tokenizer's chat template renders"""

    def new_parser(self, starts_in_reasoning: bool = False, **options: Any) -> ToolCallParser:
        """A parser for one agent; `starts_in_reasoning` when the prompt pre-filled the opener."""
        return self.parser(starts_in_reasoning=starts_in_reasoning, **options)

    def split_reasoning(self, text: str, starts_in_reasoning: bool = False) -> tuple[str, str]:
        """(reasoning, the text outside it), both stripped."""
        if self.split is not None:
            return self.split(text, starts_in_reasoning)
        return reasoning.split(text, self.reasoning, starts_in_reasoning, self.leading_reasoning_only)

    def delta_base_for(self, after: Message | None = None) -> tuple[Message, ...]:
        """The conversation a delta following the assistant message `after` is rendered after."""
        if self.delta_base_after is None or after is None:
            return self.delta_base
        return self.delta_base_after(after)

    def past_reasoning_ids(self, tokenizer: Any) -> tuple[list[int], list[int]] | None:
        """`past_reasoning` in ids."""
        if self.past_reasoning is None:
            return None
        opening, closing = self.past_reasoning
        encode = tokenizer.encode
        return encode(opening, add_special_tokens=False), encode(closing, add_special_tokens=False)

    def rendered_as_ids(self, tokenizer: Any) -> dict[int, int]:
        """`rendered_as` in ids: {sampled id: rendered id}, for the pairs the vocabulary has."""
        vocab = tokenizer.get_vocab()
        return {vocab[a]: vocab[b] for a, b in self.rendered_as if a in vocab and b in vocab}

    def end_of_turn_ids(self, tokenizer: Any) -> tuple[int, ...]:
        """The tokenizer's eos id(s), then the ids of `end_of_turn` the vocabulary has; no duplicates."""
        vocab = tokenizer.get_vocab()
        ids = [*eos_ids(tokenizer), *(vocab[token] for token in self.end_of_turn if token in vocab)]
        return tuple(dict.fromkeys(int(i) for i in ids))

    def decode(self, tokenizer: Any, ids: Sequence[int]) -> str:
        """One turn's text: special tokens dropped except `keep_tokens` (Llama's `<|python_tag|>`,
        Harmony's `<|channel|>` are special, and `skip_special_tokens=True` would erase the call)."""
        vocab = tokenizer.get_vocab() if self.keep_tokens else {}
        keep = {vocab[token] for token in self.keep_tokens if token in vocab}
        if not keep.intersection(ids):
            return tokenizer.decode(list(ids), skip_special_tokens=True)
        # Added tokens marked special (GLM's `<|observation|>` stop) may be missing from all_special_ids.
        added = getattr(tokenizer, "added_tokens_decoder", {})
        special = set(tokenizer.all_special_ids).union(i for i, t in added.items() if t.special) - keep
        return tokenizer.decode([i for i in ids if i not in special], skip_special_tokens=False)


def eos_ids(tokenizer: Any) -> tuple[int, ...]:
    """The tokenizer's eos id(s), whether it holds one id or a list."""
    eos = getattr(tokenizer, "eos_token_id", None)
    ids = eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else []
    return tuple(dict.fromkeys(int(i) for i in ids))


_FORMATS: dict[str, ChatFormat] = {}


def register_chat_format(chat_format: ChatFormat) -> ChatFormat:
    """Make `chat_format` available by its name (and to `auto`); returns it, for a module constant."""
    known = _FORMATS.get(chat_format.name)
    if known is not None and known != chat_format:
        raise ConfigError(f"chat format {chat_format.name!r} is already registered ({known.description})")
    _FORMATS[chat_format.name] = chat_format
    return chat_format


def chat_format_names() -> list[str]:
    return sorted(_FORMATS)


def registered_chat_formats() -> list[ChatFormat]:
    """Every family, in registration order (what `auto` tries)."""
    return list(_FORMATS.values())


def get_chat_format(name: str) -> ChatFormat:
    """The family registered as `name`; an unknown name is a ChatFormatError naming the closest."""
    if name in _FORMATS:
        return _FORMATS[name]
    close = difflib.get_close_matches(name, list(_FORMATS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ChatFormatError(
        f"unknown chat format {name!r}{hint}; known formats: auto, {', '.join(chat_format_names())}"
    )
