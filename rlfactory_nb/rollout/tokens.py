"""Tokens in, tokens out: how a multi-turn trajectory's ids are assembled.

A trajectory's ids are the prompt ids, then exactly the ids the engine sampled for each assistant turn,
then the ids of each non-assistant delta (the `\\n` after `<|im_end|>`, tool responses, the next
assistant header). Model output is never decoded and re-encoded: a re-encode can merge or split tokens
differently, and a chat template may re-render history (Qwen3 drops past think blocks), so a trainer
that re-tokenizes trains on text the policy never produced.

A delta is tokenized against a fixed base conversation: render base, render base + new messages, and
keep the text after the base's last turn-ending token (the family's `ChatFormat.turn_end`, Qwen's
`<|im_end|>`), where generation stopped. Templates differ in what follows it, so this reads the delta
off the template instead of hard-coding Qwen's `\\n`.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rlfactory_nb.chat import ChatFormat
from rlfactory_nb.chat.messages import DELTA_BASE
from rlfactory_nb.chat.render import own_renderer, render_prompt
from rlfactory_nb.errors import TemplateError
from rlfactory_nb.rollout import guard, template_bounds
from rlfactory_nb.types import Message


def render(tokenizer: Any, messages: Sequence[Message], tools: list[dict] | None = None, **options: Any) -> str:
    """The chat template's text, rendered in the bounded sandbox (template_bounds.py); for a family
    that renders its own prompts (DeepSeek V3.2/V4, Kimi K3: chat/render.py), that family's text."""
    own = own_renderer(tokenizer)
    if own is not None:
        return render_prompt(own, tokenizer, messages, tools, **options)
    template_bounds.install()
    return tokenizer.apply_chat_template(list(messages), tools=tools or None, tokenize=False, **options)


def prompt_ids(
    tokenizer: Any,
    messages: Sequence[Message],
    tools: list[dict] | None = None,
    enable_thinking: bool = False,
    keep_up_to: int | None = None,
    chat_format: ChatFormat | None = None,
    trusted: Sequence[Message] = (),
) -> list[int]:
    """Ids of the conversation so far plus the assistant header the model continues from. A marker's
    text in any message but assistant turns and the `trusted` ones (the dataset row's prompt) is
    tokenized as characters (rollout/guard.py; `chat_format` adds the family's markers). A group
    rolls one prompt out `group_size` times: it is rendered once (tool schemas make a render cost
    milliseconds) and kept in a cache bounded by bytes. A prompt longer than `keep_up_to` tokens
    (one its caller refuses) is not kept."""
    key = (tokenizer, str(getattr(tokenizer, "chat_template", None)), json.dumps(
        [messages, tools or None, enable_thinking, getattr(chat_format, "name", None), trusted], sort_keys=True, default=repr,
    ))
    ids = _PROMPTS.get(key)
    if ids is None:
        guarded, found = guard.guard_prompt(tokenizer, messages, chat_format, trusted)
        text = render(tokenizer, guarded, tools, add_generation_prompt=True, enable_thinking=enable_thinking)
        ids = tuple(guard.encode(tokenizer, text, found))
        if keep_up_to is None or len(ids) <= keep_up_to:
            _PROMPTS.put(key, ids)
    return list(ids)


class PromptCache:
    """The least recently used prompts' ids, at most `max_bytes` of keys and ids in all (a count
    bound let three 2 MiB prompts hold 56 MiB); a prompt over a sixteenth of it is not kept."""

    _BYTES_PER_ID = 36
    """a tuple's pointer and an int object past the interned small ones"""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.held = 0
        self._entries: OrderedDict[tuple[Any, str, str], tuple[tuple[int, ...], int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, str, str]) -> tuple[int, ...] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: tuple[Any, str, str], ids: tuple[int, ...]) -> None:
        size = len(key[2]) + self._BYTES_PER_ID * len(ids)  # the template text is one string all keys share
        if size > self.max_bytes // 16:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            self.held += size - (old[1] if old else 0)
            self._entries[key] = (ids, size)
            while self.held > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.held -= dropped


_PROMPTS = PromptCache(max_bytes=64 * 1024 * 1024)


def prompt_opens(tokenizer: Any, marker: str, enable_thinking: bool = False) -> bool:
    """Whether the generation prompt ends with `marker` (a reasoning opener the template pre-fills,
    as Qwen3.5's `<think>\\n` with thinking on): then sampled text starts inside reasoning."""
    text = render(tokenizer, DELTA_BASE[:1], add_generation_prompt=True, enable_thinking=enable_thinking)
    return text.rstrip().endswith(marker)


