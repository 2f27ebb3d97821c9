"""The rollout engine contract: token ids in, token ids and logprobs out (and, to score, logprobs of given ids).

Every engine takes prompt token ids (never text: see "tokens in, tokens out" in rollout/tokens.py) and returns
exactly the ids it sampled, the logprob of each, and why it stopped. The agent loop and the trainer
only ever see this contract, so transformers ("hf") and vLLM ("vllm") engines are interchangeable.

Which logprob: `Generation.logprobs[i]` is log p(token_i | prefix) under the model's *unmodified*
distribution, the softmax of the raw logits at temperature 1, before temperature, top-k or top-p
reshape it for sampling. That is the quantity a trainer recomputes with a plain forward pass of the
same weights (the "old" logprob of PPO/GRPO), so engine and trainer compare like with like whatever
sampling settings a run uses. vLLM calls this `logprobs_mode="raw_logprobs"`.

Every engine checks each request with `check_request` before it joins a batch: a token id outside
the vocabulary, a seed torch cannot take or a NaN temperature would otherwise fail every request
batched with it (on CUDA, an index error is a device-side assert that ends the engine).

`update_weights` is async on every engine: vLLM's weight sync is an RPC to its engine process and the
hf engine waits for the batch in flight, so neither can be a plain call inside a running event loop.

Adding an engine takes one module and one registration: `@register_engine(kind, EngineTraits(...))`
on its factory. The traits say what the trainer must know (does it load a folder or take an
in-memory model, does its own process join the weight broadcast), so nothing outside the engine
modules asks which kind it is.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import torch

from rlfactory_nb.chat import eos_ids, resolve_chat_format
from rlfactory_nb.errors import (
    ArgumentTypeError,
    ChatFormatError,
    ConfigError,
    EngineRequestError,
    EngineUnavailableError,  # noqa: F401  (re-exported where callers import it)
    RegistryKeyError,
)

EngineFinishReason = Literal["stop", "length"]

MAX_SEED = 2**63 - 1
"""the largest request seed: torch generators and vLLM take 0 to 2**63 - 1"""


@dataclass(frozen=True)
class SamplingParams:
    """How one request is sampled. The same settings apply to every turn of a trajectory."""

    temperature: float = 1.0
    """softmax temperature; 0 means greedy (argmax)"""
    top_p: float = 1.0
    """nucleus sampling: keep the smallest set of tokens whose probability reaches top_p"""
    top_k: int = -1
    """keep only the k most likely tokens; -1 keeps all"""
    max_new_tokens: int = 256
    """the most tokens to generate; reaching it ends the request with finish_reason "length" """
    seed: int | None = None
    """per-request seed for reproducible samples; None draws from the engine's generator"""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ConfigError (a ValueError) naming the first field out of range. Run at construction and again by
        engines (`check_request`): a copy unpickled in another process skipped __post_init__."""
        if not (_is_real(self.temperature) and 0 <= self.temperature < math.inf):
            raise ConfigError(
                f"SamplingParams.temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}"
            )
        if not (_is_real(self.top_p) and 0 < self.top_p <= 1):
            raise ConfigError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        if not (_is_int(self.top_k) and (self.top_k == -1 or self.top_k >= 1)):
            raise ConfigError(f"SamplingParams.top_k must be -1 (off) or an integer >= 1, got {self.top_k!r}")
        if not (_is_int(self.max_new_tokens) and self.max_new_tokens >= 1):
            raise ConfigError(f"SamplingParams.max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if self.seed is not None and not (_is_int(self.seed) and 0 <= self.seed <= MAX_SEED):
            raise ConfigError(f"SamplingParams.seed must be None or an integer from 0 to 2**63 - 1, got {self.seed!r}")


def check_request(prompt_ids: Sequence[int], sampling: SamplingParams, vocab_size: int) -> None:
    """Raise EngineRequestError (a ValueError) naming the field if one request cannot be served: prompt ids outside
    0..vocab_size-1 (the rows of the model's embedding) or sampling settings out of range.

    >>> check_request([1, 2], SamplingParams(), vocab_size=3)
    >>> check_request([1, 5], SamplingParams(), vocab_size=3)
    Traceback (most recent call last):
    ...
    rlfactory_nb.errors.EngineRequestError: prompt_ids[1] = 5 is not a token id of this model (0 to 2)
    """
    if not prompt_ids:
        raise EngineRequestError("generate needs at least one prompt token")
    check_token_ids(prompt_ids, vocab_size, "prompt_ids")
    if not isinstance(sampling, SamplingParams):
        raise ArgumentTypeError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
    sampling.check()


def check_token_ids(token_ids: Sequence[int], vocab_size: int, name: str = "token_ids") -> None:
    """Raise EngineRequestError (a ValueError) naming the first entry of `token_ids` that is not a row of the embedding."""
    for index, token in enumerate(token_ids):
        if not (_is_int(token) and 0 <= token < vocab_size):
            raise EngineRequestError(f"{name}[{index}] = {token!r:.40} is not a token id of this model (0 to {vocab_size - 1})")


def check_score_request(token_ids: Sequence[int], vocab_size: int, max_length: int | None) -> None:
    """Raise EngineRequestError (a ValueError) if `score(token_ids)` cannot be served: fewer than two tokens (nothing to
    predict), ids outside the vocabulary, or more tokens than the model's context.

    >>> check_score_request([1, 2, 3], vocab_size=4, max_length=2)
    Traceback (most recent call last):
    ...
    rlfactory_nb.errors.EngineRequestError: 3 tokens exceed the model's context of 2 tokens
    """
    if len(token_ids) < 2:
        raise EngineRequestError(f"score needs at least two tokens (the first is only context), got {len(token_ids)}")
    if max_length is not None and len(token_ids) > max_length:
        raise EngineRequestError(f"{len(token_ids)} tokens exceed the model's context of {max_length} tokens")
    check_token_ids(token_ids, vocab_size)


def _is_real(value: object) -> bool:
    return type(value) in (int, float) or (isinstance(value, numbers.Real) and not isinstance(value, bool))


def _is_int(value: object) -> bool:
    """An integer, numpy's included; not a bool (the fast path first: it runs once per prompt id)."""
    return type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool))


