"""The Llama 4 tool-call format (family `llama4`: Scout, Maverick), in both shapes the models write:

    <|header_start|>assistant<|header_end|>

    <|python_start|><|python_end|>{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot|>

(the HF template: any text between the python tags, the JSON calls after `<|python_end|>`; Meta's
models also write the calls inside the tags), or a pythonic list, which Meta documents and vLLM's
Llama 4 template asks for:

    [get_weather(city="Paris"), get_time(zone="Europe/Paris")]<|eot|>

Calls are the whole message, follow the text once `<|python_start|>` opens, or are a pythonic list
that ends the message (vLLM's template writes the text, then the list). JSON calls are decoded
one JSON value at a time (a tag or bracket inside a string is data); a pythonic list is parsed with
`ast.parse` and each argument read with `ast.literal_eval` (never evaluated), so only literals pass.
A call cut off by the token limit is broken JSON or Python: reported, never run. A turn ends with
`<|eot|>`, or `<|eom|>` after a call (Meta's llama-models), which the template renders as `<|eot|>`.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import (
    ParseResult,
    cap_calls,
    check_max_calls,
    describe_json_error,
    json_call,
    register_parser,
    without_end,
)
from rlfactory_nb.types import MalformedCall, Message, ToolCall, ToolSpec

PYTHON_START, PYTHON_END = "<|python_start|>", "<|python_end|>"
FORMAT_HINT = (
    'Call tools with {"name": "TOOL_NAME", "parameters": {arguments as a JSON object}} after <|python_start|>, '
    'or as a list: [TOOL_NAME(argument="value"), OTHER_TOOL(n=1)].'
)
_JSON_CALL = re.compile(r'\[?[ \t\r\n]*\{[ \t\r\n]*"name"[ \t\r\n]*:')
_PYTHONIC = re.compile(r"\[[ \t\r\n]*[A-Za-z_][\w.]*\(")
_BARE_CALL = re.compile(r"[A-Za-z_][\w.]*\([ \t\r\n]*[A-Za-z_]\w*[ \t\r\n]*=|[A-Za-z_][\w.]*\(\)")
_PYTHONIC_LIMIT = 1_000_000
"""characters of a pythonic list parsed at most (ast holds a tree of it in memory)"""
_SEPARATORS = re.compile(r"(?:[ \t\r\n;,]|<\|python_end\|>)*")
_ENDS = ("<|eot|>", "<|eom|>", "<|end_of_text|>")
_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


@register_parser("llama4")
@dataclass(frozen=True)
class Llama4Parser:
    """Reads Llama 4's JSON calls (tagged or whole-message) and pythonic call lists."""

    max_calls: int = 8
    """calls run per turn; more are reported, not run"""
    starts_in_reasoning: bool = False
    """unused: Llama 4 has no reasoning blocks"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        message, start = _locate(without_end(text, _ENDS))
        if start < 0:
            answer = message.replace(PYTHON_END, "").strip()
            return ParseResult(answer, answer=answer)
        calls, errors, rest = _read_calls(message, start)
        calls, errors = cap_calls(calls, errors, 0, self.max_calls, "call", FORMAT_HINT)
        answer = (message[:start] + rest).replace(PYTHON_END, "").strip()
        return ParseResult(answer, calls=calls, errors=errors, answer=answer)


def _locate(text: str) -> tuple[str, int]:
    """(the text less its `<|python_start|>`, where the calls begin or -1): at the start of the
    message, anywhere after the tag, or a pythonic list that ends the message. Only the tag's first
    occurrence is structure; a `<|python_end|>` outside the calls is dropped from the answer."""
    at = len(text) - len(text.lstrip())
    if _JSON_CALL.match(text, at) or _PYTHONIC.match(text, at):
        return text, at
    tagged = text.find(PYTHON_START)
    if tagged < 0:
        bare = _bare_call(text, at)
        return (bare, at) if bare is not None else (text, _trailing_list(text))
    message = text[:tagged] + text[tagged + len(PYTHON_START) :]
    found = [m.start() for pattern in (_JSON_CALL, _PYTHONIC) if (m := pattern.search(message, tagged))]
    if found:
        return message, min(found)
    rest = message[tagged:].replace(PYTHON_END, " ").lstrip()
    return message, (len(message) - len(rest)) if rest.startswith(("{", "[")) else -1


def _bare_call(text: str, at: int) -> str | None:
    """A message that is one pythonic call without the list's brackets (`get_weather(city="Paris")`),
    as the list it means; None when it does not read as a call of literals (then it is text)."""
    body = text[at:].rstrip()
    if not (_BARE_CALL.match(body) and body.endswith(")")) or len(body) > _PYTHONIC_LIMIT:
        return None
    wrapped = f"{text[:at]}[{body}]"
    calls, errors, rest = _pythonic(wrapped, at)
    return wrapped if calls and not errors and not rest.strip() else None


def _trailing_list(message: str) -> int:
    """Where a pythonic call list that ends the message starts (vLLM's template writes the text, then
    the list), or -1; a few candidates are tried, so hostile text stays linear."""
    if not message.rstrip().endswith("]"):
        return -1
    for tries, found in enumerate(_PYTHONIC.finditer(message)):
        if tries == 3:
            break
        calls, errors, rest = _pythonic(message, found.start())
        if calls and not errors and not rest.strip():
            return found.start()
    return -1


def _read_calls(message: str, start: int) -> tuple[list[ToolCall], list[MalformedCall], str]:
    """The calls from `start` on, broken ones, and the text left after them."""
    if _PYTHONIC.match(message, start):
        return _pythonic(message, start)
    decoder, calls, errors = json.JSONDecoder(), [], []
    pos = start
    while pos < len(message) and message[pos] in "{[":
        try:
            value, end = decoder.raw_decode(message, pos)
        except (ValueError, RecursionError) as exc:
            errors.append(_error(f"The call is not valid JSON ({describe_json_error(exc)}).", message[pos:]))
            return calls, errors, ""
        raw = message[pos:end]
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and "name" in item:
                key = "parameters" if "parameters" in item else "arguments"
                read = json_call(item, key, raw, lambda text, raw=raw: _error(text, raw))
                (calls if isinstance(read, ToolCall) else errors).append(read)
            else:
                errors.append(_error('Each call must be a JSON object with a "name" and "parameters".', raw))
        pos = _SEPARATORS.match(message, end).end()
    return calls, errors, message[pos:]


def _pythonic(message: str, start: int) -> tuple[list[ToolCall], list[MalformedCall], str]:
    close = message.rfind("]")
    expression, rest = message[start : close + 1], message[close + 1 :]
    if close < start or len(expression) > _PYTHONIC_LIMIT:
        return [], [_error("The call list is not closed by ] (or is too long).", message[start:])], ""
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return [], [_error(f"The call list is not valid Python syntax ({type(exc).__name__}).", expression)], rest
    if not isinstance(tree, ast.List):
        return [], [_error("Calls must be one list: [tool(argument=value), ...].", expression)], rest
    calls, errors = [], []
    for node in tree.elts:
        read = _pythonic_call(node, expression)
        (calls if isinstance(read, ToolCall) else errors).append(read)
    return calls, errors, rest


def _pythonic_call(node: ast.expr, expression: str) -> ToolCall | MalformedCall:
    raw = ast.get_source_segment(expression.strip(), node) or ""
    if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Name, ast.Attribute)):
        return _error("Each list item must be a call: tool(argument=value).", raw)
    if node.args or any(k.arg is None for k in node.keywords):
        return _error("Pass arguments by name: tool(argument=value).", raw)
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        try:
            arguments[keyword.arg] = _literal(keyword.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return _error(f"The value of {keyword.arg!r} must be a literal (text, number, list, dict).", raw)
    return ToolCall(name=ast.unparse(node.func), arguments=arguments, raw=raw)


def _literal(node: ast.expr) -> Any:
    """A literal, with JSON's true/false/null accepted as names; anything else raises ValueError."""
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.List):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values) if k is not None}
    return ast.literal_eval(node)