def delta_text(
    tokenizer: Any,
    new_messages: Sequence[Message],
    enable_thinking: bool = False,
    chat_format: ChatFormat | None = None,
    after: Message | None = None,
    ended: str | None = None,
) -> str:
    """The text between the end of an assistant turn (the family's `turn_end` token; without a
    family, the tokenizer's eos) and the next assistant turn, rendered after the family's base.
    For a family whose turn ends on the next block's first token (`turn_end_opens_next`), that token
    is the first thing rendered after the base, and the delta starts after it. `ended`: the token
    the turn was stopped by, when it is not the family's `turn_end` (an answer without a call in a
    family whose calls end on their own token: see `_after_answer`)."""
    if chat_format is not None and ended is not None and ended != chat_format.turn_end:
        return _after_answer(tokenizer, new_messages, enable_thinking, chat_format, ended)
    base_messages = list(chat_format.delta_base_for(after) if chat_format else DELTA_BASE)
    template = str(getattr(tokenizer, "chat_template", None))  # a template changed in place renders anew
    base = _base_render(tokenizer, template, json.dumps(base_messages, sort_keys=True), enable_thinking)
    full = render(tokenizer, base_messages + list(new_messages), add_generation_prompt=True, enable_thinking=enable_thinking)
    eos = chat_format.turn_end if chat_format else tokenizer.eos_token
    if chat_format is not None and chat_format.turn_end_opens_next:  # GLM: the token follows the base
        cut = len(base) if full.startswith(eos, len(base)) else -1
    else:
        cut = base.rfind(eos)
    if cut >= 0 and not full.startswith(base[: cut + len(eos)]) and _starts_a_new_query(new_messages):
        # A user's reply starts a new query, and Qwen3-style templates then re-render the turns before
        # it (past reasoning dropped): the rollout keeps the sampled ids (counted as expected drift),
        # and the delta is what follows the same turn end in the new render.
        cut = _nth(full, eos, base[: cut + len(eos)].count(eos))
        return full[cut + len(eos) :] if cut >= 0 else _template_rewrites()
    if cut < 0 or not full.startswith(base[: cut + len(eos)]):
        raise TemplateError(
            "the chat template re-renders earlier turns when messages are appended, so turn-by-turn "
            "token assembly is impossible; use a template whose render of a conversation is a prefix "
            "of the render of its continuation"
        )
    return full[cut + len(eos) :]


@functools.lru_cache(maxsize=64)
def _base_render(tokenizer: Any, template: str, base_messages: str, enable_thinking: bool) -> str:
    """The render of a delta's base conversation (JSON), the same for every delta of a rollout:
    rendered once instead of once per tool or user turn (a third of a step's template work)."""
    return render(tokenizer, json.loads(base_messages), enable_thinking=enable_thinking)


_ANSWER = "rf-delta-answer"
HISTORY_FORM = {"<|return|>": "<|end|>"}
"""stop tokens a template writes differently once a message follows: Harmony ends a final answer
with <|return|> and renders it <|end|> in history (the rollout keeps the sampled token)"""


def _after_answer(
    tokenizer: Any, new_messages: Sequence[Message], enable_thinking: bool, chat_format: ChatFormat, ended: str
) -> str:
    """The delta after an answer that stopped on `ended` (Gemma 4's `<turn|>`, Harmony's
    `<|return|>`, GLM's `<|user|>`, which opens the next block): what the template renders after
    the answer's text, less the stop token the sampled ids already hold."""
    answer = chat_format.assistant_message(_ANSWER, [], "")
    full = render(tokenizer, [DELTA_BASE[0], answer, *new_messages], add_generation_prompt=True, enable_thinking=enable_thinking)
    rest = full[full.rfind(_ANSWER) + len(_ANSWER) :]
    for form in (ended, HISTORY_FORM.get(ended)):
        if form and rest.startswith(form):
            return rest[len(form) :]
    raise TemplateError(
        f"after an answer that stopped on {ended!r} the template renders {rest[:40]!r}: the sampled stop "
        f"token is not where the template puts the end of the answer, so the {chat_format.name} ids cannot "
        "be assembled turn by turn"
    )


def _starts_a_new_query(messages: Sequence[Message]) -> bool:
    return any(message.get("role") not in ("tool", "ipython", "function") for message in messages)