@dataclass(frozen=True)
class Generation:
    """What an engine sampled for one request."""

    token_ids: list[int]
    """the sampled ids, in order, including the stop token when finish_reason is "stop" """
    logprobs: list[float]
    """log p(token) under the unmodified (temperature-1) model distribution, one per token"""
    finish_reason: EngineFinishReason
    """"stop": a stop token was sampled; "length": max_new_tokens was reached"""
    policy_version: int | None = None
    """the weights version (trainer steps applied) when the request was sent: every token was sampled
    by it or a newer one; None from an engine nobody versions (the rule: `rlfactory_nb.engines.versioned`)"""

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"Generation has {len(self.token_ids)} token_ids but {len(self.logprobs)} logprobs"
            )


@runtime_checkable
class Engine(Protocol):
    """A rollout engine. Implementations: HFEngine (transformers), VLLMEngine (vLLM AsyncLLM)."""

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """ids that end a generation (finish_reason "stop"); taken from the tokenizer"""
        ...

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        """Sample a continuation of `prompt_ids`; many calls may be in flight at once."""
        ...

    async def score(self, token_ids: list[int]) -> list[float]:
        """log p(token_ids[i] | token_ids[:i]) for i = 1 .. len - 1 (len - 1 values), under the same
        unmodified distribution as `Generation.logprobs`: one forward pass over fixed ids, nothing
        sampled. What `rf.compare_policies` asks of each policy."""
        ...

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int | None = None) -> None:
        """Load new weights (names as in the transformers model); later requests use them.
        `version`: the weights version they are (None: the next); an engine that keeps no version
        (hf, vllm) ignores it, a versioned one follows `rlfactory_nb.engines.versioned`."""
        ...

    async def sleep(self) -> None:
        """Free the accelerator memory the engine holds while a colocated trainer updates."""
        ...

    async def wake_up(self) -> None:
        """Undo `sleep` before the next weight update or request."""
        ...

    async def close(self) -> None:
        """Release the engine's resources; pending requests fail."""
        ...


