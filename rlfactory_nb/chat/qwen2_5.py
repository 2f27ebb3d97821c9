"""The Qwen2.5 family: Qwen3's Hermes JSON calls, without reasoning.

    <|im_start|>assistant
    Let me check.
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call><|im_end|>

The calls are read by Qwen3's parser (chat/qwen3.py), so the two families cannot drift apart on the
format's rules (a `</tool_call>` inside a JSON string is data; broken blocks become errors). What
differs is the record: Qwen2.5 writes no think blocks, so nothing is reasoning (a `<think>` the
model writes is answer text, as the template would show it) and the template rewrites no history.
Tool results come back as `<tool_response>` blocks in a user turn, consecutive results in one turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rlfactory_nb.chat import reasoning
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import register_parser
from rlfactory_nb.chat.qwen3 import THINK_OPEN, Qwen3Parser, is_hermes_chatml


@register_parser("qwen2_5")
@dataclass(frozen=True)
class Qwen25Parser(Qwen3Parser):
    """Qwen3's parser with no reasoning markers: a `<think>` is text, and calls after it run."""

    markers: ClassVar[reasoning.ReasoningMarkers | None] = None


def _is_qwen2_5(template: str, vocab: frozenset[str]) -> bool:
    """Hermes ChatML without think blocks (Qwen3's template has them)."""
    return is_hermes_chatml(template) and THINK_OPEN not in template


QWEN2_5 = register_chat_format(
    ChatFormat(
        name="qwen2_5",
        description="Qwen2.5 Instruct: Hermes JSON in <tool_call>, no reasoning",
        parser=Qwen25Parser,
        reasoning=None,
        prefills_reasoning=False,
        leading_reasoning_only=False,
        end_of_turn=("<|im_end|>", "<|endoftext|>"),
        turn_end="<|im_end|>",
        keep_tokens=(),
        drops_past_reasoning=False,
        history_rewriting="none: the template renders every turn as sampled",
        control_markers=("<tool_response>", "</tool_response>", "<|im_start|>"),
        matches=_is_qwen2_5,
    )
)
