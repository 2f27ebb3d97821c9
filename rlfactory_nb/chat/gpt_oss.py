"""gpt-oss's Harmony format (family `gpt_oss`): a turn is a run of messages on named channels.

After the generation prompt `<|start|>assistant` the model samples, for example:

    <|channel|>analysis<|message|>The user wants the weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>

(one line in the text). Each message is a header, `<|message|>`, a body and an end marker: `<|end|>`,
`<|call|>` (a tool call: generation stops) or `<|return|>` (the final answer: generation stops). The
header names the channel (`analysis` is reasoning, `final` the answer, `commentary` carries calls
and preambles) and, for a call, the recipient `to=functions.NAME`, before or after the channel (the
template writes `<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>`).

The reader walks the markers left to right. A call's body is read as one JSON value by its
structure (`json.JSONDecoder.raw_decode`), so an argument holding `<|call|>` is data, and only
`<|call|>` right after the value makes it a call (or `<|end|>`, which models also write there, as
vLLM and llama.cpp accept): the JSON ended by the text is a call too (the stop token cut off), JSON
the text ends inside is a MalformedCall, never a partial call. A message addressed to a function is
a call whichever channel it names (models address some on the analysis channel, and vLLM runs
them): the recipient, not the channel, makes a call, and a call written inside an analysis body is
text. The recipient may stand in the role (`assistant to=functions.f`), after the channel, or in the
constrain header. Other bodies end at the next marker. Text outside any message (no Harmony markers at all) is answer text.

Why not `openai-harmony`: its encoding loads `o200k_base` from the internet on first use (this
machine and training clusters may be offline), and it parses token ids of that encoding, where this
parser reads the decoded text the agent holds for any tokenizer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat import reasoning
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import ParseResult, cap_calls, check_max_calls, register_parser
from rlfactory_nb.types import MalformedCall, Message, ToolCall, ToolSpec

START, END, MESSAGE, CHANNEL = "<|start|>", "<|end|>", "<|message|>", "<|channel|>"
CALL, RETURN, CONSTRAIN = "<|call|>", "<|return|>", "<|constrain|>"
ANALYSIS = f"{CHANNEL}analysis{MESSAGE}"
FUNCTIONS = "functions."
FORMAT_HINT = (
    "Write a call as its own message: <|start|>assistant to=functions.TOOL_NAME<|channel|>commentary json"
    "<|message|>{arguments as a JSON object}<|call|>"
)
_MARKER = re.compile(r"<\|(?:start|end|message|call|return)\|>")
_ENDS = (END, CALL, RETURN)
_SPACE = re.compile(r"\s*")
_JSON_TOKEN = re.compile(r'"|[{\[]+|[}\]]+|<\|(?:start|end|message|call|return)\|>')


@dataclass(frozen=True)
class _Message:
    """One message of a turn as written, read into what the parser needs."""

    raw: str
    channel: str
    """the header's channel, "" for text outside any message"""
    body: str
    call: ToolCall | MalformedCall | None = None
    """what a message addressed to `functions.NAME` holds (a draft's, on the analysis channel, too)"""


@register_parser("gpt_oss")
@register_parser("harmony")
@dataclass(frozen=True)
class GptOssParser:
    """Reads Harmony messages; see the module docstring."""

    max_calls: int = 8
    """calls run per turn, and broken calls answered one by one (as qwen3's parser)"""
    starts_in_reasoning: bool = False
    """unused: Harmony's generation prompt opens no channel (kept for the family contract)"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        content: list[str] = []
        calls: list[ToolCall] = []
        errors: list[MalformedCall] = []
        unreported = 0
        thoughts, answer = [], []
        for message in _messages(text):
            if message.channel == "analysis" and message.call is None:
                thoughts.append(message.body)
            elif message.call is None:
                answer.append(message.body)
            elif isinstance(message.call, ToolCall):
                calls.append(message.call)
                continue
            elif len(errors) < self.max_calls:
                errors.append(message.call)
            else:
                unreported += 1
            content.append(message.raw)
        calls, errors = cap_calls(calls, errors, unreported, self.max_calls, "call message", FORMAT_HINT)
        return ParseResult(
            content="".join(content).strip(),
            calls=calls,
            errors=errors,
            reasoning=_joined(thoughts),
            answer=_joined(answer),
        )


def split(text: str, starts_in_reasoning: bool = False) -> tuple[str, str]:
    """(the analysis channel's text, the other messages' text less calls), both stripped."""
    read = list(_messages(text))
    thoughts = [m.body for m in read if m.channel == "analysis"]
    return _joined(thoughts), _joined([m.body for m in read if m.channel != "analysis" and m.call is None])


def _joined(bodies: Sequence[str]) -> str:
    return "\n".join(body.strip() for body in bodies if body.strip())


def _messages(text: str) -> Iterator[_Message]:
    """The turn's messages in order; their `raw`s join to `text`."""
    pos = 0
    while pos < len(text):
        message = _read_message(text, pos)
        pos += len(message.raw)
        yield message