def _nth(text: str, marker: str, count: int) -> int:
    """Where the `count`-th occurrence of `marker` in `text` starts (-1: fewer occurrences)."""
    position = -1
    for _ in range(count):
        position = text.find(marker, position + 1)
        if position < 0:
            return -1
    return position


def _template_rewrites() -> str:
    raise TemplateError(
        "the chat template re-renders earlier turns when a user message is appended and drops turn ends "
        "while doing so, so turn-by-turn token assembly is impossible; use a template whose render of a "
        "conversation keeps one turn end per turn"
    )


def delta_ids(
    tokenizer: Any,
    new_messages: Sequence[Message],
    enable_thinking: bool = False,
    chat_format: ChatFormat | None = None,
    after: Message | None = None,
    ended: str | None = None,
) -> list[int]:
    """`delta_text`'s ids; `after` is the assistant message the delta follows, `ended` the stop
    token it sampled. A marker's text inside a message (a tool echoing `<|im_end|>`) is tokenized
    as characters (rollout/guard.py)."""
    guarded, found = guard.guard(tokenizer, new_messages, chat_format)
    after = guard.guard_call_names(after)
    return guard.encode(tokenizer, delta_text(tokenizer, guarded, enable_thinking, chat_format, after, ended), found)


@dataclass(frozen=True)
class Drift:
    """Where a full chat-template render of the messages differs from the rollout's ids."""

    position: int
    """index into prompt_ids + response_ids of the first difference (-1: none)"""
    rollout_context: str
    render_context: str
    dropped_think_blocks: int = 0
    """empty think blocks of earlier assistant turns that the render drops and the rollout keeps"""
    rewritten_tokens: int = 0
    """sampled tokens the template renders as another token in history (the family's `rendered_as`)"""
    rollout_tokens: tuple[tuple[int, str], ...] = ()
    """(id, text) of the rollout's tokens from `position` on, a few: what differs, even when the
    decoded contexts read the same (one text, tokenized two ways)"""
    render_tokens: tuple[tuple[int, str], ...] = ()
    """(id, text) of the render's tokens from `position` on"""

    @property
    def ok(self) -> bool:
        return self.position < 0

    def differing(self) -> str:
        """`rollout [151667 '<think>', 198 '\\n'] vs render [151668 '</think>']`: the tokens that
        differ, with their ids."""

        def shown(tokens: tuple[tuple[int, str], ...]) -> str:
            return "[" + ", ".join(f"{token_id} {text!r}" for token_id, text in tokens) + "]" if tokens else "[end]"

        return f"rollout {shown(self.rollout_tokens)} vs render {shown(self.render_tokens)}"

    @property
    def expected(self) -> bool:
        """The ids differ only where the family's template rewrites history by design (Qwen3's
        non-thinking mode drops earlier empty think blocks; gpt-oss renders `<|end|>` for a sampled
        `<|call|>`; docs/decisions.md), not a bug to warn about."""
        return not self.ok and (self.dropped_think_blocks > 0 or self.rewritten_tokens > 0)


def drift_check(
    tokenizer: Any,
    ids: Sequence[int],
    messages: Sequence[Message],
    tools: list[dict] | None = None,
    enable_thinking: bool = False,
    context: int = 8,
    drops_past_reasoning: bool = True,
    rendered_as: dict[int, int] | None = None,
    unrendered_stop_ids: Collection[int] = (),
    dropped_span: tuple[list[int], list[int]] | None = None,
) -> Drift:
    """Compare rollout ids with a full render of `messages` (what a re-tokenizing trainer would see).

    With Qwen3's template a multi-turn rollout always differs: the full render drops the empty think
    block of earlier assistant turns. The report shows where, and `expected` says whether that is
    the whole difference, so a user can judge it. `drops_past_reasoning` is the family's record of
    that rewriting (`ChatFormat.drops_past_reasoning`); without it no difference is expected.
    `rendered_as` maps sampled ids to the ids the template renders in their place
    (`ChatFormat.rendered_as_ids`). `unrendered_stop_ids`: stop tokens that open the next block
    (`ChatFormat.turn_end_opens_next`), which a full render writes only once that block follows.
    `dropped_span`: the (opening, closing) ids of earlier turns' reasoning that the template drops
    (`ChatFormat.past_reasoning_ids`, gpt-oss's analysis messages).
    """
    rendered = tokenizer.encode(
        render(tokenizer, messages, tools, enable_thinking=enable_thinking), add_special_tokens=False
    )
    ids = list(ids)
    if ids and ids[-1] in unrendered_stop_ids and rendered[-1:] != ids[-1:]:
        ids = ids[:-1]  # GLM's final `<|user|>`: sampled, and rendered only with a next user message
    if ids and rendered[-1:] != ids[-1:] and not tokenizer.decode(rendered[-1:]).strip():
        rendered = rendered[:-1]  # the template's newline after the final <|im_end|>
    limit = min(len(ids), len(rendered))
    position = next((i for i in range(limit) if ids[i] != rendered[i]), -1)
    if position < 0 and len(ids) != len(rendered):
        position = limit
    if position < 0:
        return Drift(-1, "", "")
    start = max(0, position - context)
    block = [] if enable_thinking or not drops_past_reasoning else empty_think_ids(tokenizer)
    rewritten = [rendered_as.get(i, i) for i in ids] if rendered_as else ids
    explained = _skipped_blocks(rewritten, rendered, block, dropped_span if drops_past_reasoning else None)
    return Drift(
        position,
        tokenizer.decode(ids[start : position + context]),
        tokenizer.decode(rendered[start : position + context]),
        rollout_tokens=_pieces(tokenizer, ids[position : position + DIFFERING_SHOWN]),
        render_tokens=_pieces(tokenizer, rendered[position : position + DIFFERING_SHOWN]),
        dropped_think_blocks=max(explained, 0),
        rewritten_tokens=sum(a != b for a, b in zip(ids, rewritten)) if explained >= 0 else 0,
    )


