"""One episode's session: the model calls an agent program makes, served from token ids and recorded.

A call's prompt ids are built the way `rf.Agent` builds them, so that consecutive calls merge into one
exact trajectory (programs/assembly.py):

- when the request's history is an earlier call's history, plus the reply that call returned, plus
  new tool or user messages, the prompt is that call's prompt ids + the ids it *sampled* + the masked
  delta of the new messages (rollout/tokens.py): the sampled ids are never re-encoded, and a template
  that drops past reasoning (Qwen3's empty think blocks) cannot break the merge;
- otherwise (the first call, a rewritten history, other tools) the history is rendered whole with the
  policy's chat template: a new segment begins there.

The family's parser splits the sampled text into reasoning, calls and content (wire.py writes them as
OpenAI fields), so no server-side tool parser is involved. Every call is recorded (`CallRecord`):
prompt ids, completion ids, log-probs, policy version, and what the request asked that the run did
not give (during training the run's sampling wins over a request's temperature, top_p and seed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rlfactory_nb.chat import ChatFormat, get_parser
from rlfactory_nb.engines.base import Engine, Generation, SamplingParams
from rlfactory_nb.errors import TemplateError
from rlfactory_nb.programs.wire import (
    ChatRequest,
    RequestError,
    completion_body,
    reply_message,
    same_reply,
    text_of,
    to_template_messages,
)
from rlfactory_nb.rollout.episodes import EpisodeLimits
from rlfactory_nb.rollout.guard import admitted
from rlfactory_nb.rollout.tokens import delta_ids, prompt_ids
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.types import Message, ToolCall, Turn

log = logging.getLogger(__name__)


@dataclass
class Serving:
    """What every session of one program serves with: the engine, the tokenizer and its family, the
    limits (a call past `max_turns` calls, or a text past `max_text_chars`, is refused or cut: each
    names its limit), and whose sampling wins (`request_sampling`: False in a run, True for a program
    on its own)."""

    engine: Engine
    tokenizer: Any
    chat_format: ChatFormat
    limits: EpisodeLimits
    sampling: SamplingParams
    request_sampling: bool = False
    enable_thinking: bool = False
    model_name: str = "policy"
    starts_in_reasoning: bool = False
    parser_name: str | Any | None = None
    """a tool-call parser by name or object in place of the family's (`rollout.parser`)"""

    def __post_init__(self) -> None:
        self.told_sampling = False
        """whether the log said once that the run's sampling wins over a request's"""
        if self.parser_name is None:
            self.parser = self.chat_format.new_parser(starts_in_reasoning=self.starts_in_reasoning)
        else:
            self.parser = get_parser(self.parser_name) if isinstance(self.parser_name, str) else self.parser_name
        fmt, tokenizer = self.chat_format, self.tokenizer
        self.drift_options = {  # read off the vocabulary once: get_vocab() costs milliseconds a call
            "drops_past_reasoning": fmt.drops_past_reasoning,
            "rendered_as": fmt.rendered_as_ids(tokenizer),
            "unrendered_stop_ids": fmt.end_of_turn_ids(tokenizer) if fmt.turn_end_opens_next else (),
            "dropped_span": fmt.past_reasoning_ids(tokenizer),
        }
        """the family's drift-check arguments (rollout/tokens.py `drift_check`)"""
        vocabulary = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
        self.max_token_chars = max(map(len, vocabulary), default=0)
        """the longest token of the vocabulary in characters (a byte-level token writes one per
        byte): a text of n characters is at least n / max_token_chars tokens; 0 when unknown"""