def _read_message(text: str, start: int) -> _Message:
    """The message at `start`, or the text before it: a header runs from the last `<|start|>` or end
    marker before its `<|message|>` (the turn's first header follows the prompt's `<|start|>assistant`)."""
    header_at = text.find(MESSAGE, start)
    if header_at < 0:
        return _text_run(text, start, len(text))
    opened = max(text.rfind(marker, start, header_at) for marker in (START, *_ENDS))
    if opened >= 0 and not text.startswith(START, opened):  # text, then an end marker, before the header
        return _text_run(text, start, text.index(">", opened) + 1)
    if opened > start:
        return _text_run(text, start, opened)
    header_start = start + len(START) if opened == start else start
    channel, recipient = _header(text[header_start:header_at])
    body_start = header_at + len(MESSAGE)
    if recipient is not None and recipient.startswith(FUNCTIONS):
        return _call_message(text, start, body_start, channel, recipient.removeprefix(FUNCTIONS))
    end, closing = _body_end(text, body_start)
    return _Message(text[start:end], channel, text[body_start : end - len(closing)])


def _text_run(text: str, start: int, end: int) -> _Message:
    """Text with no `<|message|>`: a header the text or an end marker cut off (after `<|start|>`, or
    naming a channel or recipient), which says nothing, or is a broken call if it names a function;
    else text outside any message (a turn without Harmony markers), which is answer text."""
    run = text[start:end]
    header = run.removeprefix(START)
    if header == run and CHANNEL not in run and not run.lstrip().startswith("to="):
        return _Message(run, "", _MARKER.sub("", run))
    channel, recipient = _header(_MARKER.sub("", header))
    if recipient is None or not recipient.startswith(FUNCTIONS):
        return _Message(run, channel, "")
    error = MalformedCall(f"The call to {recipient} ends before <|message|> and its arguments. {FORMAT_HINT}", raw=run)
    return _Message(run, channel, "", error)


def _header(header: str) -> tuple[str, str | None]:
    """(channel, recipient) of a header such as `assistant to=functions.f<|channel|>commentary json`
    or `<|channel|>commentary to=functions.f <|constrain|>json`."""
    before, _, after = header.partition(CHANNEL)
    words = after.replace(CONSTRAIN, " ").split()
    recipients = [word[3:] for word in before.split() + words[1:] if word.startswith("to=")]
    return (words[0] if words else ""), (recipients[0] if recipients else None)


def _body_end(text: str, pos: int) -> tuple[int, str]:
    """(the end of a text body starting at `pos`, its closing marker or ""): the next end marker,
    included, or the next `<|start|>`, excluded (a message left unclosed), or the text's end."""
    for found in _MARKER.finditer(text, pos):
        if found.group() in _ENDS:
            return found.end(), found.group()
        if found.group() == START:
            return found.start(), ""
    return len(text), ""


def _call_message(text: str, start: int, pos: int, channel: str, name: str) -> _Message:
    """A message addressed to `functions.NAME`, its body starting at `pos`."""

    def broken(message: str, at: int) -> _Message:
        end = _body_end(text, at)[0]
        error = MalformedCall(f"{message} {FORMAT_HINT}", raw=text[start:end])
        return _Message(text[start:end], channel, text[pos:end], error)

    if channel not in ("commentary", "analysis", ""):  # no channel at all: addressed, so a call
        return broken(f"A call to functions.{name} must go to the commentary channel, not {channel!r}.", pos)
    if not name:
        return broken("The recipient functions. names no tool.", pos)
    value_start = _SPACE.match(text, pos).end()
    if not text.startswith("{", value_start):
        return broken(f"The arguments of functions.{name} must be one JSON object.", pos)
    value_end, closed = _object_end(text, value_start)
    if not closed:
        where = "the text ended inside them" if value_end == len(text) else "a message marker interrupts them"
        return broken(f"The arguments of functions.{name} are not a closed JSON object ({where}).", value_end)
    try:
        arguments = json.loads(text[value_start:value_end])
    except (ValueError, RecursionError) as exc:
        what = f"{exc.msg} at character {exc.pos}" if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        return broken(f"The arguments of functions.{name} are not valid JSON ({what}).", value_end)
    after = _SPACE.match(text, value_end).end()
    closing = next((marker for marker in (CALL, END) if text.startswith(marker, after)), None)
    if after < len(text) and closing is None:
        return broken(f"The call to functions.{name} must end with <|call|> right after its arguments.", after)
    end = after + len(closing) if closing else after  # at the text's end: only the stop token is cut
    call = ToolCall(name=name, arguments=arguments, raw=text[start:end])
    return _Message(text[start:end], channel, text[pos:end], call)


