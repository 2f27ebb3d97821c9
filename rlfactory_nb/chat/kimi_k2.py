"""The Kimi K2 tool-call format (family `kimi_k2`: Kimi-K2-Thinking and the K2 family):

    <think>The user wants the weather.</think>Let me check.<|tool_calls_section_begin|>
    <|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>
    <|tool_calls_section_end|><|im_end|>

(one line in practice). A call's id is `functions.NAME:IDX`, IDX counting calls across the
conversation; a result answers it by id: `<|im_system|>NAME<|im_middle|>## Return of ID\\n...`.
Every marker is a special token of Kimi's tokenizer, so decoding keeps them (`keep_tokens`).

The section and the JSON arguments are read by structure (chat/sections.py, shared with DeepSeek),
so `<|tool_call_end|>` inside an argument value is data and a call stands only once its
`<|tool_call_end|>` is read. Every assistant turn opens with `<think>...</think>` (empty when the
model does not think); calls inside it are drafts: counted, not run.

History: the template keeps `reasoning_content` only for turns after the last answer without calls
and writes `<think></think>` for earlier ones; it reads the call id from `tool_calls[i].id` and the
result's from `tool_call_id` and `name`, which this record's message hooks supply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat import reasoning, sections
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import ParseResult, check_max_calls, register_parser
from rlfactory_nb.chat.qwen3 import THINK, THINK_CLOSE, THINK_OPEN
from rlfactory_nb.chat.sections import Read, Reader, read_arguments
from rlfactory_nb.types import Message, ToolCall, ToolSpec

SECTION_OPEN, SECTION_CLOSE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_OPEN, CALL_CLOSE, ARGUMENTS = "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>"
END_OF_TURN = "<|im_end|>"
FORMAT_HINT = (
    "Write calls as <|tool_calls_section_begin|><|tool_call_begin|>functions.TOOL_NAME:INDEX"
    "<|tool_call_argument_begin|>{arguments as a JSON object}<|tool_call_end|><|tool_calls_section_end|>."
)
MARKERS = sections.SectionMarkers(SECTION_OPEN, SECTION_CLOSE, CALL_OPEN, CALL_CLOSE, FORMAT_HINT)
_ID_LIMIT = 256
"""characters searched for `<|tool_call_argument_begin|>`: ids are short, and a bounded window keeps
a run of broken calls linear"""


@register_parser("kimi_k2")
@dataclass(frozen=True)
class KimiK2Parser:
    """Reads `<|tool_calls_section_begin|>` sections; see the module docstring."""

    max_calls: int = 8
    """calls run per turn, and broken calls answered one by one (as qwen3's parser)"""
    starts_in_reasoning: bool = False
    """the generation prompt pre-filled `<think>` (Kimi's does not; kept for the common contract)"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        return sections.parse(text, MARKERS, _read_call, self.starts_in_reasoning, self.max_calls)


def _read_call(reader: Reader, start: int) -> Read:
    """The call opening at `start`: `functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>`."""
    text, pos = reader.text, start + len(CALL_OPEN)
    marker = text.find(ARGUMENTS, pos, pos + _ID_LIMIT)
    if marker < 0:
        if len(text) <= pos + _ID_LIMIT and CALL_CLOSE not in text[pos:]:
            return reader.truncated(start, f"before {ARGUMENTS}.")
        return reader.broken(start, pos, f"A call must give its id functions.TOOL_NAME:INDEX before {ARGUMENTS}.")
    name = _name(text[pos:marker].strip())
    return read_arguments(reader, start, reader.skip_space(marker + len(ARGUMENTS)), name)


def _name(call_id: str) -> str:
    """NAME from `functions.NAME:IDX` (prefix and index optional, as models write them)."""
    name = call_id.removeprefix("functions.")
    head, colon, index = name.rpartition(":")
    return head if colon and index.isdigit() else name


def call_id(raw: str) -> str:
    """The id a call was written with (`functions.get_weather:0`), from the call's text."""
    return raw[len(CALL_OPEN) : raw.find(ARGUMENTS)].strip() if raw.startswith(CALL_OPEN) else ""


def assistant_message(text: str, calls: Sequence[ToolCall], reasoning_text: str = "") -> Message:
    """The turn in the fields Kimi's template reads: the think block's text as `reasoning_content`,
    the text after it (up to the calls' section) as `content`, and each call with its id and its
    arguments as the JSON text the model wrote, so the history renders the tokens as sampled."""
    parts = reasoning.segments(text, THINK, leading_only=True)
    thought = parts[0].inner if parts[0].in_reasoning else ""
    rest = "".join(p.text for p in parts if not p.in_reasoning)
    content = rest[: sections.section_start(rest, calls[0], SECTION_OPEN)] if calls else rest
    message: Message = {"role": "assistant", "content": content, "reasoning_content": thought}
    if calls:
        message["tool_calls"] = [_message_call(call) for call in calls]
    return message


def _message_call(call: ToolCall) -> dict[str, Any]:
    arguments = _read_call(Reader(call.raw, MARKERS), 0).arguments
    return {"id": call_id(call.raw), "type": "function", "function": {"name": call.name, "arguments": arguments}}


def tool_message(content: str, call: ToolCall | None = None, index: int = 0) -> Message:
    """A result labelled as the template labels it: the tool's name and the call's id (a broken
    call block is answered as the tool `error`)."""
    if call is None:
        return {"role": "tool", "name": "error", "tool_call_id": f"functions.error:{index}", "content": content}
    return {"role": "tool", "name": call.name, "tool_call_id": call_id(call.raw), "content": content}


def _is_kimi_k2(template: str, vocab: frozenset[str]) -> bool:
    return SECTION_OPEN in template and CALL_OPEN in template


KIMI_K2 = register_chat_format(
    ChatFormat(
        name="kimi_k2",
        description="Kimi K2: functions.NAME:IDX calls in <|tool_calls_section_begin|>, <think> in every turn",
        parser=KimiK2Parser,
        reasoning=THINK,
        prefills_reasoning=False,
        leading_reasoning_only=True,
        end_of_turn=(END_OF_TURN,),
        turn_end=END_OF_TURN,
        keep_tokens=(SECTION_OPEN, SECTION_CLOSE, CALL_OPEN, CALL_CLOSE, ARGUMENTS, THINK_OPEN, THINK_CLOSE),
        drops_past_reasoning=True,
        history_rewriting=(
            "writes an empty <think></think> for assistant turns up to the last answer without calls "
            "(their reasoning is dropped); later turns keep reasoning_content"
        ),
        control_markers=("<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>"),
        matches=_is_kimi_k2,
        assistant_message=assistant_message,
        tool_message=tool_message,
    )
)