@dataclass(frozen=True)
class CallRecord:
    """One model call of an episode, as served (the unit programs/assembly.py merges)."""

    index: int
    """the call's place in the episode, counted when it arrived"""
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    """the engine's log-prob of each completion id"""
    policy_version: int | None
    finish_reason: str
    """"stop" or "length", as the engine (or a request's stop string) ended it"""
    messages: list[Message]
    """the request's history in the family's shapes (what a full render reads)"""
    tools: list[dict[str, Any]] | None
    reply: dict[str, Any]
    """the assistant message returned (OpenAI shape)"""
    history_message: Message
    """the reply as the family's template reads it in later history"""
    turn: Turn
    extends: int | None = None
    """the index of the call whose prompt + completion this prompt starts with (None: rendered whole)"""
    ignored: dict[str, Any] = field(default_factory=dict)
    """request fields the run did not obey (training's sampling wins), with the values asked"""
    unmet_tool_choice: bool = False
    """tool_choice "required" (or a named function) that the reply did not satisfy"""
    serve_s: float = 0.0
    """seconds the endpoint spent on the call besides the engine's generate (history, rendering,
    parsing the reply; not HTTP): its own overhead"""
    answers: dict[str, str] = field(default_factory=dict)
    """tool_call_id -> result text, from the request's tool messages (what the program's tools returned)"""

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.completion_ids