@runtime_checkable
class BroadcastReceiver(Protocol):
    """An engine whose own process joins the trainer's weight broadcast (traits.joins_broadcast)."""

    async def open_sync_group(self, address: Any, rank: int) -> None:
        """Join the broadcast group at `address` (a `rlfactory_nb.engines.weight_sync.GroupAddress`)."""
        ...

    async def receive_weights(self, specs: list[Any]) -> None:
        """Take part in one broadcast of the tensors `specs` describe, then use them."""
        ...


@dataclass(frozen=True)
class EngineTraits:
    """What the trainer needs to know about an engine kind."""

    loads: Literal["objects", "folder"]
    """"objects": made from an in-memory (model, tokenizer) pair, so it can share the trained model
    or be given weights; "folder": loads a Hugging Face folder itself (weights follow by sync)"""
    joins_broadcast: bool = False
    """its own process joins the weight broadcast (`BroadcastReceiver`); otherwise the hosting actor
    receives the tensors and calls `update_weights`"""
    colocated_options: Mapping[str, Any] = field(default_factory=dict)
    """engine options a colocated layout sets unless the user does (e.g. vLLM's sleep mode)"""


def stop_token_ids_from_tokenizer(tokenizer: Any, chat_format: Any = "auto") -> tuple[int, ...]:
    """The ids that end an assistant turn: the tokenizer's eos id(s) plus the end-of-turn tokens of
    its model family (`chat_format`: a name, a ChatFormat, or "auto" to read it off the template).
    A template `auto` cannot place gets the eos id(s) alone: an engine can run any model, and the
    rollout, which must know the family, raises there with the list of families."""
    try:
        unique = resolve_chat_format(chat_format, tokenizer).end_of_turn_ids(tokenizer)
    except ChatFormatError:
        if chat_format != "auto":
            raise
        unique = eos_ids(tokenizer)
    if not unique:
        raise ConfigError(
            "the tokenizer has no eos_token_id and its chat format names no end-of-turn token in its "
            "vocabulary: pass stop_token_ids to the engine explicitly"
        )
    return unique


EngineFactory = Callable[..., Engine]
_ENGINES: dict[str, tuple[EngineFactory, EngineTraits]] = {}


def register_engine(kind: str, traits: EngineTraits) -> Callable[[EngineFactory], EngineFactory]:
    """Register a factory `(model_path_or_objects, **options) -> Engine` under `kind`."""

    def decorate(factory: EngineFactory) -> EngineFactory:
        _ENGINES[kind] = (factory, traits)
        return factory

    return decorate


def engine_kinds() -> tuple[str, ...]:
    return tuple(sorted(_ENGINES))


def engine_traits(kind: str) -> EngineTraits:
    return _registered(kind)[1]


def _registered(kind: str) -> tuple[EngineFactory, EngineTraits]:
    if kind not in _ENGINES:
        close = difflib.get_close_matches(kind, engine_kinds(), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise RegistryKeyError(f"unknown engine kind {kind!r}{hint}; choose one of {list(engine_kinds())}")
    return _ENGINES[kind]


def create_engine(kind: str, model_path_or_objects: Any, **options: Any) -> Engine:
    """Call the factory registered for `kind`: the registry under `rlfactory_nb.engines.build.build_engine`,
    which the package goes through (it knows what each kind is made from).

    "hf" takes a Hugging Face folder or a `(model, tokenizer)` pair; "vllm" takes a folder.
    `options` go to the engine's constructor (see HFEngine and VLLMEngine).
    """
    return _registered(kind)[0](model_path_or_objects, **options)


def context_length(engine: Any) -> int | None:
    """The most tokens (prompt + generation) `engine` takes, when it says: its `max_positions` (an
    HFEngine's model config, a vLLM engine's max_model_len, a cluster engine's actor's), looked up
    through wrappers (`.engine`); None when unknown."""
    for _ in range(8):  # wrappers wrap a few deep at most
        limit = getattr(engine, "max_positions", None)
        if isinstance(limit, int) and limit > 0:
            return limit
        engine = getattr(engine, "engine", None)
        if engine is None:
            return None
    return None