def _object_end(text: str, pos: int) -> tuple[int, bool]:
    """(the index after the JSON object opening at `pos`, True), read by its brackets with strings
    skipped (a marker inside a string is data); (where reading stopped, False) when a Harmony marker
    outside any string interrupts it, or the text ends inside it (the text's length)."""
    depth, at = 0, pos
    while found := _JSON_TOKEN.search(text, at):
        token, at = found.group(), found.end()
        if token == '"':
            at = _string_end(text, at)
            if at < 0:
                break
        elif token.startswith("<|"):
            return found.start(), False
        elif token[0] in "{[":
            depth += len(token)
        elif depth <= len(token):
            return found.start() + depth, True
        else:
            depth -= len(token)
    return len(text), False


def _string_end(text: str, pos: int) -> int:
    """The index after the `"` closing a JSON string whose text starts at `pos`; -1 if none does."""
    while (quote := text.find('"', pos)) >= 0:
        escapes = quote - pos - len(text[pos:quote].rstrip("\\"))  # backslashes right before it
        if escapes % 2 == 0:
            return quote + 1
        pos = quote + 1
    return -1


def assistant_message(text: str, calls: Sequence[ToolCall], reasoning_text: str = "") -> Message:
    """The fields the template reads: reasoning in `thinking` (set only when there is some: the
    template writes an empty analysis message for an empty one), one call in `tool_calls` (the
    template renders the first; Harmony stops at each `<|call|>`), the answer in `content`. A call
    turn's preamble joins its reasoning, as the template renders content beside a call as analysis.
    `<|channel|>` is spelled apart in both: the template refuses a message that holds it."""
    answer = _renderable(split(text)[1])
    message: dict[str, Any] = {"role": "assistant", "content": "" if calls else answer}
    thinking = _joined([_renderable(reasoning_text), answer]) if calls else _renderable(reasoning_text)
    if thinking:
        message["thinking"] = thinking
    if calls:
        message["tool_calls"] = [call.to_message_call() for call in calls]
    return message


def _renderable(text: str) -> str:
    """`text` without `<|channel|>` (one pass cannot make a new one: the replacement holds a space)."""
    return text.replace(CHANNEL, "<|channel |>")


def tool_message(content: str, call: ToolCall | None = None, index: int = 0) -> Message:
    """A result is a `tool` message (the template names it after the call before it); a broken
    call is answered as the user, since the template renders a tool result only after a call."""
    return {"role": "tool" if call is not None else "user", "content": content}


def delta_base_after(turn: Message) -> tuple[Message, ...]:
    """The base a delta after `turn` renders after: one ending with `turn`'s first call, so the
    results are named after it; after a turn without calls, the default base with a call."""
    calls = turn.get("tool_calls") or DELTA_BASE[1]["tool_calls"]
    return (DELTA_BASE[0], {"role": "assistant", "content": "", "tool_calls": calls[:1]})


DELTA_BASE: tuple[Message, ...] = (
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]},
)


def _is_gpt_oss(template: str, vocab: frozenset[str]) -> bool:
    """Harmony messages with channels and calls addressed `to=functions.NAME`."""
    return CHANNEL in template and MESSAGE in template and "to=" in template


GPT_OSS = register_chat_format(
    ChatFormat(
        name="gpt_oss",
        description="gpt-oss (Harmony): channels analysis/commentary/final, calls to=functions.NAME end <|call|>",
        parser=GptOssParser,
        reasoning=reasoning.ReasoningMarkers(ANALYSIS, END),
        prefills_reasoning=False,
        leading_reasoning_only=False,
        end_of_turn=(CALL, RETURN),
        turn_end=CALL,
        keep_tokens=(START, END, MESSAGE, CHANNEL, CONSTRAIN, CALL, RETURN),
        drops_past_reasoning=True,
        history_rewriting=(
            "drops the analysis messages of call turns once a final answer follows, writes <|end|> for "
            "the <|return|> of a final answer that is not the last message, and renders a call turn's "
            "text beside the call as analysis"
        ),
        matches=_is_gpt_oss,
        assistant_message=assistant_message,
        tool_message=tool_message,
        delta_base=DELTA_BASE,
        # No `rendered_as`: the <|return|> -> <|end|> rewrite applies only to a final answer that is not
        # the last message, which an agent rollout never has (the drift check would substitute them all).
        split=split,
        delta_base_after=delta_base_after,
        past_reasoning=(ANALYSIS, f"{END}{START}assistant"),
    )
)