class CallSession:
    """The model calls of one episode, as the endpoint serves them (the episode itself is a
    `ProgramSession`, play.py). Reached at `/s/<id>/v1` with its own key; a closed session refuses."""

    def __init__(
        self, serving: Serving, sample_id: SampleId | None = None, gate: asyncio.Semaphore | None = None,
        prompt: Sequence[Message] = (),
    ):
        self.serving = serving
        self.prompt = list(prompt)
        """the row's own prompt messages: a whole render leaves them unguarded (rollout/guard.py)"""
        self.id = secrets.token_hex(8)
        self.key = "rfs-" + secrets.token_urlsafe(24)
        self.sample_id = sample_id
        self.gate = gate
        """the RolloutStepper's: each call waits for a permit (one step = one call)"""
        self.calls: list[CallRecord] = []
        self.closed = False
        self.limit_hit: str | None = None
        """"max_turns" or "length" once a call was refused for a limit"""
        self.changed = asyncio.Event()
        self.misuse: str | None = None
        """set when this episode's program called with another episode's client (endpoint.py): the
        episode ends with it as its error"""
        self._arrived = 0

    def close(self) -> None:
        self.closed = True
        self.changed.set()

    async def complete(self, request: ChatRequest) -> dict[str, Any]:
        """Serve one chat-completions request; returns the completion body (wire.py)."""
        serving, limits = self.serving, self.serving.limits
        self._check_open()
        if self._arrived >= limits.max_turns:
            self.limit_hit = self.limit_hit or "max_turns"
            raise RequestError(
                400, f"this episode already made {self._arrived} model calls, its limit (max_calls, a run's "
                "rollout.max_turns)", "messages", "max_calls_exceeded",
            )
        index, self._arrived = self._arrived, self._arrived + 1
        if self.gate is not None:
            await self.gate.acquire()
            self._check_open()
        arrived = time.perf_counter()
        request = replace(request, messages=admitted(request.messages, limits.max_text_chars))  # the one cut (rollout/guard.py)
        self._check_size(request)
        messages = to_template_messages(request.messages, serving.chat_format)
        prompt, extends = self._prompt(request, messages)
        budget = limits.max_total_tokens - len(prompt)
        if budget <= 0:
            self.limit_hit = self.limit_hit or "length"
            raise RequestError(
                400, f"the prompt is {len(prompt)} tokens, at or past the episode's token budget "
                f"(max_total_tokens={limits.max_total_tokens})", "messages", "max_total_tokens_exceeded",
            )
        sampling, ignored = self._sampling(request, budget, index)
        started = time.perf_counter()
        generation = cut_at_stop(await serving.engine.generate(prompt, sampling), request.stop, serving)
        generate_s = time.perf_counter() - started
        record = self._record(index, request, messages, prompt, extends, generation, ignored, generate_s)
        record = replace(record, serve_s=time.perf_counter() - arrived - generate_s)
        self.calls.append(record)
        self.changed.set()
        finish = "tool_calls" if record.reply.get("tool_calls") else record.finish_reason
        return completion_body(
            f"chatcmpl-{self.id}-{index}", request.model or serving.model_name, record.reply, finish,
            len(prompt), len(generation.token_ids),
        )

    def _check_size(self, request: ChatRequest) -> None:
        """Refuse, before any render, a request whose text alone is more tokens than the budget:
        rendering and tokenizing megabytes would hold the event loop every episode shares."""
        serving, budget = self.serving, self.serving.limits.max_total_tokens
        if not serving.max_token_chars:
            return
        chars = kept_chars(request, serving.chat_format)
        if chars > budget * serving.max_token_chars:
            self.limit_hit = self.limit_hit or "length"
            raise RequestError(
                400, f"the messages hold {chars:,} characters, at least {-(-chars // serving.max_token_chars):,} "
                f"tokens (at most {serving.max_token_chars} characters a token), past the episode's token budget "
                f"(max_total_tokens={budget})", "messages", "max_total_tokens_exceeded",
            )

    def _check_open(self) -> None:
        if self.closed:
            raise RequestError(410, f"session {self.id} is closed: its episode has ended", None, "session_closed")

    def _prompt(self, request: ChatRequest, messages: list[Message]) -> tuple[list[int], int | None]:
        """The prompt ids, and the call they extend (module docstring); None when rendered whole."""
        serving = self.serving
        earlier = self._extended_call(request, messages)
        if earlier is not None:
            new = messages[len(earlier.messages) + 1 :]
            try:
                delta = delta_ids(serving.tokenizer, new, serving.enable_thinking, serving.chat_format, earlier.history_message)
                return earlier.all_ids + delta, earlier.index
            except TemplateError:  # the template re-renders history for these messages (Qwen3 after a
                pass  # new user turn drops past reasoning): what the model reads is the whole render
        whole = prompt_ids(
            serving.tokenizer, messages, request.tools, serving.enable_thinking, keep_up_to=serving.limits.max_total_tokens - 1,
            chat_format=serving.chat_format, trusted=self.prompt,
        )
        return whole, None

    def _extended_call(self, request: ChatRequest, messages: list[Message]) -> CallRecord | None:
        """The latest call whose history and reply the request's history continues with new tool or
        user messages only, under the same tools."""
        for call in sorted(self.calls, key=lambda c: -len(c.messages)):
            n = len(call.messages)
            if (
                call.finish_reason == "stop"
                and len(messages) > n + 1
                and messages[:n] == call.messages
                and same_reply(request.messages[n], call.reply)
                and _same_tools(request.tools, call.tools)
                and all(m["role"] in ("tool", "user") for m in messages[n + 1 :])
            ):
                return call
        return None

    def _sampling(self, request: ChatRequest, budget: int, index: int) -> tuple[SamplingParams, dict[str, Any]]:
        """The run's sampling, with the request's where it may choose (module docstring)."""
        serving = self.serving
        max_new = min(serving.limits.max_new_tokens, budget, request.max_tokens or budget)
        seed = self.sample_id.turn_seed(index) if self.sample_id is not None else serving.sampling.seed
        sampling = replace(serving.sampling, max_new_tokens=max_new, seed=seed)
        asked = dict(request.sampling)
        if serving.request_sampling:
            try:
                return replace(sampling, **asked), {}
            except ValueError as error:
                raise RequestError(400, str(error).replace("SamplingParams.", ""), None) from None
        ignored = {key: value for key, value in asked.items() if value != getattr(sampling, key)}
        if ignored and not serving.told_sampling:
            serving.told_sampling = True
            log.info(
                "an agent program asked for %s; in a run the run's sampling wins (%s). Later requests are "
                "counted in program/ignored_sampling", ignored, {key: getattr(sampling, key) for key in ignored},
            )
        return sampling, ignored

    def _record(
        self, index: int, request: ChatRequest, messages: list[Message], prompt: list[int], extends: int | None,
        generation: Generation, ignored: dict[str, Any], generate_s: float,
    ) -> CallRecord:
        serving, fmt = self.serving, self.serving.chat_format
        text = _before_stop(fmt.decode(serving.tokenizer, generation.token_ids), request.stop)
        parsed = serving.parser.parse(text)
        reasoning, outside = fmt.split_reasoning(text, serving.starts_in_reasoning)
        calls: list[ToolCall] = [] if request.tool_choice == "none" else list(parsed.calls)
        content = outside
        for call in calls:
            content = content.replace(call.raw, "", 1)
        reply = reply_message(content.strip(), calls, reasoning, f"call_{self.id}_{index}")
        turn = Turn(
            text=text, num_tokens=len(generation.token_ids), calls=calls, parse_errors=list(parsed.errors),
            finish_reason=generation.finish_reason, generate_s=generate_s, policy_version=generation.policy_version,
            reasoning=reasoning, answer=content.strip(), calls_in_reasoning=getattr(parsed, "calls_in_reasoning", 0),
        )
        return CallRecord(
            index=index, prompt_ids=prompt, completion_ids=list(generation.token_ids), logprobs=list(generation.logprobs),
            policy_version=generation.policy_version, finish_reason=generation.finish_reason, messages=messages,
            tools=request.tools, reply=reply, history_message=fmt.assistant_message(text, calls, reasoning), turn=turn,
            extends=extends, ignored=ignored, unmet_tool_choice=_unmet(request.tool_choice, calls),
            answers={
                str(m.get("tool_call_id")): text_of(m.get("content")) for m in request.messages if m["role"] == "tool"
            },
        )


