"""DeepSeek-V4 and V4.1 (family `deepseek_v4`): DSML calls, prompts rendered here from the official
encoders' rules (the models ship no chat template).

V4 names the section `<｜DSML｜tool_calls>`; V4.1 spells every DSML tag with a leading space
(`<｜DSML｜ calls>`, `<｜DSML｜ invoke name=...>`). Both put tool results in a user turn:

    <｜Assistant｜></think>...</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>sunny</tool_result><｜Assistant｜></think>

V4.1 also opens the conversation with `<｜System｜>` (before a system message, and in thinking mode
before its `Reasoning Effort: 75 ...` line). Which generation renders is read off the vocabulary:
`<｜System｜>` is V4.1's token. The parser reads either spelling (and V3.2's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rlfactory_nb.chat import deepseek_render, dsml
from rlfactory_nb.chat.deepseek_render import EOS, LATEST_REMINDER, SYSTEM, Generation
from rlfactory_nb.chat.deepseek_v32 import DeepSeekV32Parser, assistant_message, encoder_vocabulary
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import register_parser
from rlfactory_nb.chat.qwen3 import THINK
from rlfactory_nb.types import Message

_TOOLS_INTRO = (
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
    'writing a "{open}" block like the following:\n\n{open}\n{invoke} name="$TOOL_NAME">\n'
    '{parameter} name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE{parameter_end}\n...\n{invoke_end}\n'
    '{invoke} name="$TOOL_NAME2">\n...\n{invoke_end}\n{close}\n\n'
    'String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, '
    'arrays, objects), pass the value in JSON format and set `string="false"`.\n\n'
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n"
)
_TOOLS_OUTRO = "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"
V4 = Generation(
    dialect=dsml.V4, tools_intro=_TOOLS_INTRO, tools_outro=_TOOLS_OUTRO, effort_prefix="", system_token=False,
    tool_results_in_user=True, roles=frozenset({"system", "developer", "user", "tool", "assistant", "latest_reminder"}),
)
V41 = Generation(
    dialect=dsml.V41, tools_intro=_TOOLS_INTRO, tools_outro=_TOOLS_OUTRO,
    effort_prefix="Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)\n\n",
    system_token=True, tool_results_in_user=True,
    roles=frozenset({"system", "user", "tool", "assistant", "latest_reminder"}),
)


@register_parser("deepseek_v4")
@dataclass(frozen=True)
class DeepSeekV4Parser(DeepSeekV32Parser):
    """Reads DSML sections in V4's and V4.1's spellings (and V3.2's); see chat/dsml.py."""

    dialect: ClassVar[dsml.Dialect] = dsml.V4


def generation_of(tokenizer: Any) -> Generation:
    """V4.1 when the vocabulary has its `<｜System｜>` token, else V4."""
    vocab = tokenizer.get_vocab() if tokenizer is not None and hasattr(tokenizer, "get_vocab") else {}
    return V41 if SYSTEM in vocab else V4


def render(tokenizer: Any, messages: Sequence[Message], tools: Sequence[dict] | None = None, **options: Any) -> str:
    return deepseek_render.render(generation_of(tokenizer), messages, tools, bool(options.get("enable_thinking")))


def _is_v4(template: str, vocab: frozenset[str]) -> bool:
    """No template, DeepSeek's role tokens, and V4's `<｜latest_reminder｜>`."""
    return not template and encoder_vocabulary(vocab) and LATEST_REMINDER in vocab


# Tools ride on a system message in the base, as in a rollout with tools: V4 keeps every turn's
# reasoning then, so the base's assistant turn renders the same wherever it stands.
_DELTA_BASE: tuple[Message, ...] = (
    {"role": "system", "content": "", "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "ok", "reasoning_content": "r"},
)

DEEPSEEK_V4 = register_chat_format(
    ChatFormat(
        name="deepseek_v4",
        description="DeepSeek-V4/V4.1: DSML <｜DSML｜tool_calls> (V4.1 <｜DSML｜ calls>) sections, results in a user "
        "turn; prompts rendered from its Python encoder",
        parser=DeepSeekV4Parser,
        reasoning=THINK,
        prefills_reasoning=True,
        leading_reasoning_only=True,
        end_of_turn=(EOS,),
        turn_end=EOS,
        keep_tokens=(dsml.DSML, "<think>", "</think>"),
        drops_past_reasoning=True,
        history_rewriting=(
            "in thinking mode without tools drops the reasoning of assistant turns before the last user "
            "turn (tool results count as one) and renders </think> after earlier user turns"
        ),
        matches=_is_v4,
        assistant_message=assistant_message,
        delta_base=_DELTA_BASE,
        control_markers=deepseek_render.ROLE_MARKERS,
        render=render,
    )
)
