"""DeepSeek-V3.2 (family `deepseek_v32`): DSML calls in a `function_calls` section, prompts rendered
here from the official encoder's rules (the model ships no chat template):

    <｜User｜>What is the weather in Paris?<｜Assistant｜></think>Let me look.

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls><｜end▁of▁sentence｜>

    <function_results>
    <result>sunny</result>
    </function_results>

    </think>

Thinking mode (`enable_thinking`) writes `<think>` after the last user turn and after results, so the
sampled text starts inside reasoning (`prefills_reasoning`); earlier turns' reasoning is not rendered.
Calls are read by chat/dsml.py; prompts by chat/deepseek_render.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rlfactory_nb.chat import deepseek_render, dsml
from rlfactory_nb.chat.deepseek_render import ASSISTANT, EOS, USER, Generation
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import ParseResult, check_max_calls, register_parser
from rlfactory_nb.chat.qwen3 import THINK
from rlfactory_nb.chat.schema import resolve
from rlfactory_nb.types import Message, ToolCall, ToolSpec

V32 = Generation(
    dialect=dsml.V32,
    tools_intro=(
        "## Tools\n\nYou have access to a set of tools you can use to answer the user's question.\n"
        'You can invoke functions by writing a "{open}" block like the following as part of your reply to the user:\n'
        '{open}\n{invoke} name="$FUNCTION_NAME">\n'
        '{parameter} name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE{parameter_end}\n...\n'
        '{invoke_end}\n{invoke} name="$FUNCTION_NAME2">\n...\n{invoke_end}\n{close}\n\n'
        "String and scalar parameters should be specified as is without any escaping or quotes, while lists and "
        'objects should use JSON format. The "string" attribute should be set to "true" for string type parameters '
        'and "false" for other types (numbers, booleans, arrays, objects).\n\n'
        "If the thinking_mode is enabled, then after function results you should strongly consider outputting a "
        "thinking block. Here is an example:\n\n{open}\n...\n{close}\n\n<function_results>\n...\n"
        "</function_results>\n\n<think>...thinking about results</think>\n\n"
        "Here are the functions available in JSONSchema format:\n<functions>\n"
    ),
    tools_outro="\n</functions>\n",
    effort_prefix="",
    system_token=False,
    tool_results_in_user=False,
    roles=frozenset({"system", "developer", "user", "tool", "assistant"}),
)


@register_parser("deepseek_v32")
@dataclass(frozen=True)
class DeepSeekV32Parser:
    """Reads DSML sections (any generation's spelling); see chat/dsml.py."""

    dialect: ClassVar[dsml.Dialect] = dsml.V32
    """the generation's own spelling, tried first (deepseek_v4's parser is this one with V4's)"""

    max_calls: int = 8
    """calls run per turn, and broken calls answered one by one (as qwen3's parser)"""
    starts_in_reasoning: bool = False
    """thinking mode pre-filled `<think>`: the text starts inside reasoning"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        result = dsml.parse(text, self.dialect, THINK, self.starts_in_reasoning, self.max_calls)
        return resolve(result, tools)


def assistant_message(text: str, calls: Sequence[ToolCall], reasoning: str = "") -> Message:
    """The turn in the encoder's fields, exact as sampled: `reasoning_content` before `</think>`,
    `content` up to the `\\n\\n` before the first DSML section, the parsed calls as `tool_calls`.
    A turn cut inside reasoning (no `</think>`, reasoning read) is all reasoning."""
    close = text.find(THINK.close)
    if close >= 0:
        reasoning_text, outside = text[:close].removeprefix(THINK.open), text[close + len(THINK.close) :]
    elif reasoning:
        reasoning_text, outside = text, ""
    else:
        reasoning_text, outside = "", text
    content = outside
    if calls:
        opens = [at for d in dsml.DIALECTS if (at := outside.find(d.open)) >= 0]
        content = outside[: min(opens)].removesuffix("\n\n") if opens else outside
    message: Message = {"role": "assistant", "content": content, "reasoning_content": reasoning_text}
    if calls:
        message["tool_calls"] = [call.to_message_call() for call in calls]
    return message


def render(tokenizer: Any, messages: Sequence[Message], tools: Sequence[dict] | None = None, **options: Any) -> str:
    return deepseek_render.render(V32, messages, tools, bool(options.get("enable_thinking")))


def encoder_vocabulary(vocab: frozenset[str]) -> bool:
    """DeepSeek's role tokens in a tokenizer that has no chat template (the encoder families')."""
    return USER in vocab and ASSISTANT in vocab and EOS in vocab


def _is_v32(template: str, vocab: frozenset[str]) -> bool:
    """No template, DeepSeek's role tokens, and none of V4's added tokens."""
    return not template and encoder_vocabulary(vocab) and deepseek_render.LATEST_REMINDER not in vocab


DEEPSEEK_V32 = register_chat_format(
    ChatFormat(
        name="deepseek_v32",
        description="DeepSeek-V3.2: DSML <｜DSML｜function_calls> sections; prompts rendered from its Python encoder",
        parser=DeepSeekV32Parser,
        reasoning=THINK,
        prefills_reasoning=True,
        leading_reasoning_only=True,
        end_of_turn=(EOS,),
        turn_end=EOS,
        keep_tokens=(dsml.DSML, "<think>", "</think>"),
        drops_past_reasoning=True,
        history_rewriting=(
            "in thinking mode renders no reasoning for assistant turns before the last user turn, and "
            "</think> instead of <think> after earlier user turns"
        ),
        matches=_is_v32,
        assistant_message=assistant_message,
        control_markers=deepseek_render.ROLE_MARKERS,
        render=render,
    )
)