def kept_chars(request: ChatRequest, chat_format: ChatFormat) -> int:
    """Characters of the request that a render of it writes: each message's content, less what a
    template may drop (reasoning, in its field or before the family's closing marker), and the tools'
    schemas (templates write them as JSON). A lower bound on the prompt's length, read without
    rendering."""
    close = chat_format.reasoning.close if chat_format.reasoning is not None else None
    total = len(json.dumps(request.tools, ensure_ascii=False)) if request.tools else 0
    for message in request.messages:
        content = text_of(message.get("content"))
        if message["role"] == "assistant" and close:
            content = content.rpartition(close)[2]
        total += len(content)
    return total


def cut_at_stop(generation: Generation, stop: Sequence[str], serving: Serving) -> Generation:
    """The generation cut after the token that completes the first of `stop` (OpenAI's stop strings;
    the engine stops on token ids only). The ids kept are the ones sampled, so training stays exact;
    the text returned leaves the stop string out, as OpenAI does (the parser reads it without it).

    The decoded text of a prefix is a prefix of the longer one's, so once a stop string shows it
    stays: the first token that completes one is found by bisection, about log2(n) decodes where
    decoding every prefix took n (6.2 s at 8,900 tokens, on the loop every episode shares)."""
    ids = generation.token_ids
    if not stop or not _stops_in(ids, stop, serving):
        return generation
    shorter, longer = 0, len(ids)  # no stop in ids[:shorter] (empty), one in ids[:longer]
    while longer - shorter > 1:
        middle = (shorter + longer) // 2
        if _stops_in(ids[:middle], stop, serving):
            longer = middle
        else:
            shorter = middle
    return Generation(ids[:longer], generation.logprobs[:longer], "stop", generation.policy_version)


def _stops_in(ids: Sequence[int], stop: Sequence[str], serving: Serving) -> bool:
    text = serving.chat_format.decode(serving.tokenizer, list(ids))
    return any(s in text for s in stop)


def _before_stop(text: str, stop: Sequence[str]) -> str:
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text


def _same_tools(a: list[dict[str, Any]] | None, b: list[dict[str, Any]] | None) -> bool:
    return json.dumps(a or [], sort_keys=True) == json.dumps(b or [], sort_keys=True)


def _unmet(tool_choice: Any, calls: Sequence[ToolCall]) -> bool:
    if tool_choice == "required":
        return not calls
    if isinstance(tool_choice, dict):
        return not any(call.name == tool_choice["function"]["name"] for call in calls)
    return False
