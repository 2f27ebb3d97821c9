"""The DeepSeek tool-call format (family `deepseek_v3`: DeepSeek-V3, R1 and V3.1):

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>

V3 and R1 write a call as `TYPE<｜tool▁sep｜>NAME` and fenced JSON; V3.1 drops the type and the
fence: `<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>`. One
parser reads both: a head other than `function`, or JSON right after `<｜tool▁sep｜>`, is V3.1's
shape; `function` and a name line is V3's. Note the
full-width bar (U+FF5C) and the lower block (U+2581) in every marker.

The section and the JSON in it are read by structure (chat/sections.py, shared with Kimi K2): the
arguments are decoded as one JSON value where they start, so a value that contains
`<｜tool▁call▁end｜>` is data, and a call stands only once its `<｜tool▁call▁end｜>` is read.

Reasoning is a `<think>` block at the start of the turn. R1's generation prompt pre-fills
`<think>\\n` and V3.1's does with `thinking` on, so sampled text starts inside it. Calls in it are
drafts: counted, not run. Every search moves forward only, so hostile text costs linear time.

The module also registers the family's record; `assistant_message` writes history the way R1 and
V3.1 read it (arguments as the JSON text the model wrote, R1's pre-filled `<think>\\n` restored).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat import reasoning, sections
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import ParseResult, check_max_calls, register_parser
from rlfactory_nb.chat.qwen3 import THINK, THINK_OPEN
from rlfactory_nb.chat.sections import Read, Reader, read_arguments
from rlfactory_nb.types import Message, ToolCall, ToolSpec

SECTION_OPEN, SECTION_CLOSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_OPEN, CALL_CLOSE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
END_OF_SENTENCE = "<｜end▁of▁sentence｜>"
FORMAT_HINT = (
    "Write calls as <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>TOOL_NAME\n```json\n"
    "{arguments as a JSON object}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜> (DeepSeek-V3.1: "
    "<｜tool▁call▁begin｜>TOOL_NAME<｜tool▁sep｜>{arguments}<｜tool▁call▁end｜>)."
)
MARKERS = sections.SectionMarkers(SECTION_OPEN, SECTION_CLOSE, CALL_OPEN, CALL_CLOSE, FORMAT_HINT)
_HEAD_LIMIT = 256
"""characters searched for `<｜tool▁sep｜>` and for the end of the name line: names are short, and a
bounded window keeps a run of broken calls linear"""


@register_parser("deepseek_v3")
@dataclass(frozen=True)
class DeepSeekV3Parser:
    """Reads `<｜tool▁calls▁begin｜>` sections in V3/R1's and V3.1's shapes; see the module docstring."""

    max_calls: int = 8
    """calls run per turn, and broken calls answered one by one (as qwen3's parser)"""
    starts_in_reasoning: bool = False
    """the generation prompt pre-filled `<think>`: the text starts inside the think block"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        return sections.parse(text, MARKERS, _read_call, self.starts_in_reasoning, self.max_calls)


def _read_call(reader: Reader, start: int) -> Read:
    """The call opening at `start`: `HEAD<｜tool▁sep｜>`, then V3.1's JSON (HEAD is the name) or, after
    V3's type `function`, the name line and fenced JSON."""
    text, pos = reader.text, start + len(CALL_OPEN)
    sep = text.find(SEP, pos, pos + _HEAD_LIMIT)
    if sep < 0:
        if len(text) <= pos + _HEAD_LIMIT and CALL_CLOSE not in text[pos:]:
            return reader.truncated(start, "before <｜tool▁sep｜>.")
        return reader.broken(start, pos, "A call must name its tool before <｜tool▁sep｜>.")
    head, pos = text[pos:sep].strip(), reader.skip_space(sep + len(SEP))
    if pos >= len(text):
        return reader.truncated(start, "after <｜tool▁sep｜>.")
    if head != "function" or text.startswith("{", pos):  # V3.1: the head is the name, JSON follows
        return read_arguments(reader, start, pos, head)
    line_end = text.find("\n", pos, pos + _HEAD_LIMIT)
    if line_end < 0:
        if len(text) <= pos + _HEAD_LIMIT:
            return reader.truncated(start, "in the tool name.")
        return reader.broken(start, pos, "The tool name after <｜tool▁sep｜> must end its line.")
    name, pos = text[pos:line_end].strip(), reader.skip_space(line_end)
    for fence in ("```json", "```"):
        if text.startswith(fence, pos):
            return read_arguments(reader, start, reader.skip_space(pos + len(fence)), name, "```")
    if reader.cut(pos, "```json"):
        return reader.truncated(start, "before the ```json fence.")
    return reader.broken(start, pos, "The arguments must follow the name in a ```json fence.")


class JSONArguments(dict):
    """Call arguments that a template can both `tojson` (vLLM's V3 template) and concatenate as
    text (R1 and V3.1 write `... + arguments + ...`): concatenation gives the JSON as sampled."""

    def __init__(self, arguments: dict[str, Any], text: str):
        super().__init__(arguments)
        self.text = text

    def __add__(self, other: str) -> str:
        return self.text + other

    def __radd__(self, other: str) -> str:
        return other + self.text


def assistant_message(text: str, calls: Sequence[ToolCall], reasoning_text: str = "") -> Message:
    """The turn as the templates read it: content is the text before the first call's section,
    exactly as sampled (they write `content + <｜tool▁calls▁begin｜>...`), with R1's pre-filled
    `<think>\\n` restored when the text starts inside reasoning; arguments are `JSONArguments`."""
    content = text
    if calls:
        content = text[: sections.section_start(text, calls[0], SECTION_OPEN)]
    if reasoning.segments(text, THINK)[0].in_reasoning and not text.startswith(THINK_OPEN):
        content = f"{THINK_OPEN}\n{content}"
    message: Message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [_message_call(call) for call in calls]
    return message


def _message_call(call: ToolCall) -> dict[str, Any]:
    read = _read_call(Reader(call.raw, MARKERS), 0)
    return {"type": "function", "function": {"name": call.name, "arguments": JSONArguments(call.arguments, read.arguments)}}


def _is_deepseek(template: str, vocab: frozenset[str]) -> bool:
    """DeepSeek's tool-call section marker, with its full-width bars."""
    return SECTION_OPEN in template and CALL_OPEN in template


DEEPSEEK_V3 = register_chat_format(
    ChatFormat(
        name="deepseek_v3",
        description="DeepSeek-V3, R1 and V3.1: <｜tool▁calls▁begin｜> sections (V3/R1 fenced JSON, V3.1 bare JSON)",
        parser=DeepSeekV3Parser,
        reasoning=THINK,
        prefills_reasoning=True,
        leading_reasoning_only=True,
        end_of_turn=(END_OF_SENTENCE,),
        turn_end=END_OF_SENTENCE,
        keep_tokens=(SECTION_OPEN, SECTION_CLOSE, CALL_OPEN, CALL_CLOSE, SEP),
        drops_past_reasoning=True,
        history_rewriting=(
            "R1 drops the reasoning of an answer given right after a user turn and renders a second "
            "call turn without <｜tool▁calls▁begin｜>; V3.1 renders history turns as non-thinking "
            "(</think> after <｜Assistant｜>); vLLM's V3 template leaks indentation and newlines"
        ),
        control_markers=(
            "<｜User｜>", "<｜Assistant｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
            "<｜tool▁output▁end｜>", "<think>", "</think>",
        ),
        matches=_is_deepseek,
        assistant_message=assistant_message,
    )
)