def thinks_by_default(tokenizer: Any) -> bool:
    """Whether the template, given no `enable_thinking`, renders the thinking-mode generation prompt
    (Qwen3's does; a template without the switch renders both alike and counts as not thinking)."""
    default = render(tokenizer, DELTA_BASE[:1], add_generation_prompt=True)
    thinking = render(tokenizer, DELTA_BASE[:1], add_generation_prompt=True, enable_thinking=True)
    plain = render(tokenizer, DELTA_BASE[:1], add_generation_prompt=True, enable_thinking=False)
    return default == thinking != plain
DIFFERING_SHOWN = 4
"""tokens of each side a drift report shows from the first difference on"""


def _pieces(tokenizer: Any, ids: Sequence[int]) -> tuple[tuple[int, str], ...]:
    return tuple((int(token_id), tokenizer.decode([token_id])) for token_id in ids)


def empty_think_ids(tokenizer: Any) -> list[int]:
    """The ids of the empty think block that non-thinking mode adds to every generation prompt
    (`<think>\\n\\n</think>\\n\\n` for Qwen3), read off the template; [] for a template without one."""
    thinking = render(tokenizer, DELTA_BASE[:1], add_generation_prompt=True, enable_thinking=True)
    plain = render(tokenizer, DELTA_BASE[:1], add_generation_prompt=True, enable_thinking=False)
    if plain == thinking or not plain.startswith(thinking):
        return []
    return tokenizer.encode(plain[len(thinking) :], add_special_tokens=False)


def _skipped_blocks(
    ids: list[int], rendered: list[int], block: list[int], span: tuple[list[int], list[int]] | None = None
) -> int:
    """How many copies of `block`, or `span`s (an opening, anything, the first closing after it), must
    be skipped in `ids` to make them equal `rendered`; -1 when skipping does not make them equal (a
    difference the template does not explain).

    >>> _skipped_blocks([1, 7, 8, 2, 7, 8, 3], [1, 2, 7, 8, 3], [7, 8])
    1
    >>> _skipped_blocks([1, 7, 8, 2], [1, 5], [7, 8])
    -1
    >>> _skipped_blocks([1, 5, 6, 7, 8, 2], [1, 2], [], ([5], [7, 8]))
    1
    """
    i = j = skipped = 0
    while i < len(ids):
        if j < len(rendered) and ids[i] == rendered[j]:
            i, j = i + 1, j + 1
        elif block and ids[i : i + len(block)] == block:
            i, skipped = i + len(block), skipped + 1
        elif span and (end := _span_end(ids, i, *span)) > 0:
            i, skipped = end, skipped + 1
        else:
            return -1
    return skipped if j == len(rendered) else -1


def _span_end(ids: list[int], i: int, opening: list[int], closing: list[int]) -> int:
    """The index after the first `closing` in a span that opens at `i`; -1 when none does."""
    if not opening or not closing or ids[i : i + len(opening)] != opening:
        return -1
    for end in range(i + len(opening), len(ids) - len(closing) + 1):
        if ids[end : end + len(closing)] == closing:
            return end + len(closing)
    return -1


DriftMode = Literal["strict", "warn", "off"]
