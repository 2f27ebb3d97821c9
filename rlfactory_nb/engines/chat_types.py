"""What every chat client works with: its settings (`ChatSettings`), what it has spent
(`ChatUsage`), one reply (`ChatReply`), and the `ChatClient` protocol that an engine's client and an
endpoint's client both follow (engines/chat_client.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rlfactory_nb.errors import ConfigError
from rlfactory_nb.types import Message


@dataclass
class ChatUsage:
    """What a client (and the judge or tool over it) has spent since it was created or reset."""

    requests: int = 0
    """requests the model answered (each is billed)"""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_hits: int = 0
    """answers taken from a cache, at no cost"""
    retries: int = 0
    """HTTP attempts repeated after a connection error, timeout, 429 or 5xx"""
    failures: int = 0
    """requests given up (ChatError), or lost with a dead engine"""
    parse_errors: int = 0
    """replies the caller could not read (a judge's reply with no score)"""
    seconds: float = 0.0
    """total time spent waiting on the model, retries included"""

    def cost(self, prompt_price_per_m: float, completion_price_per_m: float) -> float:
        """Cost in the prices' currency, given prices per million prompt and completion tokens.

        >>> ChatUsage(prompt_tokens=2_000_000, completion_tokens=100_000).cost(0.5, 2.0)
        1.2
        """
        return (
            self.prompt_tokens * prompt_price_per_m + self.completion_tokens * completion_price_per_m
        ) / 1e6


@dataclass(frozen=True)
class ChatSettings:
    """How a client asks: limits, retries and sampling, the same for an engine and an endpoint."""

    max_concurrency: int = 8
    """requests in flight at once"""
    timeout_s: float = 30.0
    """each attempt, from sending to the reply's last byte (an engine request: its whole generation)"""
    max_retries: int = 3
    """HTTP attempts repeated after a transient failure (an engine request is not retried)"""
    backoff_s: float = 0.5
    """the first wait between HTTP attempts, doubled each time"""
    temperature: float = 0.0
    max_tokens: int = 1024
    """the most tokens the model may generate per reply"""
    max_reply_bytes: int = 2**20
    """an HTTP reply's body once decompressed (1 MiB holds any honest reply of max_tokens)"""

    def __post_init__(self) -> None:
        if (
            self.max_concurrency < 1
            or not 0 < self.timeout_s < float("inf")
            or self.max_retries < 0
            or self.backoff_s < 0
            or self.max_tokens < 1
            or self.max_reply_bytes < 1
        ):
            raise ConfigError(
                "need max_concurrency >= 1, 0 < timeout_s < inf, max_retries >= 0, backoff_s >= 0, "
                f"max_tokens >= 1 and max_reply_bytes >= 1; got {self.max_concurrency}, {self.timeout_s}, "
                f"{self.max_retries}, {self.backoff_s}, {self.max_tokens}, {self.max_reply_bytes}"
            )


@dataclass(frozen=True)
class ChatReply:
    text: str
    truncated: bool
    """cut off at max_tokens (finish_reason "length"): likely why a caller cannot read it"""


class ChatClient(Protocol):
    """One chat completion at a time, many in flight; `usage` counts them."""

    settings: ChatSettings
    usage: ChatUsage
    model: str
    """the model's name, for messages and cache keys"""
    where: str
    """what serves it, for messages and cache keys: the endpoint's URL or the engine's name"""

    async def complete(self, messages: Sequence[Message], seed: int | None = None) -> ChatReply: ...

    async def aclose(self) -> None: ...
