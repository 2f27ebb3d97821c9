"""The OpenAI chat-completions wire format, read and written for the endpoint.

A request's messages arrive as OpenAI writes them (content as text or parts, tool-call arguments as a
JSON string, `tool_call_id` on results); the chat template of a family wants them as its `ChatFormat`
builds them (arguments as a dict for Qwen, a 9-character id for Mistral, reasoning in its own field
for gpt-oss). So each history message goes through the family's own builders: a request renders the
same tokens that `rf.Agent` would have assembled for the same conversation.

A reply goes back the other way: the family's parser has split the sampled text into reasoning, calls
and content, and they become `reasoning_content`, `tool_calls` and `content`. Streaming replays the
finished reply as server-sent events (the ids were sampled already; nothing is lost in a stream).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlfactory_nb.chat import ChatFormat
from rlfactory_nb.types import Message, ToolCall

SAMPLING_FIELDS = ("temperature", "top_p", "seed")
"""request fields that set how tokens are drawn: during training the run's settings win over them"""


class RequestError(ValueError):
    """A request the endpoint refuses: HTTP `status`, and a message naming the field or limit."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str = "invalid_request"):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": "invalid_request_error", "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ChatRequest:
    """One checked chat-completions request."""

    model: str
    messages: list[dict[str, Any]]
    """as the client sent them (OpenAI shapes)"""
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = "auto"
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    sampling: dict[str, Any] = field(default_factory=dict)
    """temperature / top_p / seed where the request set them"""


def parse_request(body: Any) -> ChatRequest:
    """Check a decoded JSON body; a RequestError names the first bad field."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise RequestError(400, "'messages' must be a non-empty list of message objects", "messages")
    for index, message in enumerate(messages):
        _check_message(f"messages[{index}]", message)
    n = body.get("n", 1)
    if n not in (None, 1):
        raise RequestError(400, f"n={n!r}: this endpoint returns one choice per request (n=1); send n requests", "n")
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(_is_function_tool(t) for t in tools)):
        raise RequestError(400, "'tools' must be a list of {'type': 'function', 'function': {...}} objects", "tools")
    tool_choice = body.get("tool_choice", "auto")
    if not (tool_choice in ("auto", "none", "required") or _is_named_choice(tool_choice)):
        raise RequestError(400, f"tool_choice {tool_choice!r}: use auto, none, required or a function", "tool_choice")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and not (_is_integer(max_tokens) and max_tokens >= 1):
        raise RequestError(400, f"max_tokens={max_tokens!r} must be an integer >= 1", "max_tokens")
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else stop
    if not isinstance(stop, list | tuple) or not all(isinstance(s, str) and s for s in stop) or len(stop) > 4:
        raise RequestError(400, "'stop' must be a string or a list of at most 4 non-empty strings", "stop")
    sampling = {key: body[key] for key in SAMPLING_FIELDS if body.get(key) is not None}
    options = body.get("stream_options") or {}
    return ChatRequest(
        model=str(body.get("model", "")),
        messages=messages,
        tools=tools or None,
        tool_choice=tool_choice,
        max_tokens=max_tokens,
        stop=tuple(stop),
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        sampling=sampling,
    )


def _check_message(where: str, message: dict[str, Any]) -> None:
    """A message's fields have the types OpenAI gives them, so that reading it cannot fail later: a
    chat role; content as text, None or text parts; tool calls as a list of function calls."""
    if message.get("role") not in ("system", "developer", "user", "assistant", "tool"):
        raise RequestError(400, f"{where}.role {message.get('role')!r} is not a chat role", "messages")
    for key in ("content", "reasoning_content"):
        content = message.get(key)
        if isinstance(content, list) and not all(isinstance(part, dict) and isinstance(part.get("text", ""), str) for part in content):
            raise RequestError(400, f"{where}.{key}: each part must be an object whose 'text' is a string", "messages")
    calls = message.get("tool_calls")
    if calls is None:
        return
    if not isinstance(calls, list) or not all(_is_function_call(call) for call in calls):
        raise RequestError(
            400, f"{where}.tool_calls must be a list of {{'id', 'type': 'function', 'function': {{'name': str, "
            "'arguments': str}} objects", "messages",
        )


