"""A scripted engine: the rollout engine contract with replies you write, to test what sits above it.

Rewards, environments, agent programs, views and the agent loop itself need an engine, but their
tests should not need a model: a sampled reply is random, slow and says nothing about the code under
test. `ScriptedEngine` answers every request with a text you chose, encoded by a *real* tokenizer
(any model family's), so everything downstream runs as it does in training: token ids in, token
ids and one log-probability per sampled token out, the family's end-of-turn token appended, the
request checked as the real engines check it, `max_new_tokens` honoured.

    ScriptedEngine(tokenizer, replies, *, logprob=-0.5, chat_format="auto", delay_s=0.0)

`replies` takes one of three forms:
- a list of texts: the i-th `generate` call gets the i-th text (the last one repeats once the list
  is used up, so an agent that keeps calling a tool runs until its `max_turns`);
- a mapping {prompt substring: texts}: a request goes to the first key found in its decoded prompt,
  and gets the text for its turn (0 for the first request of a conversation, 1 for the request
  that extends it, ...; the last one repeats), so concurrent conversations and groups are scripted
  apart and deterministically;
- a callable `(prompt text) -> reply text`, for anything else (the prompt is decoded with its
  special tokens, so a test can read the template the engine was sent).

A reply that already ends in a stop token (Llama's `<|eom_id|>` after a tool call) keeps it; any
other reply gets the family's end-of-turn token (Qwen's `<|im_end|>`, Llama's `<|eot_id|>`), or the
tokenizer's eos where `chat_format="auto"` cannot place the template. `prompts` records every decoded prompt and
`weight_versions` every weight update, for tests to assert on.

>>> from rlfactory_nb._async import run_sync
>>> from rlfactory_nb.engines.base import SamplingParams
>>> from rlfactory_nb.models.presets.tokenizer import build_tokenizer
>>> tokenizer = build_tokenizer()
>>> engine = ScriptedEngine(tokenizer, ["<answer>42</answer>"])
>>> text = tokenizer.apply_chat_template([{"role": "user", "content": "6*7?"}], tokenize=False, add_generation_prompt=True)
>>> prompt = tokenizer.encode(text, add_special_tokens=False)
>>> generation = run_sync(engine.generate(prompt, SamplingParams()))
>>> tokenizer.decode(generation.token_ids), generation.finish_reason, set(generation.logprobs)
('<answer>42</answer><|im_end|>', 'stop', {-0.5})
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from rlfactory_nb.chat import resolve_chat_format
from rlfactory_nb.engines.base import (
    EngineTraits,
    Generation,
    SamplingParams,
    check_request,
    check_score_request,
    stop_token_ids_from_tokenizer,
)
from rlfactory_nb.errors import ChatFormatError

Replies = Sequence[str] | Mapping[str, Sequence[str]] | Callable[[str], str]

__all__ = ["Replies", "ScriptedEngine"]


class ScriptedEngine:
    """An engine that replies with scripted texts through a real tokenizer (see the module docstring)."""

    traits = EngineTraits(loads="objects")
    """what the trainer would need to know: made from objects in memory; takes weights and ignores them"""

    def __init__(
        self,
        tokenizer: Any,
        replies: Replies,
        *,
        logprob: float = -0.5,
        chat_format: Any = "auto",
        delay_s: float = 0.0,
    ):
        if isinstance(replies, str) or not (callable(replies) or isinstance(replies, (Sequence, Mapping))):
            raise TypeError(
                f"replies must be a list of texts, a mapping {{prompt substring: texts}} or a callable "
                f"(prompt text) -> text, got {type(replies).__name__}"
            )
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.replies = replies
        self.logprob = float(logprob)
        """the log-probability reported for every sampled (and scored) token"""
        self.delay_s = delay_s
        """seconds each request waits before it answers, to test concurrency and timeouts"""
        self.stop_token_ids = stop_token_ids_from_tokenizer(tokenizer, chat_format)
        self.end_id = _end_of_turn_id(tokenizer, chat_format, self.stop_token_ids)
        """the id appended to a reply that does not end in a stop token"""
        self.prompts: list[str] = []
        """every prompt this engine was sent, decoded with its special tokens, in order"""
        self.weight_versions: list[int | None] = []
        """the version named by each `update_weights` call"""
        self._seen: set[tuple[int, ...]] = set()

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        check_request(prompt_ids, sampling, self.vocab_size)
        prompt = self.tokenizer.decode(list(prompt_ids))  # transformers keeps special tokens by default
        turn, call = self._turn(prompt_ids), len(self.prompts)
        self.prompts.append(prompt)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        ids = self._encode(self._reply(prompt, turn, call))
        if len(ids) > sampling.max_new_tokens:
            ids = ids[: sampling.max_new_tokens]
            return Generation(ids, [self.logprob] * len(ids), "length")
        return Generation(ids, [self.logprob] * len(ids), "stop")

    async def score(self, token_ids: list[int]) -> list[float]:
        check_score_request(token_ids, self.vocab_size, None)
        return [self.logprob] * (len(token_ids) - 1)

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int | None = None) -> None:
        self.weight_versions.append(version)

    async def sleep(self) -> None:
        pass

    async def wake_up(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def _turn(self, prompt_ids: Sequence[int]) -> int:
        """How many earlier prompts this one extends: its turn within its conversation."""
        key = tuple(prompt_ids)
        turn = sum(1 for seen in self._seen if len(seen) < len(key) and key[: len(seen)] == seen)
        self._seen.add(key)
        return turn

    def _reply(self, prompt: str, turn: int, call: int) -> str:
        replies = self.replies
        if callable(replies) and not isinstance(replies, (Sequence, Mapping)):
            return replies(prompt)
        if isinstance(replies, Mapping):
            key = next((k for k in replies if k in prompt), None)
            if key is None:
                raise LookupError(f"ScriptedEngine: no key of the replies ({list(replies)}) is in the prompt {prompt[-200:]!r}")
            return _pick(replies[key], turn, f"the replies for {key!r}")
        return _pick(replies, call, "the replies")

    def _encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if not ids or ids[-1] not in self.stop_token_ids:
            ids.append(self.end_id)
        return ids


def _pick(texts: Sequence[str], index: int, what: str) -> str:
    if not texts:
        raise LookupError(f"ScriptedEngine: {what} are empty")
    return texts[min(index, len(texts) - 1)]


def _end_of_turn_id(tokenizer: Any, chat_format: Any, stop_token_ids: tuple[int, ...]) -> int:
    """The family's first end-of-turn token in the vocabulary (a base model's eos may be another)."""
    try:
        end_of_turn = resolve_chat_format(chat_format, tokenizer).end_of_turn
    except ChatFormatError:
        return stop_token_ids[0]
    vocab = tokenizer.get_vocab()
    return next((vocab[token] for token in end_of_turn if token in vocab), stop_token_ids[0])