def _error(message: str, raw: str) -> MalformedCall:
    return MalformedCall(f"{message} {FORMAT_HINT}", raw=raw)


def assistant_message(text: str, calls: Sequence[ToolCall], reasoning: str = "") -> Message:
    """The answer (the text less the python tags and the calls: a pythonic list goes whole), which
    the template writes back around the calls."""
    message: Message = {"role": "assistant", "content": Llama4Parser().parse(text).answer}
    if calls:
        message["tool_calls"] = [call.to_message_call() for call in calls]
    return message


def _is_llama4(template: str, vocab: frozenset[str]) -> bool:
    """Llama 4's header tokens and `<|eot|>` (Llama 3's are `<|start_header_id|>`, `<|eot_id|>`)."""
    return "<|header_start|>" in template and "<|eot|>" in template


LLAMA4 = register_chat_format(
    ChatFormat(
        name="llama4",
        description="Llama 4 Scout/Maverick: JSON calls after <|python_start|>, or a pythonic [tool(arg=...)] list",
        parser=Llama4Parser,
        reasoning=None,
        prefills_reasoning=False,
        leading_reasoning_only=False,
        end_of_turn=_ENDS,
        turn_end="<|eot|>",
        keep_tokens=(PYTHON_START, PYTHON_END),
        drops_past_reasoning=False,
        history_rewriting=(
            "renders a call turn as <|python_start|>text<|python_end|> and canonical JSON ending in <|eot|> "
            "(a sampled <|eom|> becomes <|eot|>: expected); vLLM's pythonic template writes every argument quoted"
        ),
        matches=_is_llama4,
        assistant_message=assistant_message,
        rendered_as=(("<|eom|>", "<|eot|>"),),
    )
)