def _is_function_call(call: Any) -> bool:
    function = call.get("function") if isinstance(call, dict) else None
    return isinstance(function, dict) and isinstance(function.get("name", ""), str)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_function_tool(tool: Any) -> bool:
    return isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("function"), dict)


def _is_named_choice(choice: Any) -> bool:
    return isinstance(choice, dict) and isinstance(choice.get("function"), dict) and "name" in choice["function"]


# ---------------------------------------------------------------------- history in the family's shapes


def text_of(content: Any) -> str:
    """A message's content as text: OpenAI allows a string, None, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    raise RequestError(400, f"message content of type {type(content).__name__} is not text", "messages")


def calls_of(message: dict[str, Any]) -> list[ToolCall]:
    """The tool calls of an OpenAI assistant message, arguments decoded (a string that is not JSON
    stays a string: the template shows what the client sent)."""
    calls = []
    for entry in message.get("tool_calls") or []:
        function = entry.get("function") or {}
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (json.JSONDecodeError, RecursionError):  # nested past what json reads: kept as text
                pass
        calls.append(ToolCall(str(function.get("name", "")), arguments))
    return calls


def to_template_messages(messages: Sequence[dict[str, Any]], chat_format: ChatFormat) -> list[Message]:
    """The request's history as the family's template reads it (see the module docstring)."""
    out: list[Message] = []
    calls_by_id: dict[str, tuple[ToolCall, int]] = {}
    for message in messages:
        role = "system" if message["role"] == "developer" else message["role"]
        if role == "assistant":
            calls = calls_of(message)
            for index, entry in enumerate(message.get("tool_calls") or []):
                calls_by_id[str(entry.get("id", ""))] = (calls[index], index)
            reasoning = text_of(message.get("reasoning_content"))
            out.append(chat_format.assistant_message(text_of(message.get("content")), calls, reasoning))
        elif role == "tool":
            call, index = calls_by_id.get(str(message.get("tool_call_id", "")), (None, 0))
            out.append(chat_format.tool_message(text_of(message.get("content")), call, index))
        else:
            out.append({"role": role, "content": text_of(message.get("content"))})
    return out


def same_reply(sent: dict[str, Any], returned: dict[str, Any]) -> bool:
    """Whether an assistant message in a request is the reply the endpoint returned: the same
    content and calls (reasoning is left out: many clients drop it from history)."""
    if sent.get("role") != "assistant" or text_of(sent.get("content")).strip() != text_of(returned.get("content")).strip():
        return False
    return [(c.name, c.arguments) for c in calls_of(sent)] == [(c.name, c.arguments) for c in calls_of(returned)]


# ---------------------------------------------------------------------- replies


def reply_message(content: str, calls: Sequence[ToolCall], reasoning: str, call_prefix: str) -> dict[str, Any]:
    """The assistant message of a reply, in OpenAI's shape (arguments as a JSON string)."""
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {
                "id": f"{call_prefix}_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
            }
            for index, call in enumerate(calls)
        ]
    return message


def completion_body(
    completion_id: str, model: str, message: dict[str, Any], finish_reason: str, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}


def sse_chunks(body: dict[str, Any], include_usage: bool) -> list[bytes]:
    """A finished completion replayed as `chat.completion.chunk` events, then `[DONE]`."""
    choice, message = body["choices"][0], body["choices"][0]["message"]
    head = {key: body[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        event = head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]} | extra
        return b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    if message.get("reasoning_content"):
        events.append(chunk({"reasoning_content": message["reasoning_content"]}))
    if message.get("content"):
        events.append(chunk({"content": message["content"]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        events.append(chunk({"tool_calls": [{"index": index, **call}]}))
    events.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        events.append(b"data: " + json.dumps(head | {"choices": [], "usage": body["usage"]}).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events
