"""A finished conversation (OpenAI chat messages) as the trajectory a rollout of it would have been.

Supervised fine-tuning trains on the same rows as GRPO (`rlfactory_nb.train.batch`): prompt ids,
response ids, and a loss mask that is 1 exactly on the tokens the policy wrote. A conversation row
(`messages` with assistant `tool_calls` and `tool` results, plus its `tools`) gets those rows here,
assembled the way a rollout assembles them (rollout/tokens.py), so the mask matches RL's:

    prompt        `prompt_ids` of the messages before the first assistant turn (generation prompt
                  included, pre-filled think blocks and all): mask 0
    assistant k   the text the family's template writes for turn k when it is the last message,
                  minus the generation prompt, up to and including the first stop token (the
                  family's `end_of_turn` or eos): what the model would have sampled, mask 1
    between       `delta_ids` of the tool results or user turns that follow, against the family's
                  delta base, exactly as the rollout computes them: mask 0

A family whose turns have no end token of their own (GLM stops on the next block's first token)
gets that token from a render with the next message. Where a family samples a token its template
writes differently in history (`ChatFormat.rendered_as`: Llama 3.1's `<|eom_id|>` rendered as
`<|eot_id|>`), a conversation row gets the template's form; a Trajectory keeps its own sampled ids.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from rlfactory_nb.chat import ChatFormat, resolve_chat_format
from rlfactory_nb.errors import DatasetError, TemplateError
from rlfactory_nb.rollout.tokens import delta_ids, prompt_ids, render
from rlfactory_nb.types import Message, Trajectory

_NEXT_USER: Message = {"role": "user", "content": "next"}
_PLACEHOLDER = "SFT-PLACEHOLDER"
"""what follows a final answer when the family's stop token is the next block's first token (GLM)"""


def conversation_trajectory(
    tokenizer: Any,
    messages: Sequence[Message],
    tools: list[dict] | None = None,
    chat_format: str | ChatFormat = "auto",
    enable_thinking: bool = False,
) -> Trajectory:
    """The rows (prompt ids, response ids, loss mask) of a conversation, as the module docstring
    assembles them; `logprobs` are 0 (no engine sampled them) and `messages` are kept as given."""
    fmt = resolve_chat_format(chat_format, tokenizer)
    messages = _arguments_as_template_reads(tokenizer, [dict(message) for message in messages])
    starts = [index for index, message in enumerate(messages) if message.get("role") == "assistant"]
    if not starts or starts[0] == 0:
        raise DatasetError(
            "a conversation to train on needs a prompt (a user message) and then at least one assistant "
            f"message; got roles {[message.get('role') for message in messages]}"
        )
    prompt = messages[: starts[0]]
    ids = prompt_ids(tokenizer, prompt, tools, enable_thinking, chat_format=fmt, trusted=prompt)
    response: list[int] = []
    mask: list[int] = []
    stops = set(fmt.end_of_turn_ids(tokenizer))
    for position, start in enumerate(starts):
        end = starts[position + 1] if position + 1 < len(starts) else len(messages)
        sampled, stop = _sampled_ids(tokenizer, fmt, messages, start, tools, enable_thinking, stops)
        response += sampled
        mask += [1] * len(sampled)
        following = messages[start + 1 : end]
        if following:
            message = messages[start]
            ended = None if message.get("tool_calls") else (stop if stop in fmt.end_of_turn else None)
            delta = delta_ids(tokenizer, following, enable_thinking, fmt, message, ended)
            response += delta
            mask += [0] * len(delta)
    return Trajectory(
        prompt_ids=ids,
        response_ids=response,
        loss_mask=mask,
        logprobs=[0.0] * sum(mask),
        messages=messages,
        metadata={"source": "conversation", "chat_format": fmt.name},
    )


def _arguments_as_template_reads(tokenizer: Any, messages: list[Message]) -> list[Message]:
    """Tool-call arguments in the form the template renders as JSON: OpenAI rows carry JSON text,
    which most templates (Hugging Face's convention) would quote again (`tojson`), while others
    (DeepSeek's) print the text as it is and a dict as Python. The form is read off the template."""
    wants_text = _template_wants_text(tokenizer, str(getattr(tokenizer, "chat_template", None)))
    for message in messages:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not calls:
            continue
        converted = []
        for call in calls:
            function = dict(call.get("function", {}))
            arguments = function.get("arguments")
            if not wants_text and isinstance(arguments, str):
                function["arguments"] = _parsed(arguments)
            elif wants_text and isinstance(arguments, dict):
                function["arguments"] = json.dumps(arguments, ensure_ascii=False)
            converted.append({**call, "function": function})
        message["tool_calls"] = converted
    return messages


@functools.lru_cache(maxsize=32)
def _template_wants_text(tokenizer: Any, template: str) -> bool:
    """Whether the template prints arguments as given, so that JSON text renders as JSON and a dict
    fails or renders as Python (DeepSeek's); else it takes a dict (Hugging Face's convention:
    `tojson`, or one key at a time, as Gemma 4 and GLM write them)."""
    as_text, as_dict = (_probe(tokenizer, arguments) for arguments in ('{"probe": 1}', {"probe": 1}))
    return '{"probe": 1}' in as_text and (as_dict == "" or "{'probe': 1}" in as_dict)


def _probe(tokenizer: Any, arguments: Any) -> str:
    """The render of a one-call conversation; "" when the template refuses it."""
    call = {"id": "call00000", "type": "function", "function": {"name": "probe", "arguments": arguments}}
    probe = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    try:
        return render(tokenizer, probe)
    except Exception:  # noqa: BLE001  (any template error: this form is not the one it reads)
        return ""


def _parsed(arguments: str) -> Any:
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments  # not JSON: the template renders the text the row holds
    return value if isinstance(value, dict) else arguments


def _sampled_ids(
    tokenizer: Any,
    fmt: ChatFormat,
    messages: list[Message],
    index: int,
    tools: list[dict] | None,
    enable_thinking: bool,
    stops: set[int],
) -> tuple[list[int], str | None]:
    """Assistant message `index` as the ids the model would have sampled, and the stop token's text."""
    ids = _turn_ids(tokenizer, fmt, messages, index, tools, enable_thinking)
    cut = next((i for i, token in enumerate(ids) if token in stops), None)
    if cut is not None:
        return ids[: cut + 1], tokenizer.convert_ids_to_tokens(ids[cut])
    stop = _next_block_stop(tokenizer, fmt, messages, index, tools, enable_thinking, stops)
    return ids + [stop], tokenizer.convert_ids_to_tokens(stop)


def _turn_ids(
    tokenizer: Any,
    fmt: ChatFormat,
    messages: list[Message],
    index: int,
    tools: list[dict] | None,
    thinking: bool,
) -> list[int]:
    """The ids the template writes for assistant message `index` (as the last message) after the
    generation prompt. A template that rewrites the history once the turn is written (gpt-oss drops
    earlier analysis) or drops a block its generation prompt pre-filled (Gemma 4's empty thought)
    renders no prefix of it: the turn then starts where its render parts from the render of a
    placeholder answer in its place."""
    before = render(tokenizer, messages[:index], tools, add_generation_prompt=True, enable_thinking=thinking)
    upto = render(tokenizer, messages[: index + 1], tools, enable_thinking=thinking)
    if upto.startswith(before):
        return tokenizer.encode(upto[len(before) :], add_special_tokens=False)
    placeholder = fmt.assistant_message(_PLACEHOLDER, [], "")
    other = render(tokenizer, messages[:index] + [placeholder], tools, enable_thinking=thinking)
    parted = next((i for i, (a, b) in enumerate(zip(upto, other)) if a != b), min(len(upto), len(other)))
    # the turn starts after the longest head of the generation prompt that ends where the renders part
    header = before[len(render(tokenizer, messages[:index], tools, enable_thinking=thinking)) :]
    found = ((upto.rfind(header[:size], 0, parted), size) for size in range(len(header), 0, -1))
    start = next((at + size for at, size in found if at >= 0), -1) if header else parted
    if start < 0 or _PLACEHOLDER not in other[parted:]:
        raise TemplateError(
            f"the {fmt.name} template renders assistant message {index} so that the conversation before it "
            f"is not a prefix of the render with it ({_differ(before, upto)}): its sampled tokens cannot be "
            "read off the template; give the rows as trajectories (token ids) instead"
        )
    return tokenizer.encode(upto[start:], add_special_tokens=False)


def _next_block_stop(
    tokenizer: Any,
    fmt: ChatFormat,
    messages: list[Message],
    index: int,
    tools: list[dict] | None,
    enable_thinking: bool,
    stops: set[int],
) -> int:
    """The stop token of a turn that has none of its own (GLM): the first token the template writes
    after it once the next message follows (after a final answer, a user's, rendered after a
    placeholder answer, since a new user message may rewrite the history before it)."""
    following = messages[index + 1 : index + 2]
    if following:
        upto = render(tokenizer, messages[: index + 1], tools, enable_thinking=enable_thinking)
        after = render(tokenizer, messages[: index + 1] + following, tools, enable_thinking=enable_thinking)
        rest = after[len(upto) :] if after.startswith(upto) else ""
    else:
        context = [_NEXT_USER, fmt.assistant_message(_PLACEHOLDER, [], ""), _NEXT_USER]
        after = render(tokenizer, context, enable_thinking=enable_thinking)
        rest = after[after.rfind(_PLACEHOLDER) + len(_PLACEHOLDER) :]
    ids = tokenizer.encode(rest, add_special_tokens=False)
    if ids and ids[0] in stops:
        return ids[0]
    raise TemplateError(
        f"assistant message {index}: the template writes no stop token after it ({rest[:40]!r} follows), so "
        "where the model stopped is unknown"
    )


def _differ(before: str, upto: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(before, upto)) if a != b), min(len(before), len(upto)))
    return f"they differ at character {at}: {before[at : at + 30]!r} vs {upto[at : at + 30]!r}"
